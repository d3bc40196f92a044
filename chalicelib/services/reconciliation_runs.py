"""Reconciliation runs: start one, and the phases the state machine
(infra/statemachines/reconciliation_run.asl.json) calls, each short and safe to repeat.

load     pending -> running (only the run holding the reconciliation's slot); read the open
         records of both sides (the sparse open-records index, or a stream whole on its first
         run: see `open_frames`) and the active rules, and keep them in S3 as the run's input;
match    run the engine on that input (deterministic, so a retry finds the same matches),
         reserve a block of match ids once, keep the matches in S3, and split them in chunks;
         a run of more open records than one match function holds fans out instead: the load
         splits it in partitions, a Distributed Map matches each, a merge keeps the outcome as
         match does (services/run_partitions.py);
persist  write the next chunks of matches (members, record claims, then the match items), a few
         at once, and count each once; the state machine loops until no chunk is left;
refresh  the reconciliation's exceptions (services/reconciliation_exceptions.py);
finish   completed; the reconciliation's current run becomes its last run;
fail     on any error the state machine could not retry away: undo the matches of the chunks
         a persist may have begun whose commit marker was not written (the first PERSIST_CHUNKS
         not counted: no other can hold one), then failed with the reason. No half-written match remains. It reads the
         table only, so that it works when the run's files are what was lost.
cancel   (`cancel`, the API's) ask a pending or running run to stop: a pending run ends at once
         (held as the sweeper holds its ends, so that a call dying part-way is finished); a running
         one at its next step (load, match, each partition, merge, each persist call), which sees
         `Run.cancel_requested` first and only reports it (NEXT_CANCELLED): the state machine sends
         the run to the fail phase, retried like any end, which ends it `cancelled` through
         `_end_early`: what was not committed is undone, what was stays; the end announced; the
         slot freed, giving back a continuous run's work in the same write (once). A cancel asked
         once every chunk is written comes too late (`Run.cancel_requested`): the run completes.

A working file gone from S3 (RunInputsLost, from match or persist) is not retried: nothing
brings it back, so the run fails at once and frees its slot, and a new run loads afresh. (A
match phase could load again instead; but a loop of loading files that keep vanishing would
beat the heartbeat for ever, holding the slot, so one rule serves every phase.)
"""
from __future__ import annotations

import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from chalicelib.domain import event_data
from chalicelib.domain.audit import system_actor
from chalicelib.domain.clock import utc_now
from chalicelib.domain.errors import Conflict, NotFound, TransitionRefused, failure_reason
from chalicelib.domain.events import Event
from chalicelib.domain.executions import MAP_ITEM_FAILED
from chalicelib.domain.executions import execution_name as workflow_name
from chalicelib.domain.matches import Match, MatchMember, MatchStatus
from chalicelib.domain.reconciliations import Reconciliation, RunType
from chalicelib.domain.records import RecordColumns, rows_in
from chalicelib.domain.rules import Rule
from chalicelib.domain.runs import (
    CANCEL_ANSWERED,
    MAX_RESTARTS,
    STUCK_AFTER,
    Run,
    RunKind,
    RunStatus,
    RunTooLarge,
    RunTrigger,
    chunk_records_for,
)
from chalicelib.observability import logger
from chalicelib.services import imported_records, partial_payments, period_closes, run_partitions, sweeping
from chalicelib.services import reconciliation_exceptions as exception_service
from chalicelib.services.events import announce, deciding
from chalicelib.services.matches import WRITING, release_members, used_by, write_matches
from chalicelib.services.ports import Ports
from chalicelib.services.status_moves import move_or_reload
from chalicelib.services.sweeping import GiveUp, SweptKind

if TYPE_CHECKING:  # the frame type only: services never import polars (the app runs without it)
    from chalicelib.domain.matching.frames import Frame
    from chalicelib.domain.matching.outcome import MatchOutcome

# Chunks one persist task writes at once (their matches are disjoint), CLAIM_THREADS claims each: the
# client's 32 connections (adapters/aws.py) kept busy. 8,000 records a task, and a 10M-record run's
# 5,000 chunks in 1,250 tasks, well inside an execution's 25,000 history events
# (tests/unit/test_run_state_machine.py). The fail phase undoes as many chunks, so lowering it while
# runs are in flight would leave a begun chunk unseen.
PERSIST_CHUNKS = 4
PLAN_ROW_GROUP = 16_384    # rows per Parquet row group of the plan: a persist call decodes one or two
ADOPT_THREADS = 8
ADOPT_SLICE = 10_000   # records of a stream being adopted, reopened a slice at a time
UNDO_THREADS = 8       # member reads of a failed run's uncommitted matches at once
RUN_DECISIONS = "reconciliation_run"  # the sweeper's held decisions on runs (events.deciding)
DRY_RUN_COUNT_SECONDS = 5.0  # a refused dry run counts the open records for its message at most this long
RUN_COUNT_SECONDS = 60.0  # a run refused part-way through its load counts them at most this long


NEXT_CANCELLED = "cancelled"  # the state machine's `next`: a step saw a cancel request (GiveUp ends the run)


class RunWithoutSlot(Exception):
    """The run never got its reconciliation's slot; the state machine fails it."""


