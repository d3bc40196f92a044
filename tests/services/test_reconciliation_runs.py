"""Starting runs, the run slot, the work waiting on a continuous reconciliation, and the sweeper
(services/reconciliation_runs.py) on the fakes: runs are started, none is run."""
from datetime import timedelta

import pytest

from chalicelib.domain.clock import utc_now
from chalicelib.domain.errors import Conflict, NotFound
from chalicelib.domain.events import ANNOUNCEMENT_LEASE
from chalicelib.domain.reconciliations import RunType
from chalicelib.domain.runs import MAX_RESTARTS, STUCK_AFTER, RunKind, RunStatus, RunTrigger
from chalicelib.services.reconciliation_rules import create_rule, update_rule
from chalicelib.services.reconciliation_runs import (
    NEXT_CANCELLED,
    after_reconciliation_saved,
    after_rule_saved,
    cancel,
    finish,
    give_up,
    load,
    match,
    on_records_ingested,
    persist,
    start_pending,
    start_run,
    sweep,
)
from tests.services.conftest import ENV, new_reconciliation, record, streams

RULE = {"name": "Amount and date", "priority": 1, "cardinality": "one_to_one",
        "conditions": [{"field": "amount", "operator": "equals"},
                       {"field": "date", "operator": "within", "days": 3}]}


def runs_of(ports, reconciliation):
    """Its runs, newest first."""
    return ports.runs.list_page(ENV, reconciliation.id, 50, None)[0]


def started(ports):
    """The names of the run executions started, in order."""
    return [name for name, _ in ports.run_workflows.executions]


def continuous_reconciliation(ports, side_a=("bank",), side_b=("ledger",)):
    """Created as the API creates it: then told it was saved."""
    created = new_reconciliation(ports, "Live", RunType.CONTINUOUS, side_a, side_b)
    after_reconciliation_saved(ports, ENV, created.id)
    return created


def add_rule(ports, reconciliation, rule=RULE):
    """Created as the API creates it: then told it was saved."""
    created = create_rule(ports, ENV, reconciliation.id, rule)
    after_rule_saved(ports, ENV, created)
    return created


# Moved from tests/integration/test_reconciliation_runs.py ---------------------------------------

def test_a_run_is_refused_while_another_is_pending_or_running(ports, reconciliation):
    holder = start_run(ports, ENV, reconciliation.id)  # pending: its execution has not begun
    with pytest.raises(Conflict) as refused:
        start_run(ports, ENV, reconciliation.id)
    assert "pending or running" in refused.value.message
    assert [r.id for r in runs_of(ports, reconciliation)] == [holder.id]


def test_a_run_that_never_progresses_fails_after_its_restarts(ports, reconciliation):
    run_id = start_run(ports, ENV, reconciliation.id).id  # its executions never run (FakeWorkflows)
    for minutes in (80, 160, 240):
        assert sweep(ports, now=utc_now() + timedelta(minutes=minutes))["restarted"] == 1
    assert sweep(ports, now=utc_now() + timedelta(minutes=320))["failed"] == 1

    run = ports.runs.get(ENV, run_id)
    assert run.status == "failed" and "restarts did not help" in run.error_message
    assert started(ports) == [f"acme-run-{run_id}", f"acme-run-{run_id}-r1", f"acme-run-{run_id}-r2",
                              f"acme-run-{run_id}-r3"]
    assert start_run(ports, ENV, reconciliation.id).status is RunStatus.PENDING  # the slot is free


# The slot ---------------------------------------------------------------------------------------

def test_a_run_of_an_unknown_reconciliation_is_not_found_and_starts_nothing(ports, reconciliation):
    with pytest.raises(NotFound):
        start_run(ports, ENV, 404)
    assert started(ports) == [] and ports.runs.list_page(ENV, 404, 50, None)[0] == []


