"""Runs that fan out (issue 32): more open records than one match function holds, split in
partitions by the rules' plan, each matched by the Distributed Map's item, merged, persisted as
any run. Forced here with tiny limits; through the API and the local state machine driver, on moto."""
from dataclasses import replace

import pytest

from chalicelib.domain.runs import partition_item
from chalicelib.services.reconciliation_runs import give_up
from tests.integration.conftest import record
from tests.integration.test_reconciliation_runs import RULE, add_rule, matches_of, start

# No equality condition: a range plan on date (B records near a cut go to both partitions).
WINDOW = {"name": "Amount close, date near", "priority": 1, "cardinality": "one_to_one",
          "conditions": [{"field": "amount", "operator": "within", "tolerance": 3},
                         {"field": "date", "operator": "within", "days": 2}]}


def fan_out(services, run_records=16, partition_records=8, map_concurrency=64):
    """Runs of more than `run_records` open records fan out, in partitions of about `partition_records`."""
    services.ports = replace(services.ports, limits=replace(
        services.ports.limits, run_records=run_records, partition_records=partition_records,
        map_concurrency=map_concurrency))


def exact_data(side):
    """24 records a side, amounts repeating (several candidates a record), dates a few days apart."""
    stream = {"a": "bank", "b": "ledger"}[side]
    return [record(stream, n, 1000 + (n % 12) * 10 + (n % 2 if side == "b" else 0),
                   f"2026-11-{1 + (n * 3 + (side == 'b')) % 27:02d}") for n in range(24)]


def window_data(side):
    """A record a day, its partner one day later and 2 minor units apart: one candidate each, no conflict."""
    stream = {"a": "bank", "b": "ledger"}[side]
    return [record(stream, n, 1000 + 100 * n + (2 if side == "b" else 0), f"2026-11-{1 + n + (side == 'b'):02d}")
            for n in range(20)]


def contested_data(side):
    """Triples: two A records a day apart and one B record both may pair with (the later A is the better,
    0 apart in amount), and a B record nothing pairs: a triple across a cut is matched in both partitions."""
    stream = {"a": "bank", "b": "ledger"}[side]
    if side == "a":
        return [record(stream, 2 * n + k, 1000 + 100 * n + k, f"2026-11-{1 + n + k:02d}") for n in range(12)
                for k in (0, 1)]
    return [record(stream, 2 * n, 1001 + 100 * n, f"2026-11-{2 + n:02d}") for n in range(12)] + [
        record(stream, 2 * n + 1, 90_000 + n, f"2026-11-{2 + n:02d}") for n in range(12)]


def pairs(api, reconciliation, ids):
    """The run's matches as (side-A position, side-B position) in the data given, and their rule."""
    position = {record_id: n for n, record_id in enumerate(ids["a"])} | {
        record_id: n for n, record_id in enumerate(ids["b"])}
    found = set()
    for match in matches_of(api, reconciliation):
        records = api.get(f"/v1/reconciliation_matches/{match['id']}").json_body["records"]
        found.add(tuple(sorted((r["side"], position[r["id"]]) for r in records)))
    return found


def second_reconciliation(api):
    for key in ("bank2", "ledger2"):
        assert api.post("/v1/data_streams", {"key": key, "name": key.title()}).status_code == 201
    created = api.post("/v1/reconciliations", {"name": "Copy", "run_type": "batch",
                                               "side_a_stream_keys": ["bank2"], "side_b_stream_keys": ["ledger2"]})
    return created.json_body


def ingested(ingest, data, suffix=""):
    return {side: ingest(*[{**r, "data_stream_key": r["data_stream_key"] + suffix} for r in data(side)])
            for side in ("a", "b")}


@pytest.mark.parametrize(("rule", "data"), [(RULE, exact_data), (WINDOW, window_data), (WINDOW, contested_data)],
                         ids=["hash", "range", "range-rounds"])