class TooManyOpenRecords(Exception):
    """More open records than the reader was allowed to load."""


# Starting -------------------------------------------------------------------------------------

def start_run(ports: Ports, environment: str, reconciliation_id: int, *, kind: RunKind = RunKind.BATCH,
              trigger: RunTrigger = RunTrigger.MANUAL, new_record_jobs: Iterable[int] = (),
              whole_pool_request: int | None = None) -> Run:
    """Create the run, take the reconciliation's one run slot (409 while another run is pending
    or running), then start the state machine. A continuous run given the reconciliation's
    `whole_pool_request` takes it and matches the whole open pool."""
    ports.reconciliations.get(environment, reconciliation_id)  # 404 first
    run = Run(environment=environment, id=ports.counters.next_id(environment, "run"),
              reconciliation_id=reconciliation_id, kind=kind, trigger=trigger, status=RunStatus.PENDING,
              created_at=utc_now(), new_record_jobs=tuple(sorted(set(new_record_jobs))),
              whole_pool=whole_pool_request is not None)
    ports.runs.add(run)
    if not _take_slot(ports, environment, reconciliation_id, run.id):
        ports.runs.discard(run)
        raise Conflict(f"reconciliation {reconciliation_id} has a run pending or running; wait for it to finish")
    if run.new_record_jobs:
        ports.runs.drop_pending_jobs(environment, reconciliation_id, run.new_record_jobs)  # this run takes them
    if whole_pool_request is not None:
        ports.runs.drop_whole_pool_request(environment, reconciliation_id, whole_pool_request)
    ports.run_workflows.start(execution_name(run, 0), {"environment": environment, "run_id": run.id})
    return run


def _take_slot(ports: Ports, environment: str, reconciliation_id: int, run_id: int) -> bool:
    """Take the free slot; or one whose holder finished without freeing it (its finish task
    gave up), or never existed (a start that died before writing its run)."""
    if ports.runs.claim_slot(environment, reconciliation_id, run_id):
        return True
    holder_id = ports.reconciliations.get(environment, reconciliation_id).current_run_id
    if holder_id is None:
        return ports.runs.claim_slot(environment, reconciliation_id, run_id)
    holder = ports.runs.get_many(environment, [holder_id]).get(holder_id)
    if holder is not None and not holder.finished:
        return False
    jobs, whole_pool = _given_back(holder) if holder is not None else ((), False)
    return ports.runs.take_over_slot(environment, reconciliation_id, holder_id, run_id, jobs=jobs,
                                     whole_pool=whole_pool)


def execution_name(run: Run, attempt: int | str) -> str:
    """Unique per restart: Step Functions refuses a name it ran before."""
    return workflow_name(run.environment, "run", run.id, *([f"r{attempt}"] if attempt else []))


def sweep(ports: Ports, now: datetime | None = None) -> dict[str, int]:
    """No run stays pending or running for ever: one with no progress for STUCK_AFTER starts its
    state machine again (every phase resumes where it stopped), at most MAX_RESTARTS times, and
    then fails (undoing what it had not committed). A stuck run with a cancel requested is not
    restarted: it ends cancelled (`give_up` honours the request), counted as `cancelled`. One run's
    trouble stops no other."""
    return sweeping.sweep(ports, SWEPT_RUNS, now)


def _judge(ports: Ports, run: Run, now: datetime) -> sweeping.Verdict:
    if not run.stuck(now):
        return None
    if run.cancel_requested:  # its execution died before a step saw the cancel: end it as that step would
        return GiveUp("cancelled on request; its execution had stopped before ending it", outcome="cancelled")
    if run.restarts >= MAX_RESTARTS:
        return GiveUp(f"no progress for over {STUCK_AFTER.total_seconds() / 60:.0f} minutes; {run.restarts} "
                      "restarts did not help")
    return sweeping.RESTART


# Through lambdas where the functions called are defined further down.
SWEPT_RUNS = SweptKind[Run](
    decisions=RUN_DECISIONS, noun="run", outcomes=("restarted", "failed", "cancelled"),
    active=lambda ports: ports.runs.active(), judge=_judge,
    give_up=lambda ports, run, verdict: give_up(ports, run.environment, run.id, verdict.reason),
    finish_if_ended=lambda ports, environment, run_id: _finish_if_ended(ports, environment, run_id),
    restart=lambda ports, run: "restarted" if restart(ports, run) else None)


def restart(ports: Ports, run: Run, resumed_at: datetime | None = None) -> bool:
    """Start the run's state machine again (every phase resumes where it stopped). False when not
    claimed (sweeping.claim_restart, which counts it against MAX_RESTARTS unless it is a resume)."""
    attempt = sweeping.claim_restart(ports.runs.count_restart, run, resumed_at)
    if attempt is None:
        return False
    ports.run_workflows.start(execution_name(run, attempt), {"environment": run.environment, "run_id": run.id})
    return True