def test_a_slot_left_taken_by_a_run_that_was_never_written_is_taken_over(ports, reconciliation):
    assert ports.runs.claim_slot(ENV, reconciliation.id, 999)  # a start that died before writing its run

    run = start_run(ports, ENV, reconciliation.id)

    assert ports.reconciliations.get(ENV, reconciliation.id).current_run_id == run.id
    assert started(ports) == [f"acme-run-{run.id}"]


def test_a_slot_left_taken_by_a_finished_run_is_taken_over_but_not_one_still_running(ports, reconciliation):
    holder = start_run(ports, ENV, reconciliation.id)
    holder = ports.runs.move(holder, RunStatus.RUNNING)
    with pytest.raises(Conflict):
        start_run(ports, ENV, reconciliation.id)
    ports.runs.move(holder, RunStatus.FAILED)  # its finish task gave up before freeing the slot

    run = start_run(ports, ENV, reconciliation.id)

    assert ports.reconciliations.get(ENV, reconciliation.id).current_run_id == run.id


# The sweeper ------------------------------------------------------------------------------------

def test_the_sweeper_leaves_a_run_alone_until_it_has_made_no_progress_for_a_while(ports, reconciliation):
    run = start_run(ports, ENV, reconciliation.id)

    assert sweep(ports, now=run.created_at + STUCK_AFTER - timedelta(minutes=1)) == {
        "restarted": 0, "failed": 0, "cancelled": 0, "errors": 0}
    assert sweep(ports, now=run.created_at + STUCK_AFTER + timedelta(minutes=1)) == {
        "restarted": 1, "failed": 0, "cancelled": 0, "errors": 0}

    assert ports.runs.get(ENV, run.id).restarts == 1
    assert started(ports) == [f"acme-run-{run.id}", f"acme-run-{run.id}-r1"]


def test_a_run_past_its_restarts_fails_and_frees_the_slot_for_the_work_waiting(ports, ingest):
    streams(ports, "bank", "ledger")
    live = continuous_reconciliation(ports)
    holder = start_run(ports, ENV, live.id)
    [record_id] = ingest(record("bank", 1, 1000))  # waits: the reconciliation is busy
    for _ in range(MAX_RESTARTS):
        assert ports.runs.count_restart(ports.runs.get(ENV, holder.id))

    assert sweep(ports, now=utc_now() + STUCK_AFTER + timedelta(minutes=1))["failed"] == 1

    latest = runs_of(ports, live)[0]
    job_id = ports.records.get(ENV, record_id).file_import_id
    assert ports.runs.get(ENV, holder.id).status is RunStatus.FAILED
    assert (latest.trigger, latest.new_record_jobs) == (RunTrigger.RECORDS_INGESTED, (job_id,))


# Continuous reconciliations: what waits on them, and what starts a run --------------------------

def test_an_ingestion_starts_a_run_of_each_continuous_reconciliation_that_uses_its_streams(ports, ingest):
    streams(ports, "bank", "ledger", "psp")
    live = continuous_reconciliation(ports)
    batch = new_reconciliation(ports, "Batch", RunType.BATCH, ("bank",), ("psp",))
    elsewhere = continuous_reconciliation(ports, ("psp",), ("ledger",))

    [record_id] = ingest(record("bank", 1, 1000))

    job_id = ports.records.get(ENV, record_id).file_import_id
    [run] = runs_of(ports, live)
    assert (run.kind, run.trigger, run.new_record_jobs) == (RunKind.CONTINUOUS, RunTrigger.RECORDS_INGESTED, (job_id,))
    assert not run.whole_pool  # no rule is active: the whole-pool request keeps waiting
    assert runs_of(ports, batch) == [] and runs_of(ports, elsewhere) == []
    assert ports.runs.pending_work(ENV, live.id)[0] == []


