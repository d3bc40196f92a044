"""The phases of a run that fans out (services/run_partitions.py) on the fakes, called one by one as
the state machine would, retried and restarted where the state machine would: the merge replays the
rounds from the files, so a retried merge answers the same and a round the Map did not finish goes
back to the Map."""
from dataclasses import replace

import pytest

from chalicelib.domain.matching.frames import engine_frames
from chalicelib.domain.matching.partition import PartitionPlan, match_partitioned
from chalicelib.services import run_partitions
from chalicelib.services.reconciliation_runs import active_rules, give_up, load, start_run
from tests.integration.test_run_fanout import contested_data
from tests.services.conftest import ENV, new_reconciliation, record, streams
from tests.services.test_reconciliation_runs import add_rule

WINDOW = {"name": "Amount close, date near", "priority": 1, "cardinality": "one_to_one",
          "conditions": [{"field": "amount", "operator": "within", "tolerance": 3},
                         {"field": "date", "operator": "within", "days": 2}]}


@pytest.fixture
def fanned_out(ports, ingest):
    """A run of the records of tests/integration/test_run_fanout.py's contested_data, forced to fan out,
    loaded: (ports, run id, the load's answer)."""
    streams(ports, "bank", "ledger")
    reconciliation = new_reconciliation(ports)
    add_rule(ports, reconciliation, WINDOW)
    ingest(*[record(r["data_stream_key"], n, r["amount"], r["date"]) for n, r in enumerate(contested_data("a"))])
    ingest(*[record(r["data_stream_key"], n, r["amount"], r["date"]) for n, r in enumerate(contested_data("b"))])
    ports = replace(ports, limits=replace(ports.limits, run_records=16, partition_records=8))
    run = start_run(ports, ENV, reconciliation.id)
    return ports, run.id, load(ports, ENV, run.id)


def match_round(ports, run_id, answer):
    """What the Map does: every item of the manifest the answer names."""
    for item in ports.run_files.read_json(ENV, run_id, answer["manifest"]["Key"].split(f"/{run_id}/", 1)[1]
                                          .removesuffix(".json")):
        run_partitions.match_partition(ports, ENV, run_id, item["round"], item["partition"])


def test_a_retried_merge_answers_the_same_and_the_run_ends_as_one_process_matches_it(fanned_out):
    ports, run_id, loaded = fanned_out
    assert loaded["next"] == "fan_out" and loaded["manifest"]["Key"].endswith("partitions/0/manifest.json")
    match_round(ports, run_id, loaded)

    # The merge names a second round (a contested B record); retried, it names the same one, and writes nothing new
    second = run_partitions.merge(ports, ENV, run_id)
    assert second["next"] == "fan_out" and second["manifest"]["Key"].endswith("partitions/1/manifest.json")
    files = dict(ports.run_files.objects)
    assert run_partitions.merge(ports, ENV, run_id) == second
    assert set(ports.run_files.objects) == set(files)

    # After the second round's Map, the merge keeps the outcome; retried, it goes on to persist
    match_round(ports, run_id, second)
    assert run_partitions.merge(ports, ENV, run_id) == "persist"
    assert run_partitions.merge(ports, ENV, run_id) == "persist"

    # The run's matches are those of the partitioned run in one process, with the same plan
    run = ports.runs.get(ENV, run_id)
    side_a, side_b = (ports.run_files.read_frame(ENV, run_id, s) for s in ("side_a", "side_b"))
    rules = active_rules(ports, ENV, run.reconciliation_id)
    plan = PartitionPlan.from_dict(ports.run_files.read_json(ENV, run_id, "partitions/plan")["plan"])
    expected = match_partitioned(*engine_frames(side_a, side_b), rules, plan)
    assert expected.rounds == 2 and run.matches_count == expected.outcome.matches.height
    matches = ports.run_files.read_frame(ENV, run_id, f"matches-{run.first_match_id}")
    assert matches.drop("chunk").equals(expected.outcome.matches)


def test_a_round_the_map_did_not_finish_goes_back_to_the_map(fanned_out):
    ports, run_id, loaded = fanned_out
    items = ports.run_files.read_json(ENV, run_id, "partitions/0/manifest")
    # Given the Map died after matching the first partition only
    run_partitions.match_partition(ports, ENV, run_id, 0, items[0]["partition"])

    # When the merge runs (a restarted execution's), it hands the round back to the Map
    assert run_partitions.merge(ports, ENV, run_id) == loaded


def test_a_partition_counted_as_matched_whose_outcome_is_gone_fails_the_merge_naming_it(fanned_out):
    ports, run_id, loaded = fanned_out
    match_round(ports, run_id, loaded)
    first = ports.run_files.read_json(ENV, run_id, "partitions/0/manifest")[0]["partition"]
    del ports.run_files.objects[f"runs/{ENV}/{run_id}/partitions/0/{first}/matches.parquet"]

    with pytest.raises(run_partitions.PartitionOutcomeMissing, match=f"partition {first} \\(round 0\\)"):
        run_partitions.merge(ports, ENV, run_id)


def test_a_finished_run_leaves_its_partitions_alone(fanned_out):
    ports, run_id, loaded = fanned_out
    give_up(ports, ENV, run_id, "cancelled")
    item = ports.run_files.read_json(ENV, run_id, "partitions/0/manifest")[0]

    assert run_partitions.match_partition(ports, ENV, run_id, 0, item["partition"]) == "done"
    assert not ports.run_files.exists(ENV, run_id, f"partitions/0/{item['partition']}/matches.parquet")
    assert run_partitions.merge(ports, ENV, run_id) == "done"


@pytest.mark.parametrize("error, named", [
    ({"Error": "States.ExceedToleratedFailureThreshold", "Cause": "an item failed"}, "partition"),
    ({"Error": "States.Timeout", "Cause": "the persist took too long"}, "States.Timeout"),
])
def test_a_failed_partition_names_the_runs_error_only_when_the_map_failed_of_it(fanned_out, error, named):
    ports, run_id, loaded = fanned_out
    item = ports.run_files.read_json(ENV, run_id, "partitions/0/manifest")[0]
    run_partitions.partition_failed(ports, ENV, run_id, 0, item["partition"], {"Error": "MemoryError", "Cause": "x"})

    # An earlier execution's partition failed; this execution fails of the Map, or of something else
    give_up(ports, ENV, run_id, error)

    run = ports.runs.get(ENV, run_id)
    assert run.status.value == "failed" and run.error_message.startswith(named), run.error_message