def on_records_ingested(ports: Ports, environment: str, job_id: int, stream_keys: Iterable[str]) -> None:
    """A finished ingestion wrote records into `stream_keys`: every continuous reconciliation
    using one of them matches the new records against its open ones. The job waits on the
    reconciliation until a run takes it (now, or when the run in progress finishes)."""
    users = {u.reconciliation_id
             for key in stream_keys for u in ports.reconciliations.users_of_stream(environment, key)}
    for reconciliation_id in sorted(users):
        reconciliation = ports.reconciliations.find_including_deleting(environment, reconciliation_id)
        if reconciliation is None or reconciliation.deleting or reconciliation.run_type is not RunType.CONTINUOUS:
            continue
        ports.runs.add_pending_jobs(environment, reconciliation_id, [job_id])
        start_pending(ports, environment, reconciliation_id)


# What a change must touch for a continuous reconciliation to match its whole open pool again.
POOL_CHANGING_RECONCILIATION_FIELDS = frozenset({"side_a_stream_keys", "side_b_stream_keys", "run_type"})
RULE_FIELDS_THAT_KEEP_THE_POOL = frozenset({"name"})  # a renamed rule matches what it matched


def after_reconciliation_saved(ports: Ports, environment: str, reconciliation_id: int,
                               changed: set[str] | None = None) -> bool:
    """A reconciliation created (`changed` None) or edited: if its sides or run type changed,
    what it may match changed. True when that asked for a run (the reconciliation moved on)."""
    if changed is not None and not changed & POOL_CHANGING_RECONCILIATION_FIELDS:
        return False
    on_reconciliation_changed(ports, environment, reconciliation_id)
    return True


def after_rule_saved(ports: Ports, environment: str, rule: Rule, changed: set[str] | None = None) -> None:
    """A rule created (`changed` None) or edited: an active rule that is new, activated or changed
    may match records open before it, not only records arriving later."""
    if rule.definition.active and (changed is None or changed - RULE_FIELDS_THAT_KEEP_THE_POOL):
        on_reconciliation_changed(ports, environment, rule.reconciliation_id)


def on_reconciliation_changed(ports: Ports, environment: str, reconciliation_id: int) -> Run | None:
    """The reconciliation was created, a rule added, activated or changed, or its sides (or run
    type) changed: a continuous reconciliation matches its whole open pool, the backlog
    included, by the next run (now, or when the run in progress finishes, or, with no active
    rule yet, once one is active). Batch reconciliations match what is open whenever they run."""
    reconciliation = ports.reconciliations.find_including_deleting(environment, reconciliation_id)
    if reconciliation is None or reconciliation.deleting or reconciliation.run_type is not RunType.CONTINUOUS:
        return None
    try:
        ports.runs.request_whole_pool(environment, reconciliation_id)
        return start_pending(ports, environment, reconciliation_id)
    except Exception:  # the change is saved: answer it; a request made stays for the next ingestion or run end
        logger.exception("requesting or starting a whole-pool run failed",
                         extra={"reconciliation_id": reconciliation_id})
        return None


def start_pending(ports: Ports, environment: str, reconciliation_id: int,
                  held_back: tuple[frozenset[int], bool] = (frozenset(), False)) -> Run | None:
    """Start a continuous run for what waits on the reconciliation, if anything and if free: the
    ingestions whose records are new, and a request to match the whole open pool (taken only
    once a rule is active: a run without one matches nothing). `held_back`: the jobs, and whether
    the whole-pool request, a run that ended early gave back (they wait for a later start)."""
    jobs, whole_pool = ports.runs.pending_work(environment, reconciliation_id)
    jobs = [job for job in jobs if job not in held_back[0]]
    if held_back[1]:
        whole_pool = None
    if whole_pool is not None and not active_rules(ports, environment, reconciliation_id):
        whole_pool = None
    if not jobs and whole_pool is None:
        return None
    trigger = RunTrigger.RECORDS_INGESTED if whole_pool is None else RunTrigger.RECONCILIATION_CHANGED
    try:
        return start_run(ports, environment, reconciliation_id, kind=RunKind.CONTINUOUS, trigger=trigger,
                         new_record_jobs=jobs, whole_pool_request=whole_pool)
    except (Conflict, NotFound):
        return None  # busy: the run in progress starts it when it finishes


# The phases -----------------------------------------------------------------------------------

def load(ports: Ports, environment: str, run_id: int) -> str | dict[str, Any]:
    """Read the run's input. A run of more open records than one match function holds fans out
    (run_partitions.fan_out: the answer then is the Map's input) when its rules allow a partition
    plan, and is refused before a record is read when they do not (RunTooLarge, naming why)."""
    from chalicelib.domain.matching.partition import partition_refusal

    run = ports.runs.get(environment, run_id)
    if run.finished:
        return "done"
    if run.cancel_requested:
        return NEXT_CANCELLED
    if run.status is RunStatus.PENDING:
        run = move_or_reload(ports.runs, run, RunStatus.RUNNING, started_at=utc_now())
        if run.finished:  # the API's cancel ended it pending meanwhile
            return "done"
    if run.chunks is not None:
        return "persist"
    if (fanned_out := run_partitions.resumed(ports, run)) is not None:
        return fanned_out
    reconciliation = ports.reconciliations.get(environment, run.reconciliation_id)
    if reconciliation.current_run_id != run.id:  # a crash between creating it and taking the slot
        raise RunWithoutSlot(f"run {run.id} does not hold reconciliation {reconciliation.id}'s run slot")
    rules = active_rules(ports, environment, reconciliation.id)
    new_jobs = set(run.new_record_jobs) if run.only_new else None
    size = RunSize(ports.limits.run_records, ports.limits.fanout_records, partition_refusal(rules))
    _refuse_if_too_large(ports, environment, reconciliation, run, size)
    try:
        side_a, side_b = open_frames(ports, environment, reconciliation, rules, new_jobs, adopt=True,
                                     limit=size.ceiling)
    except TooManyOpenRecords:  # more than the streams' counts said: they lag behind ingestion
        raise RunTooLarge(_too_many_for_a_run(ports, environment, reconciliation, run, size)) from None
    ports.run_files.write_frame(environment, run.id, "side_a", side_a)
    ports.run_files.write_frame(environment, run.id, "side_b", side_b)
    total = side_a.height + side_b.height
    ports.run_files.write_rules(environment, run.id, rules)
    if total > size.one_function:
        return run_partitions.fan_out(ports, run, rules, side_a, side_b)
    ports.runs.save_loaded(run, total)
    return "match"