def test_ingestions_that_find_a_run_in_progress_wait_and_its_end_starts_one_run_for_them(ports, ingest):
    streams(ports, "bank", "ledger")
    live = continuous_reconciliation(ports)
    holder = start_run(ports, ENV, live.id)

    first = ingest(record("bank", 1, 1000))
    second = ingest(record("ledger", 1, 1000))
    jobs = tuple(sorted(ports.records.get(ENV, ids[0]).file_import_id for ids in (first, second)))
    assert [r.id for r in runs_of(ports, live)] == [holder.id]
    assert tuple(ports.runs.pending_work(ENV, live.id)[0]) == jobs

    give_up(ports, ENV, holder.id, "stopped by the test")  # the run in progress ends

    latest = runs_of(ports, live)[0]
    assert latest.id != holder.id and latest.new_record_jobs == jobs
    assert ports.runs.pending_work(ENV, live.id)[0] == []


def test_a_whole_pool_request_waits_for_an_active_rule(ports):
    streams(ports, "bank", "ledger")
    live = continuous_reconciliation(ports)
    assert runs_of(ports, live) == [] and ports.runs.pending_work(ENV, live.id)[1] is not None

    inactive = add_rule(ports, live, {**RULE, "active": False})
    assert runs_of(ports, live) == []

    activated = update_rule(ports.reconciliation_rules, ENV, inactive.id, {"active": True})
    after_rule_saved(ports, ENV, activated, {"active"})

    [run] = runs_of(ports, live)
    assert (run.trigger, run.whole_pool) == (RunTrigger.RECONCILIATION_CHANGED, True)
    assert ports.runs.pending_work(ENV, live.id) == ([], None)


def test_a_rename_asks_for_no_run_and_a_change_of_sides_or_rules_does(ports):
    streams(ports, "bank", "ledger", "psp")
    live = continuous_reconciliation(ports)
    rule = add_rule(ports, live)
    [first] = runs_of(ports, live)
    ports.runs.move(first, RunStatus.RUNNING)
    finish(ports, ENV, first.id)

    renamed = update_rule(ports.reconciliation_rules, ENV, rule.id, {"name": "Renamed"})
    after_rule_saved(ports, ENV, renamed, {"name"})
    assert after_reconciliation_saved(ports, ENV, live.id, {"name"}) is False
    assert [r.id for r in runs_of(ports, live)] == [first.id] and ports.runs.pending_work(ENV, live.id) == ([], None)

    assert after_reconciliation_saved(ports, ENV, live.id, {"side_b_stream_keys"}) is True
    assert runs_of(ports, live)[0].trigger is RunTrigger.RECONCILIATION_CHANGED and len(runs_of(ports, live)) == 2


def test_a_batch_reconciliation_never_starts_a_run_by_itself(ports, ingest, reconciliation):
    add_rule(ports, reconciliation)
    assert after_reconciliation_saved(ports, ENV, reconciliation.id) is True  # asked, and refused: not continuous

    ingest(record("bank", 1, 1000), record("ledger", 1, 1000))

    assert runs_of(ports, reconciliation) == [] and started(ports) == []
    assert ports.runs.pending_work(ENV, reconciliation.id) == ([], None)


def test_a_failed_continuous_run_gives_its_work_back_without_starting_again(ports, ingest):
    streams(ports, "bank", "ledger")
    live = continuous_reconciliation(ports)
    holder = start_run(ports, ENV, live.id)  # a manual run holds the slot
    add_rule(ports, live)  # the whole-pool request waits for it
    [record_id] = ingest(record("bank", 1, 1000))  # and so does the ingestion
    give_up(ports, ENV, holder.id, "stopped by the test")
    run = runs_of(ports, live)[0]
    job_id = ports.records.get(ENV, record_id).file_import_id
    assert run.id != holder.id and run.whole_pool and run.new_record_jobs == (job_id,)

    give_up(ports, ENV, run.id, "stopped by the test")

    assert runs_of(ports, live)[0].id == run.id and runs_of(ports, live)[0].status is RunStatus.FAILED
    jobs, request = ports.runs.pending_work(ENV, live.id)
    assert jobs == [job_id] and request is not None
    assert start_pending(ports, ENV, live.id).new_record_jobs == (job_id,)  # the next run takes them


