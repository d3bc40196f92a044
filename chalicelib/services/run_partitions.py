"""The phases of a run that fans out (docs/partitioned-matching.md): more open records than one
match function holds, under rules that allow a partition plan (domain/matching/partition.py).

fan_out          (in the load) split both sides by the plan, write each partition's files and
                 the first round's manifest, the JSON array the Distributed Map reads
match_partition  (one Map item) match one partition with the engine, then the partial rules' pass
                 (those the plan lets run inside a partition: services/partial_payments), and
                 keep its outcome beside it; a retry finds the outcome written and only counts it (a set: counted once)
partition_failed (the item's Catch) keep which partition failed for good: the run's error names it
merge            the outcomes, round after round, into the run's outcome, kept as the match phase
                 keeps one (`save_outcome`), so persisting and everything after is unchanged; a
                 range plan may name partitions to match again: their open records are the next
                 round's files and manifest, and the state machine runs the Map again

The merge keeps no state between calls: it replays every round's outcomes from S3 (the merge is
deterministic), so a retried or restarted merge gives the same answer and the same next round; a
round whose partitions are not all matched yet (the Map died in it) goes back to the Map.
A finished run (failed, e.g. given up) is left alone by every phase: its remaining partitions do nothing,
and so do those of a run asked to stop (`cancellation_requested_at`): the Map ends fast, and the merge
reports the request (NEXT_CANCELLED), for the state machine's GiveUp to end the run cancelled.
"""
from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from chalicelib.domain.runs import Run, RunTooLarge, partition_item
from chalicelib.services import partial_payments
from chalicelib.services.ports import Ports

if TYPE_CHECKING:
    from chalicelib.domain.matching.frames import Frame
    from chalicelib.domain.matching.partition import PartitionMerge
    from chalicelib.domain.rules import Rule

FAN_OUT = "fan_out"  # the state machine's `next` for the Map


class PartitionOutcomeMissing(Exception):
    """The merge found a partition of the manifest without its outcome: the Map did not match it."""


def _partition(round_: int, partition: int, name: str) -> str:
    return f"partitions/{round_}/{partition}/{name}"


def _manifest(round_: int) -> str:
    return f"partitions/{round_}/manifest"


PLAN = "partitions/plan"


def fan_out(ports: Ports, run: Run, rules: list[Rule], side_a: Frame, side_b: Frame) -> dict[str, Any]:
    """Split the run in partitions of about `limits.partition_records` and write them with the first
    round's manifest. RunTooLarge when the data refuses a plan (a range plan over one value) or a
    partition would still not fit one function (a key of few values)."""
    from chalicelib.domain.matching.frames import engine_frames
    from chalicelib.domain.matching.partial import with_own_amounts
    from chalicelib.domain.matching.partition import partitions_for, plan_partitions, split

    limits, total = ports.limits, side_a.height + side_b.height
    engine_a, engine_b = engine_frames(side_a, side_b, only_new=run.only_new)
    plan = plan_partitions(rules, partitions_for(total, limits.partition_records), engine_a)
    if plan.partitions == 1:
        raise RunTooLarge(f"run {run.id}: {total:,} open records, more than the {limits.run_records:,} one match "
                          f"function holds, and they cannot be split in partitions: {plan.reason}")
    skipped = partial_payments.skipped_in_partitions(rules, plan)  # docs/partial-payments.md
    if partial_payments.applied_in_partitions(rules, skipped):  # their pass allocates in the records' own units
        engine_a, engine_b = with_own_amounts(engine_a, side_a), with_own_amounts(engine_b, side_b)
    parts_a, parts_b = split(engine_a, plan, "a"), split(engine_b, plan, "b")
    items = []
    for partition in sorted(set(parts_a) & set(parts_b)):  # a partition lacking a side matches nothing
        size = parts_a[partition].height + parts_b[partition].height
        if size > limits.run_records:
            raise RunTooLarge(
                f"run {run.id}: partition {partition} of {plan.partitions} holds {size:,} open records, more than the "
                f"{limits.run_records:,} one match function holds: the plan's key has too few distinct values "
                f"({', '.join(k.field for k in plan.keys) or plan.axis}) to spread {total:,} records")
        items.append({"round": 0, "partition": partition, "records": size})
    for item in items:
        partition = item["partition"]
        ports.run_files.write_frame(run.environment, run.id, _partition(0, partition, "a"), parts_a[partition])
        ports.run_files.write_frame(run.environment, run.id, _partition(0, partition, "b"), parts_b[partition])
    ports.run_files.write_json(run.environment, run.id, PLAN, {"plan": plan.as_dict(), "partitions": len(items),
                                                               "partial_skipped": skipped})
    manifest = ports.run_files.write_json(run.environment, run.id, _manifest(0), items)  # last: all is in place
    ports.runs.save_loaded(run, total, partitions=len(items))
    return _map_input(ports, manifest)


def resumed(ports: Ports, run: Run) -> dict[str, Any] | None:
    """A run that fanned out before (a restarted execution) goes back to its Map on the partitions
    it wrote, without reading its open records again: new ones would make the outcomes already
    matched stale. Each partition matched finds its outcome; the merge replays the rounds."""
    if not run.partitions:  # set with the first manifest (`fan_out`)
        return None
    ports.run_files.read_json(run.environment, run.id, _manifest(0))  # RunInputsLost when it is gone
    return _map_input(ports, ports.run_files.json_location(run.environment, run.id, _manifest(0)))


def _map_input(ports: Ports, manifest: dict[str, str]) -> dict[str, Any]:
    """What the Map state reads: its ItemReader's object, its MaxConcurrencyPath."""
    return {"next": FAN_OUT, "manifest": manifest, "max_concurrency": ports.limits.map_concurrency}