def next_without_matching(run: Run) -> str | None:
    """Where a matching step (Match, or a fanned-out run's Merge) goes without matching: a run ended,
    asked to stop, or matched already (a retry after its plan was kept); None: match."""
    if run.finished:
        return "done"
    if run.cancel_requested:
        return NEXT_CANCELLED
    if run.chunks is not None:
        return "persist" if run.next_chunk() is not None else "finish"
    return None


def match(ports: Ports, environment: str, run_id: int) -> str:
    from chalicelib.domain.matching import match_records
    from chalicelib.domain.matching.frames import engine_frames

    run = ports.runs.get(environment, run_id)
    if (skipped := next_without_matching(run)) is not None:
        return skipped
    side_a = ports.run_files.read_frame(environment, run.id, "side_a")
    side_b = ports.run_files.read_frame(environment, run.id, "side_b")
    rules = ports.run_files.read_rules(environment, run.id, run.reconciliation_id)
    engine_a, engine_b = engine_frames(side_a, side_b, only_new=run.only_new)
    outcome = match_records(engine_a, engine_b, rules, only_new=run.only_new)
    outcome = partial_payments.in_run(ports, run, outcome, side_a, side_b, rules)  # docs/partial-payments.md
    return save_outcome(ports, run, outcome, side_a, side_b)


def save_outcome(ports: Ports, run: Run, outcome: MatchOutcome, side_a: Frame, side_b: Frame) -> str:
    """Keep the run's matches (from the match phase, or the merge of a fanned-out run): reserve a
    block of match ids once, write the plan's files, cut in persist chunks."""
    from chalicelib.domain.matching.frames import plan_chunks

    environment, count = run.environment, outcome.matches.height
    first_match_id = ports.counters.next_ids(environment, "match", count).start if count else 0
    chunk_records = chunk_records_for(outcome.members.height, ports.limits.chunk_records)
    matches, members, chunk_starts = plan_chunks(outcome, side_a, side_b, chunk_records)
    # Named by the id block: should two executions ever match at once, the plan stored first
    # (its ids, its files) is the one persisted.
    ports.run_files.write_frame(environment, run.id, f"matches-{first_match_id}", matches, PLAN_ROW_GROUP)
    ports.run_files.write_frame(environment, run.id, f"members-{first_match_id}", members, PLAN_ROW_GROUP)
    run = ports.runs.save_plan(run, first_match_id=first_match_id, matches_count=count, chunk_starts=chunk_starts,
                               total_records=side_a.height + side_b.height, rule_summary=outcome.rule_summary)
    return "persist" if run.next_chunk() is not None else "finish"


def persist(ports: Ports, environment: str, run_id: int, chunks: int = 1) -> str:
    """Write the first `chunks` chunks not yet written, at once (their matches are disjoint), each
    counted as it ends: `matched_records` and `progress` move chunk by chunk. The state machine's
    task writes PERSIST_CHUNKS a call (one execution's history holds 25,000 events)."""
    run = ports.runs.get(environment, run_id)
    if run.finished:
        return "done"
    if run.cancel_requested:
        return NEXT_CANCELLED
    batch = run.next_chunks(min(chunks, PERSIST_CHUNKS))
    if not batch:
        return "finish"
    first_match_id = run.plan_first_match_id  # a run with a chunk to persist has its plan
    # Read first, one after the other: a lost file ends the call at its first read, before any write.
    plans = [(chunk, ports.run_files.read_frame(environment, run.id, f"matches-{first_match_id}", chunk=chunk),
              ports.run_files.read_frame(environment, run.id, f"members-{first_match_id}", chunk=chunk))
             for chunk in batch]
    if len(plans) == 1:
        run = ports.runs.save_chunk(run, *_persist_chunk(ports, run, *plans[0]))
    else:
        # Chunks are written side by side, counted here one at a time as each ends: the run's item
        # takes one count at a time (a store without atomic updates under threads, moto's, lost one).
        with ThreadPoolExecutor(len(plans)) as pool:
            for written in as_completed([pool.submit(_persist_chunk, ports, run, *plan) for plan in plans]):
                run = ports.runs.save_chunk(run, *written.result())
    return "persist" if run.next_chunk() is not None else "finish"