def test_a_run_taking_a_whole_pool_request_takes_only_the_request_it_read(ports):
    streams(ports, "bank", "ledger")
    live = new_reconciliation(ports, "Live", RunType.CONTINUOUS)
    create_rule(ports, ENV, live.id, RULE)
    ports.runs.request_whole_pool(ENV, live.id)
    seen = ports.runs.pending_work(ENV, live.id)[1]
    ports.runs.request_whole_pool(ENV, live.id)  # a second change lands before the run takes the first

    start_run(ports, ENV, live.id, kind=RunKind.CONTINUOUS, trigger=RunTrigger.RECONCILIATION_CHANGED,
              whole_pool_request=seen)

    assert ports.runs.pending_work(ENV, live.id)[1] is not None



# Cancel -----------------------------------------------------------------------------------------

def published_types(ports):
    return [event.type for _, event in ports.events.published]


def test_a_pending_run_cancelled_ends_at_once_and_frees_its_slot(ports, reconciliation):
    run = start_run(ports, ENV, reconciliation.id)  # pending: its execution has not begun

    cancelled = cancel(ports, ENV, reconciliation.id, run.id)

    assert cancelled.status is RunStatus.CANCELLED and cancelled.cancellation_requested_at and cancelled.completed_at
    assert ports.reconciliations.get(ENV, reconciliation.id).current_run_id is None
    assert published_types(ports) == ["reconciliation_run.cancelled"]
    assert load(ports, ENV, run.id) == "done"  # its execution begins late: it does nothing
    assert ports.runs.get(ENV, run.id).status is RunStatus.CANCELLED
    assert start_run(ports, ENV, reconciliation.id).status is RunStatus.PENDING


def test_a_running_run_is_ended_by_its_next_step_never_by_the_cancel(ports, reconciliation):
    run = ports.runs.move(start_run(ports, ENV, reconciliation.id), RunStatus.RUNNING)

    asked = cancel(ports, ENV, reconciliation.id, run.id)

    assert asked.status is RunStatus.RUNNING and asked.cancellation_requested_at  # a step may be in flight
    assert ports.reconciliations.get(ENV, reconciliation.id).current_run_id == run.id
    assert match(ports, ENV, run.id) == NEXT_CANCELLED  # its next step sees the request first, and only reports it
    assert ports.runs.get(ENV, run.id).status is RunStatus.RUNNING
    assert give_up(ports, ENV, run.id, None) == NEXT_CANCELLED  # where the state machine sends it
    assert ports.runs.get(ENV, run.id).status is RunStatus.CANCELLED
    assert ports.reconciliations.get(ENV, reconciliation.id).current_run_id is None
    assert published_types(ports) == ["reconciliation_run.cancelled"]


def test_a_cancel_repeated_only_moves_its_time_and_a_finished_run_refuses_it(ports, reconciliation):
    run = start_run(ports, ENV, reconciliation.id)
    first = cancel(ports, ENV, reconciliation.id, run.id)
    again = cancel(ports, ENV, reconciliation.id, run.id)
    assert again.status is RunStatus.CANCELLED and again.cancellation_requested_at >= first.cancellation_requested_at
    assert published_types(ports) == ["reconciliation_run.cancelled"]  # ended once

    failed = start_run(ports, ENV, reconciliation.id)
    give_up(ports, ENV, failed.id, "stopped by the test")
    with pytest.raises(Conflict) as refused:
        cancel(ports, ENV, reconciliation.id, failed.id)
    assert "is failed" in refused.value.message
    assert ports.runs.get(ENV, failed.id).cancellation_requested_at is None
    with pytest.raises(NotFound):
        cancel(ports, ENV, reconciliation.id + 1, run.id)  # a run of another reconciliation