def test_a_run_that_fans_out_matches_as_the_same_run_in_one_piece(api, services, ingest, reconciliation, rule, data):
    # Given the same records in two reconciliations with the same rule
    add_rule(api, reconciliation, rule)
    ids = ingested(ingest, data)
    copy = second_reconciliation(api)
    add_rule(api, copy, rule)
    copy_ids = ingested(ingest, data, "2")

    # When one runs in one piece and the other is forced to fan out
    whole = start(api, copy)
    fan_out(services)
    split = start(api, reconciliation)

    # Then both complete with the same matches, pair for pair, and the fanned-out run says it had partitions
    assert whole["status"] == split["status"] == "completed", split["error_message"]
    assert split["matched_records"] == whole["matched_records"] > 0
    assert pairs(api, reconciliation, ids) == pairs(api, copy, copy_ids)
    assert split["rule_summary"]["unmatched"] == whole["rule_summary"]["unmatched"]
    run = services.runs.get("acme", split["id"])
    assert run.partitions >= 2 and {i for i in run.done_partitions if i.startswith("0/")} == {
        partition_item(0, p) for p in _partitions(services, run)}
    # A contested B record sends its losing partition to a second round of the Map; a hash plan never does
    rounds = services.run_files.exists("acme", run.id, "partitions/1/manifest.json")
    assert rounds == (data is contested_data)
    if rounds:
        assert any(i.startswith("1/") for i in run.done_partitions)


def _partitions(services, run):
    return [item["partition"] for item in services.run_files.read_json("acme", run.id, "partitions/0/manifest")]


class Watched:
    """A port wrapper: calls `before(name, args)` ahead of every call of the wrapped object's methods."""

    def __init__(self, wrapped, before) -> None:
        self._wrapped, self._before = wrapped, before

    def __getattr__(self, name):
        attribute = getattr(self._wrapped, name)
        if not callable(attribute):
            return attribute

        def call(*args, **kwargs):
            self._before(name, args)
            return attribute(*args, **kwargs)
        return call


def partition_reads(services, action):
    """Run files whose reads of a partition's side A call `action(partition)` first."""
    def before(name, args):
        if name == "read_frame" and args[2].startswith("partitions/0/") and args[2].endswith("/a"):
            action(int(args[2].split("/")[2]))
    services.ports = replace(services.ports, run_files=Watched(services.ports.run_files, before))


def test_progress_counts_the_partitions_matched_while_the_map_runs(api, services, ingest, reconciliation):
    # Given a run forced to fan out, its partitions matched one at a time
    add_rule(api, reconciliation)
    ingested(ingest, exact_data)
    fan_out(services, map_concurrency=1)
    seen = []
    real_runs = services.ports.runs

    def after_count(name, args):
        if name == "save_partition":
            seen.append(real_runs.get("acme", args[0].id).progress)
    services.ports = replace(services.ports, runs=Watched(real_runs, after_count))

    # When it runs
    run = start(api, reconciliation)

    # Then its progress moved partition by partition between the load's and the match's share
    assert run["status"] == "completed" and run["progress"] == 100
    assert len(seen) >= 2 and seen == sorted(seen) and 10 <= seen[0] < seen[-1] < 40


def test_a_partition_failing_once_is_retried_alone(api, services, ingest, reconciliation):
    # Given a run forced to fan out, whose partition 1 fails its first read
    add_rule(api, reconciliation)
    ingested(ingest, exact_data)
    fan_out(services)
    reads: dict[int, int] = {}

    def flaky(partition):
        reads[partition] = reads.get(partition, 0) + 1
        if partition == 1 and reads[partition] == 1:
            raise ConnectionError("S3 dropped the connection")
    partition_reads(services, flaky)

    # When it runs
    run = start(api, reconciliation)

    # Then it completes: partition 1 was read twice, every other partition once
    assert run["status"] == "completed", run
    assert reads[1] == 2 and all(count == 1 for p, count in reads.items() if p != 1) and len(reads) >= 2


def test_a_partition_failing_for_good_fails_the_run_naming_it(api, services, ingest, reconciliation):
    # Given a run forced to fan out, whose partition 1 always fails
    add_rule(api, reconciliation)
    ingested(ingest, exact_data)
    fan_out(services, map_concurrency=1)

    def broken(partition):
        if partition == 1:
            raise MemoryError("partition too big for its function")
    partition_reads(services, broken)

    # When it runs
    run = start(api, reconciliation)

    # Then the run fails, its error naming the partition and its last error; nothing is matched, the slot is free
    assert run["status"] == "failed", run
    assert "partition 1 (round 0) failed after its retries" in run["error_message"]
    assert "MemoryError" in run["error_message"]
    assert matches_of(api, reconciliation) == []
    assert api.get(f"/v1/reconciliations/{reconciliation['id']}").json_body["current_run"] is None