@period_closes.worker_unit  # its guard (planned_outside_closed) and writes behind the closing fence
def _persist_chunk(ports: Ports, run: Run, chunk: int, matches: Frame, members: Frame) -> tuple[int, int, int]:
    """Write one chunk's matches; gives what its count needs: the chunk, its matched records (those
    of matches written now or before: a retried chunk counts what it finds committed), its conflicts."""
    from chalicelib.domain.matching.frames import members_money, planned_matches, stream_keys

    environment, first_match_id = run.environment, run.plan_first_match_id
    uses = used_by(ports.reconciliations, environment, stream_keys(members))
    batch = planned_matches(matches, members, environment=environment, reconciliation_id=run.reconciliation_id,
                            run_id=run.id, first_match_id=first_match_id, created_at=utc_now())
    # A retried chunk leaves out what it wrote before: a person may have confirmed or unmatched it since.
    done_before = ports.matches.existing_ids(environment, [m.id for m, _ in batch])
    open_batch = period_closes.planned_outside_closed(ports, environment, run.reconciliation_id, batch, members)
    period_closes.hold_run_chunk(ports, run, chunk)  # a close refuses until its claims are committed or released
    carried = ports.limits.carry_match_members
    if carried:
        ports.matches.journal_members(environment, run.id, chunk, batch)  # every planned match: see journal_members
    written = write_matches(ports, [(m, ms) for m, ms in open_batch if m.id not in done_before], uses,
                            journaled=carried)
    # A match a close now holds may have claimed its records in an attempt that died before its commit
    # (a chunk persisted before its hold was kept): those records stay open, so its claims go too.
    outside_closed = {m.id for m, _ in open_batch}
    for match, of_match in batch:
        if match.id not in outside_closed and match.id not in done_before:
            release_members(ports, match, of_match, uses)
    if carried:
        ports.matches.forget_journal(environment, run.id, chunk)  # each match committed or released: none to undo
    period_closes.let_go_run_chunk(ports, run, chunk)
    money = members_money(members, ports.limits.keep_money_from)
    for match in written:  # a retry that finds it written leaves it to the first trace through it
        if (kept := money.get(match.id - first_match_id)) is not None:
            ports.matches.keep_money(environment, match.id, kept)
    written += [m for m, _ in batch if m.id in done_before]
    return chunk, sum(m.record_count for m in written), len(batch) - len(written)


def refresh_exceptions(ports: Ports, environment: str, run_id: int) -> str:
    """Records this run left unmatched past the grace period join exceptions; matched ones leave."""
    run = ports.runs.get(environment, run_id)
    if run.finished:
        return "done"
    try:
        exception_service.refresh(ports, environment, run.reconciliation_id)
        exception_service.request_neighbour_refreshes(ports, environment, run.reconciliation_id)
    except Exception:  # the matches are committed: the run stands, and the sweeper refreshes (asked to here)
        logger.exception("refreshing exceptions after a run failed", extra={"run_id": run.id})
        try:
            ports.reconciliations.request_exceptions_refresh(environment, run.reconciliation_id)
        except Exception:  # then within the hour, as every reconciliation is
            logger.exception("requesting a refresh after a run failed", extra={"run_id": run.id})
    return "finish"


def finish(ports: Ports, environment: str, run_id: int) -> str:
    run = ports.runs.get(environment, run_id)
    if run.status is RunStatus.RUNNING:
        run = move_or_reload(ports.runs, run, RunStatus.COMPLETED, completed_at=utc_now())
    if run.finished:
        _announce_end(ports, run)
        _release(ports, run)
    return "done"


def _announce_end(ports: Ports, run: Run) -> None:
    """Again on a retried task that finds the run ended (same event id): a crash loses no event."""
    announce(ports, event_data.run_ended(run), run.environment, actor=system_actor("reconciliation_run", run.id),
             summary_fields=("status", "total_records", "matched_records", "matches_count", "rule_summary",
                             "matches_url", "error_message"))


def _finish_if_ended(ports: Ports, environment: str, run_id: int) -> Event | None:
    """A run the sweeper gave up on, whose sweeper died part-way: `give_up` again (on a failed run it
    only announces, frees the slot and hands on what waited). None when it has not ended."""
    run = sweeping.ended(ports.runs.get, environment, run_id)
    if run is None:
        return None
    if run.status in (RunStatus.FAILED, RunStatus.CANCELLED):
        give_up(ports, environment, run_id, None)
    else:
        _announce_end(ports, run)
    return event_data.run_ended(run)


def give_up(ports: Ports, environment: str, run_id: int, error: Any) -> str:
    """Undo the matches the run claimed records for but never committed, then `failed` with the
    reason; or `cancelled` when a cancel was asked for (the client asked it to stop, and it has: the
    steps only report a cancel, NEXT_CANCELLED, and the state machine sends it here, retried). On a
    run that ended already it finishes what its end left undone. NEXT_CANCELLED once cancelled."""
    run = ports.runs.get(environment, run_id)
    if run.cancel_requested:
        run = _end_early(ports, run, RunStatus.CANCELLED)
    else:
        # A partition that failed for good names itself (run_partitions.partition_failed); the Map's
        # own error only says that an item failed. Any other error is the reason, even when a
        # partition of an earlier execution failed (a restart matched it since).
        map_failed = isinstance(error, dict) and error.get("Error") == MAP_ITEM_FAILED
        reason = run.failed_partition if map_failed and run.failed_partition else describe_error(error)
        run = _end_early(ports, run, RunStatus.FAILED, error_message=reason)
    return NEXT_CANCELLED if run.status is RunStatus.CANCELLED else "done"


