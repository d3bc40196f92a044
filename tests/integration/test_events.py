"""Domain events on the app's EventBridge bus (moto), read as a client's own rule would: a rule on
the bus that sends every `recon` event to a queue of the test's."""
import json
from dataclasses import replace
from datetime import timedelta

import pytest

from chalicelib.domain.clock import utc_now
from chalicelib.domain.events import make_event
from chalicelib.services import events as event_service
from chalicelib.services import ingestion
from tests.integration.conftest import record

RULE = {"name": "Amount", "priority": 1, "conditions": [{"field": "amount", "operator": "equals"}]}


class BusListener:
    def __init__(self, services) -> None:
        sqs, bus = services.aws.sqs, services.settings.event_bus_name
        events = services.aws.client("events")
        self._sqs = sqs
        self._url = sqs.create_queue(QueueName="test-bus-listener")["QueueUrl"]
        arn = sqs.get_queue_attributes(QueueUrl=self._url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        events.put_rule(Name="test-listener", EventBusName=bus, EventPattern=json.dumps({"source": ["recon"]}))
        events.put_targets(Rule="test-listener", EventBusName=bus, Targets=[{"Id": "listener", "Arn": arn}])
        self.received: list[dict] = []

    def take(self) -> list[dict]:
        """The bus messages received since the last take, oldest first."""
        taken = []
        while True:
            batch = self._sqs.receive_message(QueueUrl=self._url, MaxNumberOfMessages=10).get("Messages", [])
            if not batch:
                break
            for message in batch:
                taken.append(json.loads(message["Body"]))
                self._sqs.delete_message(QueueUrl=self._url, ReceiptHandle=message["ReceiptHandle"])
        self.received += taken
        return taken

    def events(self, event_type: str | None = None) -> list[dict]:
        self.take()
        return [m["detail"]["event"] for m in self.received if event_type in (None, m["detail-type"])]


@pytest.fixture
def bus(services):
    return BusListener(services)


def test_a_bulk_request_that_ends_tells_the_bus_with_its_counts_and_url(api, ingest, bus):
    assert api.post("/v1/data_streams", {"key": "bank", "name": "Bank"}).status_code == 201
    [record_id] = ingest(record("bank", 1, 1250))

    [message] = bus.take()
    assert message["source"] == "recon" and message["detail-type"] == "bulk_request.completed"
    event = message["detail"]["event"]
    assert event["type"] == "bulk_request.completed" and event["id"].startswith("evt_")
    assert event["data"]["status"] == "completed" and event["data"]["successful_items"] == 1
    assert event["data"]["url"] == f"/v1/bulk_requests/{event['data']['id']}"
    assert message["detail"]["environment"] and "environment" not in json.dumps(event)


def test_an_import_ended_again_by_a_retry_tells_the_bus_the_same_event_id(api, services, ingest, bus):
    assert api.post("/v1/data_streams", {"key": "bank", "name": "Bank"}).status_code == 201
    ingest(record("bank", 1, 1250))
    [first] = bus.events()
    job = services.ports.ingestion_jobs.get(bus.received[0]["detail"]["environment"], first["data"]["id"])

    ingestion.conclude(services.ports, job, job.status)  # a redelivered finish

    assert [e["id"] for e in bus.events()] == [first["id"], first["id"]]


def test_a_run_tells_the_bus_it_completed_with_counts_per_rule(api, ingest, reconciliation, bus):
    assert api.post(f"/v1/reconciliations/{reconciliation['id']}/rules", RULE).status_code == 201
    ingest(record("bank", 1, 500), record("bank", 2, 700))
    ingest(record("ledger", 1, 500))
    run = api.post(f"/v1/reconciliations/{reconciliation['id']}/runs").json_body

    [completed] = bus.events("reconciliation_run.completed")
    assert completed["data"]["id"] == run["id"] and completed["data"]["matched_records"] == 2
    assert completed["data"]["rule_summary"] == api.get(
        f"/v1/reconciliations/{reconciliation['id']}/runs/{run['id']}").json_body["rule_summary"]
    assert completed["data"]["url"] == f"/v1/reconciliations/{reconciliation['id']}/runs/{run['id']}"
    assert not bus.events("reconciliation_match.created")  # a run's matches are counted, not told one by one


def test_a_match_by_hand_is_told_when_made_and_when_deleted(api, ingest, reconciliation, bus):
    ids = ingest(record("bank", 1, 500)) + ingest(record("ledger", 1, 500))
    match = api.post("/v1/reconciliation_matches", {"reconciliation_id": reconciliation["id"],
                                                    "record_ids": ids}).json_body
    assert api.delete(f"/v1/reconciliation_matches/{match['id']}").status_code in (200, 202, 204)

    [created] = bus.events("reconciliation_match.created")
    [deleted] = bus.events("reconciliation_match.deleted")
    assert created["data"]["id"] == deleted["data"]["id"] == match["id"]
    assert created["data"]["record_count"] == 2 and created["id"] != deleted["id"]


def test_an_exception_is_told_when_opened_assigned_commented_and_moved(api, ingest, reconciliation, bus):
    old = (utc_now() - timedelta(days=30)).date().isoformat()
    ingest(record("bank", 1, 900, old))
    api.post(f"/v1/reconciliations/{reconciliation['id']}/runs")
    [opened] = bus.events("reconciliation_exception.opened")
    exception_id = opened["data"]["id"]
    assert opened["data"]["url"] == f"/v1/reconciliation_exceptions/{exception_id}"
    assert opened["data"]["status"] == "open" and opened["data"]["totals"]

    base = f"/v1/reconciliation_exceptions/{exception_id}"
    assert api.post(f"{base}/assignees", {"idp_user_id": "ada"}).status_code == 201
    assert api.post(f"{base}/comments", {"body": "looking", "author_idp_id": "ada"}).status_code == 201
    assert api.patch(base, {"status": "investigating"}).status_code == 200

    [assigned] = bus.events("reconciliation_exception.assigned")
    [commented] = bus.events("reconciliation_exception.commented")
    [moved] = bus.events("reconciliation_exception.status_changed")
    assert assigned["data"]["assignees"] == ["ada"] and assigned["data"]["previous_assignees"] == []
    assert commented["data"]["comment"]["body"] == "looking"
    assert (moved["data"]["previous_status"], moved["data"]["status"]) == ("open", "investigating")


def test_events_the_bus_refuses_are_parked_and_the_sweeper_sends_them(api, services, ingest, bus):
    assert api.post("/v1/data_streams", {"key": "bank", "name": "Bank"}).status_code == 201
    real = services.ports
    elsewhere = replace(real, events=type(services.events)(services.aws.client("events"), "no-such-bus"))
    environment = services.ports.api_keys.list()[0].environment
    event = make_event(environment, "file_import.completed", "job 77", utc_now(), {"id": 77})
    event_service.emit(elsewhere, environment, event)  # the bus is not there: parked, nothing raised
    assert bus.events() == []
    assert [e.id for _, e in real.parked_events.parked()] == [event.id]

    from chalicelib.jobs.sweeper import sweep_task
    sweep_task()  # the one-minute sweeper

    assert [e["id"] for e in bus.events()] == [event.id]
    assert real.parked_events.parked() == []


def test_a_runs_end_is_an_automated_decision_in_the_audit_trail_once_however_often_it_is_announced(
        api, services, ingest, reconciliation, bus):
    assert api.post(f"/v1/reconciliations/{reconciliation['id']}/rules", RULE).status_code == 201
    ingest(record("bank", 1, 500))
    ingest(record("ledger", 1, 500))
    run = api.post(f"/v1/reconciliations/{reconciliation['id']}/runs").json_body
    environment = bus.events() and bus.received[0]["detail"]["environment"]

    from chalicelib.services import reconciliation_runs
    reconciliation_runs.finish(services.ports, environment, run["id"])  # a retried finish task

    entries = api.get("/v1/audit_events?resource_type=reconciliation_run").json_body["data"]
    # The API call that asked for the run, and the run's end (once, though finished twice).
    assert sorted(e["actor"] for e in entries) == ["api_key:1", f"system:reconciliation_run:{run['id']}"]
    [entry] = [e for e in entries if e["actor"].startswith("system:")]
    assert entry["resource_id"] == str(run["id"])
    assert entry["action"] == "reconciliation_run.completed"
    assert entry["summary"]["matched_records"] == 2 and "matches_url" in entry["summary"]
    [event_id] = {e["id"] for e in bus.events("reconciliation_run.completed")}
    assert entry["summary"]["event_id"] == event_id
    assert api.get("/v1/audit_events/verify").json_body["intact"] is True
