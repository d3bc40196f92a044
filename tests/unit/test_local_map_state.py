"""The local driver runs Map states as Step Functions runs a Distributed Map: items from a JSON array
in S3, shaped by ItemSelector, at most MaxConcurrency (and the machine's CPUs) at once, each item
retried and caught as its states say, and one failing for good failing the Map, named. And the
run state machine's Map has the fields AWS's Distributed Map takes, held to the code."""
import json
import threading
import time

import pytest

from chalicelib.local.statemachines import MAP_FAILED, LocalStateMachine, StatesError, load_definition

ITEMS = [{"partition": p} for p in range(6)]


def a_map(**fields):
    return {"StartAt": "Each", "States": {"Each": {
        "Type": "Map",
        "ItemReader": {"Resource": "arn:aws:states:::s3:getObject", "ReaderConfig": {"InputType": "JSON"},
                       "Parameters": {"Bucket.$": "$.manifest.Bucket", "Key.$": "$.manifest.Key"}},
        "ItemSelector": {"run_id.$": "$.run_id", "partition.$": "$$.Map.Item.Value.partition",
                         "index.$": "$$.Map.Item.Index"},
        "ItemProcessor": {"ProcessorConfig": {"Mode": "DISTRIBUTED", "ExecutionType": "STANDARD"},
                          "StartAt": "Work", "States": {"Work": {
                              "Type": "Task", "Resource": "${Work}",
                              "Retry": [{"ErrorEquals": ["States.ALL"], "IntervalSeconds": 1, "MaxAttempts": 2}],
                              "End": True}}},
        "ToleratedFailurePercentage": 0, "ResultPath": "$.results", "End": True, **fields}}}


def machine(definition, work, cpus=8):
    objects = {("bucket", "manifest.json"): json.dumps(ITEMS).encode()}
    return LocalStateMachine(definition, {"Work": work}, {}, retry_delay_scale=0,
                             objects=lambda bucket, key: objects[(bucket, key)], cpus=cpus)


INPUT = {"run_id": 7, "manifest": {"Bucket": "bucket", "Key": "manifest.json"}, "max_concurrency": 3}


class Concurrency:
    """Each item waits (2 s at most) until `target` items are in at once, so that the bound is reached
    however the threads are scheduled, then stays a moment, so that a driver letting more in would be seen."""

    def __init__(self, target: int) -> None:
        self.target, self.now, self.most = target, 0, 0
        self.changed = threading.Condition()

    def work(self, event, context):
        with self.changed:
            self.now += 1
            self.most = max(self.most, self.now)
            self.changed.notify_all()
            self.changed.wait_for(lambda: self.now >= self.target, timeout=2)
        time.sleep(0.02)
        with self.changed:
            self.now -= 1
        return {"done": event["partition"]}


def test_each_item_of_the_manifest_runs_with_its_selected_input_and_the_results_come_in_order():
    seen = []

    def work(event, context):
        seen.append(event)
        return {"done": event["partition"]}

    output = machine(a_map(MaxConcurrency=1), work).run(INPUT)

    assert sorted(seen, key=lambda e: e["index"]) == [{"run_id": 7, "partition": p, "index": p} for p in range(6)]
    assert output["results"] == [{"done": p} for p in range(6)]


@pytest.mark.parametrize(("fields", "cpus", "most"), [
    ({"MaxConcurrency": 3}, 8, 3),            # the Map's bound
    ({"MaxConcurrencyPath": "$.max_concurrency"}, 8, 3),  # read from the input
    ({"MaxConcurrency": 64}, 2, 2),           # no more than the machine's CPUs
    ({"MaxConcurrency": 0}, 2, 2),            # 0: no bound on AWS, the CPUs here
])
def test_items_run_at_most_max_concurrency_and_the_cpus_at_once(fields, cpus, most):
    counter = Concurrency(most)
    machine(a_map(**fields), counter.work, cpus=cpus).run(INPUT)
    assert counter.most == most