def cancel(ports: Ports, environment: str, reconciliation_id: int, run_id: int) -> Run:
    """Ask a pending or running run to stop (a repeat only moves `cancellation_requested_at`, on a run
    its cancel already ended too; Conflict on a completed or failed one). A pending run ends at once,
    by a write from pending alone, held as the sweeper holds its own ends (events.deciding): should
    this call die after the write, the sweeper finishes the end (`_finish_if_ended`). A running one
    ends at its next step, which reports the request (NEXT_CANCELLED) and goes to `give_up`."""
    run = ports.runs.get(environment, run_id)
    if run.reconciliation_id != reconciliation_id:
        raise NotFound(f"run {run_id} not found in reconciliation {reconciliation_id}")
    run = ports.runs.request_cancellation(run, CANCEL_ANSWERED)
    if run.status is RunStatus.PENDING:
        with deciding(ports, RUN_DECISIONS, environment, run.id):
            run = _end_early(ports, run, RunStatus.CANCELLED, only_pending=True)
    return run


def _end_early(ports: Ports, run: Run, target: RunStatus, *, only_pending: bool = False, **fields: Any) -> Run:
    """The one way a run ends before completing, `failed` or `cancelled`, and safe to repeat: undo the
    matches of the chunks a persist may have begun and not committed (committed ones stay), move it
    (`only_pending`: only from pending, the API's cancel, which must not race with a step), announce
    the end, free the slot and give its work back (`_release`). The run as stored: unfinished when
    `only_pending` found it running (its next step ends it)."""
    if not run.finished:
        in_progress = run.next_chunks(PERSIST_CHUNKS)  # none before the plan, nor once all are written
        if in_progress:
            _undo_uncommitted(ports, run, in_progress)
        try:
            end = ports.runs.end_pending if only_pending else ports.runs.move
            run = end(run, target, completed_at=utc_now(), **fields)
        except TransitionRefused:
            run = ports.runs.get(run.environment, run.id)
        if not run.finished:
            return run
        for chunk in in_progress:  # their claims released or committed: a close need not wait for them
            period_closes.let_go_run_chunk(ports, run, chunk)
    _announce_end(ports, run)
    _release(ports, run)
    return run


def _release(ports: Ports, run: Run) -> None:
    """Free the finished run's slot. A run that did not complete gives back, in that same conditional
    write, the ingestions a continuous run had taken and its whole-pool request: only the holder frees
    the slot, so the work is given back once however often an end is repeated (a retried task, the
    sweeper finishing an end). Then what waited starts, but not what this run gave back: that waits for
    the next run (an ingestion, a change, another run's end), or a run that fails every time would
    start again at once."""
    jobs, whole_pool = _given_back(run)
    ports.runs.release_slot(run.environment, run.reconciliation_id, run.id, jobs=jobs, whole_pool=whole_pool)
    start_pending(ports, run.environment, run.reconciliation_id, held_back=(frozenset(jobs), whole_pool))


def _given_back(run: Run) -> tuple[tuple[int, ...], bool]:
    """What a finished run gives back as its slot is freed (or taken over from it): the ingestions a
    continuous run took and whether its whole-pool request, unless it completed (it matched them)."""
    if run.status is RunStatus.COMPLETED:
        return (), False
    return run.new_record_jobs, run.whole_pool


def _undo_uncommitted(ports: Ports, run: Run, chunks: list[int]) -> None:
    """Only the chunks a persist call may be writing (`Run.next_chunks`) can hold half-written
    matches. Undone from the table alone, never from the plan's files (they may be what was lost): a
    match's member items are written before its claims and deleted after their release, so
    every claim of an uncommitted match is found through its members. A retry after dying
    part-way finds what is left (a record is released only while the match holds it). A run's small
    matches keep their members in the chunk's journal instead, written before its claims too."""
    match_ids = sorted({i for chunk in chunks for i in run.chunk_match_ids(chunk)})
    committed = ports.matches.existing_ids(run.environment, match_ids)
    uncommitted = [i for i in match_ids if i not in committed]
    journaled: dict[int, list[MatchMember]] = {}
    for chunk in chunks:
        journaled.update(ports.matches.journaled_members(run.environment, run.id, chunk))
    with ThreadPoolExecutor(UNDO_THREADS) as pool:
        members = dict(zip(uncommitted, pool.map(lambda i: ports.matches.members(run.environment, i), uncommitted),
                           strict=True))
    for match_id, of_match in members.items():  # a small match's members are in the journal alone
        kept = {m.record_id for m in of_match}
        of_match += [m for m in journaled.get(match_id, ()) if m.record_id not in kept]
    uses = used_by(ports.reconciliations, run.environment, {m.data_stream_key for ms in members.values() for m in ms})
    for match_id, of_match in members.items():
        if of_match:
            stub = Match(environment=run.environment, id=match_id, reconciliation_id=run.reconciliation_id,
                         status=MatchStatus.PROPOSED, group_key="", record_count=0, created_at=utc_now())
            release_members(ports, stub, of_match, uses)
    for chunk in chunks:  # every claim of them released
        ports.matches.forget_journal(run.environment, run.id, chunk)