def match_partition(ports: Ports, environment: str, run_id: int, round_: int, partition: int) -> str:
    from chalicelib.domain.matching import match_records

    run = ports.runs.get(environment, run_id)
    if run.finished or run.chunks is not None or run.cancel_requested:
        return "done"  # ended (failed, cancelled), merged already, or asked to stop: nothing to match
    files = ports.run_files
    if not files.exists(environment, run.id, _partition(round_, partition, "matches.parquet")):
        rules = files.read_rules(environment, run.id, run.reconciliation_id)
        side_a = files.read_frame(environment, run.id, _partition(round_, partition, "a"))
        side_b = files.read_frame(environment, run.id, _partition(round_, partition, "b"))
        outcome = match_records(side_a, side_b, rules, only_new=run.only_new)
        skipped = files.read_json(environment, run.id, PLAN).get("partial_skipped", {})
        outcome = partial_payments.in_partition(ports, run, outcome, side_a, side_b, rules, skipped)
        files.write_frame(environment, run.id, _partition(round_, partition, "members"), outcome.members)
        # Written last: the matches file says the outcome is whole (what a retry and the merge look for).
        files.write_frame(environment, run.id, _partition(round_, partition, "matches"), outcome.matches)
    ports.runs.save_partition(run, partition_item(round_, partition))
    return "matched"


def partition_failed(ports: Ports, environment: str, run_id: int, round_: int, partition: int, error: Any) -> str:
    from chalicelib.services.reconciliation_runs import describe_error

    run = ports.runs.get(environment, run_id)
    ports.runs.save_partition_failure(run, f"partition {partition} (round {round_}) failed after its retries: "
                                           f"{describe_error(error)}")
    return "failed"


def merge(ports: Ports, environment: str, run_id: int) -> str | dict[str, Any]:
    from chalicelib.domain.matching.frames import PERSISTED_RECORD_COLUMNS
    from chalicelib.domain.matching.partition import PartitionMerge, PartitionPlan, partition_outcome
    from chalicelib.services.reconciliation_runs import next_without_matching, save_outcome

    run = ports.runs.get(environment, run_id)
    if (skipped := next_without_matching(run)) is not None:
        return skipped
    files = ports.run_files
    rules = files.read_rules(environment, run.id, run.reconciliation_id)
    planned = files.read_json(environment, run.id, PLAN)
    merger = PartitionMerge(PartitionPlan.from_dict(planned["plan"]), rules)
    round_ = 0
    while True:
        items = files.read_json(environment, run.id, _manifest(round_))
        missing = [i["partition"] for i in items
                   if not files.exists(environment, run.id, _partition(round_, i["partition"], "matches.parquet"))]
        if missing:
            return _unmatched(ports, run, round_, missing)
        # Not kept in a name: the merger keeps what it needs, and the last round's frames would
        # otherwise stay held beside the outcome and the chunks' plan (a whole copy of every match).
        again = merger.add({item["partition"]: partition_outcome(
            files.read_frame(environment, run.id, _partition(round_, item["partition"], "matches")),
            files.read_frame(environment, run.id, _partition(round_, item["partition"], "members")))
            for item in items})
        if not again:
            break
        round_ += 1
        if files.exists(environment, run.id, _manifest(round_) + ".json"):
            continue  # a merge before this one wrote the round (and the Map matched it): replay it
        items = _write_round(ports, run, merger, round_, again)
        if not items:
            break
        return _map_input(ports, files.write_json(environment, run.id, _manifest(round_), items))
    columns = list(PERSISTED_RECORD_COLUMNS)
    side_a = files.read_frame(environment, run.id, "side_a", columns=columns)
    side_b = files.read_frame(environment, run.id, "side_b", columns=columns)
    outcome = merger.outcome(side_a["id"], side_b["id"])
    if skipped := planned.get("partial_skipped"):  # said in the run's rule_summary, never skipped silently
        outcome = replace(outcome, rule_summary={**outcome.rule_summary, "partial_skipped": skipped})
    del merger  # its kept frames, which the outcome now holds: the chunks' plan needs the room
    return save_outcome(ports, run, outcome, side_a, side_b)


def _unmatched(ports: Ports, run: Run, round_: int, missing: list[int]) -> dict[str, Any]:
    """A round with partitions not matched yet (a merge retried after writing the round, or a restarted
    execution that died in the round's Map): back to the Map, which matches them (the others find their
    outcome). A partition the Map counted as matched whose outcome is gone cannot be matched again."""
    lost = [p for p in missing if partition_item(round_, p) in run.done_partitions]
    if lost:
        raise PartitionOutcomeMissing(f"run {run.id}: partition {lost[0]} (round {round_}) was matched but its "
                                      "outcome is gone")
    return _map_input(ports, ports.run_files.json_location(run.environment, run.id, _manifest(round_)))


def _write_round(ports: Ports, run: Run, merger: PartitionMerge, round_: int,
                 partitions: frozenset[int]) -> list[dict[str, Any]]:
    """The partitions to match again, on the records no kept match holds: the next round's files."""
    items = []
    for partition in sorted(partitions):
        sides = merger.next_round(*(ports.run_files.read_frame(run.environment, run.id, _partition(0, partition, s))
                                    for s in ("a", "b")))
        if sides is not None:
            for side, frame in zip(("a", "b"), sides, strict=True):
                ports.run_files.write_frame(run.environment, run.id, _partition(round_, partition, side), frame)
            items.append({"round": round_, "partition": partition, "records": sides[0].height + sides[1].height})
    return items