def test_an_item_that_fails_once_is_retried_alone():
    calls: dict[int, int] = {}

    def work(event, context):
        calls[event["partition"]] = calls.get(event["partition"], 0) + 1
        if event["partition"] == 4 and calls[4] == 1:
            raise ConnectionError("dropped")
        return {}

    machine(a_map(MaxConcurrency=2), work).run(INPUT)

    assert calls == {0: 1, 1: 1, 2: 1, 3: 1, 4: 2, 5: 1}


def test_an_item_failing_for_good_fails_the_map_naming_it_and_no_later_item_starts():
    started = []

    def work(event, context):
        started.append(event["partition"])
        if event["partition"] == 2:
            raise MemoryError("out of memory")
        return {}

    with pytest.raises(StatesError) as failed:
        machine(a_map(MaxConcurrency=1), work).run(INPUT)

    assert failed.value.name == MAP_FAILED
    assert 'item 2 ({"partition": 2}) failed: MemoryError: out of memory' in failed.value.cause
    assert started == [0, 1, 2, 2, 2]  # its own retries, then nothing after it


def test_the_maps_catch_takes_its_failure():
    definition = a_map(MaxConcurrency=1, Catch=[{"ErrorEquals": ["States.ALL"], "ResultPath": "$.error",
                                                 "Next": "Failed"}])
    definition["States"]["Each"].pop("End")
    definition["States"]["Failed"] = {"Type": "Pass", "End": True}

    def work(event, context):
        raise ValueError("bad partition")

    output = machine(definition, work).run(INPUT)
    assert output["error"]["Error"] == MAP_FAILED and "item 0" in output["error"]["Cause"]


@pytest.mark.parametrize(("change", "refusal"), [
    ({"ToleratedFailurePercentage": 5}, "tolerates no failed item"),
    ({"ItemReader": {"Resource": "arn:aws:states:::s3:listObjectsV2", "Parameters": {}}}, "JSON array in S3"),
    ({"ItemBatcher": {"MaxItemsPerBatch": 2}}, "ItemBatcher not supported"),
    ({"MaxConcurrency": 2, "MaxConcurrencyPath": "$.max_concurrency"}, "not both"),
])
def test_what_the_driver_would_not_run_as_aws_does_is_refused_when_built(change, refusal):
    with pytest.raises(ValueError, match=refusal):
        machine(a_map(**change), lambda event, context: {})


def test_the_run_state_machines_map_is_a_distributed_map_over_the_manifest():
    partitions = load_definition("reconciliation_run")["States"]["Partitions"]

    # AWS's field names (docs.aws.amazon.com/step-functions: ItemReader, ItemProcessor, Distributed Map)
    assert partitions["Type"] == "Map"
    assert partitions["ItemReader"] == {
        "Resource": "arn:aws:states:::s3:getObject", "ReaderConfig": {"InputType": "JSON"},
        "Parameters": {"Bucket.$": "$.manifest.Bucket", "Key.$": "$.manifest.Key"}}
    # STANDARD: a partition may take longer than an Express child's 5 minutes
    assert partitions["ItemProcessor"]["ProcessorConfig"] == {"Mode": "DISTRIBUTED", "ExecutionType": "STANDARD"}
    assert partitions["MaxConcurrencyPath"] == "$.max_concurrency"
    assert partitions["ToleratedFailurePercentage"] == 0
    # 1,000 partitions' results would pass the 256 KB payload: the merge reads the outcomes from S3
    assert partitions["ResultPath"] is None
    assert partitions["ItemSelector"] == {"environment.$": "$.environment", "run_id.$": "$.run_id",
                                          "round.$": "$$.Map.Item.Value.round",
                                          "partition.$": "$$.Map.Item.Value.partition"}
    item = partitions["ItemProcessor"]["States"]["MatchPartition"]
    assert item["Resource"] == "${RunPartitionFunction}"
    assert any("States.ALL" in r["ErrorEquals"] and r["MaxAttempts"] >= 2 for r in item["Retry"])
    assert item["Catch"][0]["Next"] == "PartitionFailed"
    assert partitions["Next"] == "Merge" and partitions["Catch"][0]["Next"] == "GiveUp"