def dry_run(ports: Ports, environment: str, rule_id: int, sample_size: int = 10,
            all_near_misses: bool = False) -> dict[str, Any]:
    """What the rule would match now, written nowhere: the active rules before it in priority
    take their share of the open records first, as in a run; and, for the records left open, their
    closest candidates under the rule and the conditions those fail (domain/matching/near_misses.py):
    those of the sample shown by default, every one (counted by condition) with `all_near_misses`,
    which costs several seconds more at the open-records limit (docs/near-misses.md).
    Refused (Conflict) above `dry_run_records` open records, which could not be matched within the
    API's time."""
    from chalicelib.domain.matching.dry_run import dry_run_answer

    rule = ports.reconciliation_rules.get(environment, rule_id)
    reconciliation = ports.reconciliations.get(environment, rule.reconciliation_id)
    before = [r for r in active_rules(ports, environment, reconciliation.id)
              if (r.definition.priority, r.id) < (rule.definition.priority, rule.id)]
    try:
        side_a, side_b = open_frames(ports, environment, reconciliation, before + [rule], None,
                                     limit=ports.limits.dry_run_records)
    except TooManyOpenRecords:
        raise Conflict(_too_many_for_a_dry_run(ports, environment, reconciliation)) from None
    allocated = partial_payments.allocated_in(ports, environment, reconciliation.id)  # as a run reads them
    return {"reconciliation_rule_id": rule.id, "open_records": {"side_a": side_a.height, "side_b": side_b.height},
            **dry_run_answer(side_a, side_b, before, rule, sample_size, all_near_misses, allocated)}


def _too_many_for_a_dry_run(ports: Ports, environment: str, reconciliation: Reconciliation) -> str:
    """The refusal, with the open records counted (for a few seconds at most: past that, a lower bound)."""
    counted = _open_counts(ports, environment, reconciliation, time.monotonic() + DRY_RUN_COUNT_SECONDS)
    return (f"reconciliation {reconciliation.id} has {counted}; a dry run matches at most "
            f"{ports.limits.dry_run_records:,}, to answer within the API's time limit. Start a run instead: "
            f"POST /v1/reconciliations/{reconciliation.id}/runs")


@dataclass(frozen=True)
class RunSize:
    """What a run may load: `one_function` open records are matched in one piece; more fan out, up
    to `fanout`, unless the rules allow no partition plan (`refusal` says why): then one piece is all."""
    one_function: int
    fanout: int
    refusal: str

    @property
    def ceiling(self) -> int:
        return self.one_function if self.refusal else max(self.fanout, self.one_function)


def _refuse_if_too_large(ports: Ports, environment: str, reconciliation: Reconciliation, run: Run,
                         size: RunSize) -> None:
    """RunTooLarge before a record is loaded when the streams may hold more open records than a run
    takes: their counts (cheap, and behind by the latest ingestions) say so, and then the open
    records counted (Select COUNT) do. The load itself stops at the limit, for what the counts missed."""
    stream_keys = reconciliation.side_a_stream_keys + reconciliation.side_b_stream_keys
    streams = ports.data_streams.get_many(environment, stream_keys)
    if sum(stream.records_count for stream in streams.values()) <= size.ceiling:
        return
    counted = _open_counts(ports, environment, reconciliation, None)
    if counted.total > size.ceiling:
        raise RunTooLarge(_too_many_for_a_run(ports, environment, reconciliation, run, size, counted))


def _too_many_for_a_run(ports: Ports, environment: str, reconciliation: Reconciliation, run: Run, size: RunSize,
                        counted: OpenCounts | None = None) -> str:
    counted = counted or _open_counts(ports, environment, reconciliation, time.monotonic() + RUN_COUNT_SECONDS)
    if size.refusal:
        return (f"run {run.id}: reconciliation {reconciliation.id} has {counted}; one match function holds at most "
                f"{size.one_function:,} open records (RECON_MAX_RUN_RECORDS), and this run cannot be split in "
                f"partitions: {size.refusal}. Match fewer at a time: split the reconciliation's streams between "
                "reconciliations, or give every rule a common equality condition")
    return (f"run {run.id}: reconciliation {reconciliation.id} has {counted}; a run matches at most "
            f"{size.ceiling:,} open records in partitions (RECON_MAX_FANOUT_RUN_RECORDS). Match fewer at "
            "a time: split the reconciliation's streams between reconciliations")


@dataclass(frozen=True)
class OpenCounts:
    side_a: int
    side_b: int
    complete: bool  # False: the count stopped at its deadline, a lower bound

    @property
    def total(self) -> int:
        return self.side_a + self.side_b

    def __str__(self) -> str:
        total = f"{self.total:,}" if self.complete else f"more than {self.total:,}"
        return (f"{total} open records ({self.side_a:,} on side A, {self.side_b:,} on side B"
                f"{'' if self.complete else ' counted so far'})")