def test_a_pending_run_that_starts_as_it_is_cancelled_is_left_to_its_next_step(ports, reconciliation):
    run = start_run(ports, ENV, reconciliation.id)
    real = ports.runs.request_cancellation

    def started_meanwhile(seen, cancellable):  # the load moves it to running between the request and the end
        asked = real(seen, cancellable)
        return ports.runs.move(asked, RunStatus.RUNNING)
    ports.runs.request_cancellation = started_meanwhile

    asked = cancel(ports, ENV, reconciliation.id, run.id)

    assert asked.status is RunStatus.RUNNING  # the cancel's write from pending alone was refused
    assert published_types(ports) == [] and ports.reconciliations.get(ENV, reconciliation.id).current_run_id == run.id
    assert load(ports, ENV, run.id) == NEXT_CANCELLED
    assert give_up(ports, ENV, run.id, None) == NEXT_CANCELLED
    assert ports.runs.get(ENV, run.id).status is RunStatus.CANCELLED


def test_a_stuck_run_with_a_cancel_requested_ends_cancelled_not_restarted(ports, reconciliation):
    run = ports.runs.move(start_run(ports, ENV, reconciliation.id), RunStatus.RUNNING)
    cancel(ports, ENV, reconciliation.id, run.id)  # its execution died before a step saw it

    assert sweep(ports, now=utc_now() + STUCK_AFTER + timedelta(minutes=1)) == {
        "restarted": 0, "failed": 0, "cancelled": 1, "errors": 0}

    assert ports.runs.get(ENV, run.id).status is RunStatus.CANCELLED
    assert started(ports) == [f"acme-run-{run.id}"]  # never restarted
    assert ports.reconciliations.get(ENV, reconciliation.id).current_run_id is None
    assert published_types(ports) == ["reconciliation_run.cancelled"]


def test_a_cancelled_continuous_run_gives_its_work_back(ports, ingest):
    streams(ports, "bank", "ledger")
    live = continuous_reconciliation(ports)
    add_rule(ports, live)
    holder = runs_of(ports, live)[0]
    ports.runs.move(holder, RunStatus.RUNNING)

    cancel(ports, ENV, live.id, holder.id)
    assert load(ports, ENV, holder.id) == NEXT_CANCELLED
    give_up(ports, ENV, holder.id, None)

    assert ports.runs.pending_work(ENV, live.id)[1] is not None  # its whole-pool request waits again


class Dies(Exception):
    """The Lambda dies at this point (a timeout, an out-of-memory)."""


def test_a_step_only_reports_a_cancel_and_a_retried_give_up_finishes_the_end(ports, reconciliation):
    run = ports.runs.move(start_run(ports, ENV, reconciliation.id), RunStatus.RUNNING)
    cancel(ports, ENV, reconciliation.id, run.id)
    assert match(ports, ENV, run.id) == NEXT_CANCELLED
    assert ports.runs.get(ENV, run.id).status is RunStatus.RUNNING  # the step ended nothing
    real = ports.runs.release_slot

    def dies_once(*args, **kwargs):  # the give_up dies after the move and the announcement
        ports.runs.release_slot = real
        raise Dies()
    ports.runs.release_slot = dies_once

    with pytest.raises(Dies):
        give_up(ports, ENV, run.id, None)
    assert give_up(ports, ENV, run.id, None) == NEXT_CANCELLED  # its retry (GiveUp's Retry) finishes the end

    assert ports.runs.get(ENV, run.id).status is RunStatus.CANCELLED
    assert ports.reconciliations.get(ENV, reconciliation.id).current_run_id is None
    assert published_types(ports) == ["reconciliation_run.cancelled"]