def interrupted_at_its_first_partition(api, services, ingest, reconciliation, interrupt):
    """A run forced to fan out, one partition at a time, whose first partition read calls
    `interrupt(ports, the running run)`; started and run to its end: (the run, the partitions read,
    the fan-out's ports without the watch on reads)."""
    add_rule(api, reconciliation)
    ingested(ingest, exact_data)
    fan_out(services, map_concurrency=1)
    real = services.ports
    read = []

    def on_read(partition):
        read.append(partition)
        if len(read) == 1:
            [active] = real.runs.active()
            interrupt(real, active)
    partition_reads(services, on_read)
    return start(api, reconciliation), read, real


def test_a_run_given_up_during_the_map_matches_no_further_partition(api, services, ingest, reconciliation):
    # Given a run given up (as a cancel did) while its first partition is read, when it runs
    run, read, _ = interrupted_at_its_first_partition(
        api, services, ingest, reconciliation,
        lambda ports, active: give_up(ports, "acme", active.id, "cancelled by a person"))

    # Then it stays failed with the reason given; the partitions after it were not read, nothing is matched
    assert run["status"] == "failed" and "cancelled by a person" in run["error_message"], run
    assert len(read) == 1
    assert matches_of(api, reconciliation) == []


def test_a_run_over_one_function_whose_rules_allow_no_plan_is_refused_naming_why(
        api, services, ingest, reconciliation):
    # Given a rule with no equality condition, no date and no amount: any two records may pair
    add_rule(api, reconciliation, {"name": "By description", "priority": 1, "cardinality": "one_to_one",
                                   "conditions": [{"field": "description", "operator": "contains"}]})
    ingested(ingest, exact_data)
    fan_out(services)

    # When a run of more records than one function holds starts
    run = start(api, reconciliation)

    # Then it fails at once, naming the limit and the plan's reason
    assert run["status"] == "failed", run
    assert "one match function holds at most 16 open records" in run["error_message"]
    assert "has no date and no amount condition" in run["error_message"]


def test_a_run_of_one_function_or_less_keeps_todays_path(api, services, ingest, reconciliation):
    # Given a run within the limit
    add_rule(api, reconciliation)
    ingested(ingest, exact_data)
    fan_out(services, run_records=48)

    # When it runs, then it matches in one piece: no partition
    run = start(api, reconciliation)
    assert run["status"] == "completed" and run["matched_records"] > 0
    assert services.runs.get("acme", run["id"]).partitions is None


def test_a_restarted_run_goes_back_to_its_partitions_without_reading_its_records_again(
        api, services, ingest, reconciliation):
    from datetime import timedelta

    from chalicelib.domain.clock import utc_now
    from chalicelib.services import run_partitions
    from chalicelib.services.reconciliation_runs import load, sweep
    from tests.integration.test_reconciliation_runs import LostStarts

    # Given a run forced to fan out whose execution died in its Map: loaded, one partition matched
    add_rule(api, reconciliation)
    ids = ingested(ingest, exact_data)
    fan_out(services)
    real = services.ports
    services.ports = replace(real, run_workflows=LostStarts())
    run_id = api.post(f"/v1/reconciliations/{reconciliation['id']}/runs").json_body["id"]
    services.ports = real
    first = load(real, "acme", run_id)["manifest"]
    partition = _partitions(services, real.runs.get("acme", run_id))[0]
    run_partitions.match_partition(real, "acme", run_id, 0, partition)
    # and a record that pairs with an open one arrived since
    [late] = ingest(record("ledger", 99, exact_data("a")[0]["amount"], exact_data("a")[0]["date"]))

    # When the sweeper restarts it
    assert sweep(real, now=utc_now() + timedelta(minutes=80))["restarted"] == 1

    # Then it resumes on the partitions it wrote (the 48 records it loaded, not the late one) and completes
    run = api.get(f"/v1/reconciliations/{reconciliation['id']}/runs/{run_id}").json_body
    assert run["status"] == "completed" and run["total_records"] == 48, run["error_message"]
    assert first["Key"].endswith("partitions/0/manifest.json") and pairs(api, reconciliation, ids)
    assert late not in {r["id"] for m in matches_of(api, reconciliation)
                        for r in api.get(f"/v1/reconciliation_matches/{m['id']}").json_body["records"]}