def _open_counts(ports: Ports, environment: str, reconciliation: Reconciliation,
                 deadline: float | None) -> OpenCounts:
    """Each side's open records, counted (Select COUNT) until `deadline` at most."""
    counts, complete = [], True
    for streams in (reconciliation.side_a_stream_keys, reconciliation.side_b_stream_keys):
        counts.append(0)
        for key in streams:
            adopted = ports.claims.is_adopted(environment, reconciliation.id, key)
            found, finished = ports.claims.count_open(environment, key, reconciliation.id, adopted, deadline)
            counts[-1] += found
            complete = complete and finished
    return OpenCounts(counts[0], counts[1], complete)


# Open records (the frame code is in domain/matching/frames.py) -----------------------------------

def active_rules(ports: Ports, environment: str, reconciliation_id: int) -> list[Rule]:
    return sorted((r for r in ports.reconciliation_rules.list_of(environment, reconciliation_id)
                   if r.definition.active),
                  key=lambda r: (r.definition.priority, r.id))


def open_frames(ports: Ports, environment: str, reconciliation: Reconciliation, rules: list[Rule],
                new_jobs: set[int] | None, adopt: bool = False, limit: int | None = None) -> tuple[Frame, Frame]:
    """The open records of each side, with the metadata keys the rules read. A stream the
    reconciliation has not adopted yet is read whole; with `adopt`, its records reconciled
    before it joined are opened again and the stream is adopted (read from the open index).
    Read page by page into columns (domain/matching/frames.py); past `limit` records in all,
    TooManyOpenRecords."""
    from chalicelib.domain.matching.frames import open_records_frame

    metadata_keys = sorted({f for r in rules for c in r.definition.conditions for f in (c.field, c.b_field)
                            if f.startswith("metadata.")}
                           | {f for r in rules for f in r.definition.group_by.side_a + r.definition.group_by.side_b
                              if f.startswith("metadata.")})
    # A job still writing may write a record again (a retried chunk), which would wipe a match
    # made meanwhile: its records wait for the run that follows its completion.
    writing = {job.id for job in ports.ingestion_jobs.active()
               if job.environment == environment and job.status in WRITING}
    frames = []
    for streams in (reconciliation.side_a_stream_keys, reconciliation.side_b_stream_keys):
        adopted = {key: ports.claims.is_adopted(environment, reconciliation.id, key) for key in streams}
        pages = (page for key in streams for page in _open_record_pages(
            ports, environment, reconciliation.id, key, adopted[key], bool(metadata_keys), limit))
        frame = open_records_frame(_at_most(pages, limit), metadata_keys, new_jobs, writing)
        for key in streams:
            if adopt and not adopted[key]:
                _adopt(ports, environment, reconciliation.id, key, frame)
        frames.append(period_closes.open_outside_closed(ports, environment, reconciliation.id,
                                                        frame.drop("status")))  # a closed period's stay open
        limit = None if limit is None else limit - frame.height
    from chalicelib.services import rate_streams  # converting rules' amounts (docs/currencies.md)

    return rate_streams.add_conversions(ports, environment, rules, frames[0], frames[1])


def _open_record_pages(ports: Ports, environment: str, reconciliation_id: int, stream_key: str, adopted: bool,
                       with_metadata: bool, limit: int | None) -> Iterable[RecordColumns]:
    """A stream's records open in the reconciliation: from the analytics mirror where it gives the
    table's records (services/imported_records.py), a million in a second or two, and the blocks
    changed since their import from the table; else all from the table."""
    from_mirror = imported_records.open_pages(ports, environment, stream_key, reconciliation_id, adopted,
                                              with_metadata, limit)
    if from_mirror is not None:
        return from_mirror
    return ports.claims.open_record_columns(environment, stream_key, reconciliation_id, adopted,
                                            with_metadata=with_metadata)


def _at_most(pages: Iterable[RecordColumns], limit: int | None) -> Iterable[RecordColumns]:
    """The pages as they come, until more than `limit` records in all: then TooManyOpenRecords,
    before the rest is read."""
    read = 0
    for page in pages:
        read += rows_in(page)
        if limit is not None and read > limit:
            raise TooManyOpenRecords()
        yield page


def _adopt(ports: Ports, environment: str, reconciliation_id: int, stream_key: str, frame: Frame) -> None:
    from chalicelib.domain.matching.frames import reconciled_records, reconciled_slices

    reconciled = reconciled_records(frame, stream_key)
    if reconciled.height:
        users = used_by(ports.reconciliations, environment, [stream_key])[stream_key]
        with ThreadPoolExecutor(ADOPT_THREADS) as pool:
            for part in reconciled_slices(reconciled, ADOPT_SLICE):
                list(pool.map(lambda record: ports.claims.reopen_record(environment, record, users), part))
    ports.claims.adopt(environment, reconciliation_id, stream_key)


# Helpers ------------------------------------------------------------------------------------------

def describe_error(error: Any) -> str:
    """Step Functions hands over {"Error", "Cause"} (domain/errors.failure_reason)."""
    return failure_reason(error, otherwise="the run failed")