def test_a_cancel_that_dies_after_ending_a_pending_run_is_finished_by_the_sweeper(ports, reconciliation):
    run = start_run(ports, ENV, reconciliation.id)
    real = ports.runs.end_pending

    def ends_then_dies(*args, **kwargs):
        real(*args, **kwargs)
        raise Dies()
    ports.runs.end_pending = ends_then_dies

    with pytest.raises(Dies):
        cancel(ports, ENV, reconciliation.id, run.id)
    ports.runs.end_pending = real
    assert cancel(ports, ENV, reconciliation.id, run.id).status is RunStatus.CANCELLED  # the client's retry: 202
    assert ports.reconciliations.get(ENV, reconciliation.id).current_run_id == run.id  # nothing finished it yet

    sweep(ports, now=utc_now() + ANNOUNCEMENT_LEASE + timedelta(minutes=1))  # the held end, past its lease

    assert ports.reconciliations.get(ENV, reconciliation.id).current_run_id is None
    assert published_types(ports) == ["reconciliation_run.cancelled"]
    assert start_run(ports, ENV, reconciliation.id).status is RunStatus.PENDING


def test_a_load_that_finds_its_pending_run_cancelled_meanwhile_does_nothing(ports, reconciliation):
    run = start_run(ports, ENV, reconciliation.id)
    cancel(ports, ENV, reconciliation.id, run.id)  # the API ends it between the load's read and its move
    real = ports.runs.get

    def read_before_the_cancel(environment, run_id):
        ports.runs.get = real
        return run  # pending, no cancel requested yet
    ports.runs.get = read_before_the_cancel

    assert load(ports, ENV, run.id) == "done"  # not RunWithoutSlot, nor a load of a cancelled run
    assert ports.runs.get(ENV, run.id).status is RunStatus.CANCELLED


def test_a_cancel_once_every_chunk_is_written_comes_too_late_everywhere(ports, reconciliation):
    run = ports.runs.move(start_run(ports, ENV, reconciliation.id), RunStatus.RUNNING)
    run = ports.runs.save_plan(run, first_match_id=1, matches_count=0, chunk_starts=[], total_records=0,
                               rule_summary={})  # nothing left to write
    cancel(ports, ENV, reconciliation.id, run.id)

    assert not ports.runs.get(ENV, run.id).cancel_requested
    assert load(ports, ENV, run.id) == "persist"  # a restarted execution goes on to complete it
    assert persist(ports, ENV, run.id) == "finish"
    assert sweep(ports, now=utc_now() + STUCK_AFTER + timedelta(minutes=1))["restarted"] == 1  # not ended cancelled
    assert finish(ports, ENV, run.id) == "done"
    assert ports.runs.get(ENV, run.id).status is RunStatus.COMPLETED


def test_a_failed_continuous_run_gives_its_jobs_back_once_however_often_its_end_is_repeated(ports):
    streams(ports, "bank", "ledger")
    live = continuous_reconciliation(ports)  # no rule yet: no whole-pool run
    on_records_ingested(ports, ENV, 7, ["bank"])
    holder = runs_of(ports, live)[0]
    assert holder.new_record_jobs == (7,)
    ports.runs.move(holder, RunStatus.RUNNING)

    give_up(ports, ENV, holder.id, "stopped by the test")
    assert ports.runs.pending_work(ENV, live.id)[0] == [7]  # given back, for the next run
    ports.runs.drop_pending_jobs(ENV, live.id, [7])  # which takes it
    give_up(ports, ENV, holder.id, "stopped by the test")  # a retry, or the sweeper finishing the end

    assert ports.runs.pending_work(ENV, live.id)[0] == []  # not given back a second time


def test_a_run_taking_the_slot_of_a_failed_holder_that_never_freed_it_gets_its_jobs_back(ports):
    streams(ports, "bank", "ledger")
    live = continuous_reconciliation(ports)
    on_records_ingested(ports, ENV, 7, ["bank"])
    holder = runs_of(ports, live)[0]
    ports.runs.move(holder, RunStatus.FAILED)  # its end died before freeing the slot, and nothing retried it

    taker = start_run(ports, ENV, live.id)

    assert ports.reconciliations.get(ENV, live.id).current_run_id == taker.id
    assert ports.runs.pending_work(ENV, live.id)[0] == [7]  # for the run after this one
