"""Domain events on the app's EventBridge bus (moto), read as a client's own rule would: a rule on
the bus that sends every `recon` event to a queue of the test's."""
import json
from contextlib import contextmanager
from dataclasses import replace
from datetime import timedelta

import pytest

from chalicelib.domain.clock import utc_now
from chalicelib.domain.events import make_event
from chalicelib.services import events as event_service
from chalicelib.services.ingestion import lifecycle
from tests.fakes.audit import FakeAuditRepository
from tests.fakes.events import FakeEventLedger, FakeEventPublisher
from tests.integration.conftest import record
from tests.support.crashes import Replaced, ports_swapped
from tests.support.people import add_user

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


def _opened_exception(api, ingest, reconciliation, bus) -> dict:
    """A bank record 30 days old, a run, and the exception it opened (its event)."""
    old = (utc_now() - timedelta(days=30)).date().isoformat()
    ingest(record("bank", 1, 900, old))
    api.post(f"/v1/reconciliations/{reconciliation['id']}/runs")
    [opened] = bus.events("reconciliation_exception.opened")
    return opened


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


def test_an_import_ended_again_by_a_retry_is_not_told_twice(api, services, ingest, bus):
    """Its event went out (its announcement is done): a redelivered finish sends nothing more."""
    assert api.post("/v1/data_streams", {"key": "bank", "name": "Bank"}).status_code == 201
    ingest(record("bank", 1, 1250))
    [first] = bus.events()
    job = services.ports.ingestion_jobs.get(bus.received[0]["detail"]["environment"], first["data"]["id"])

    lifecycle.conclude(services.ports, job, job.status)  # a redelivered finish

    assert [e["id"] for e in bus.events()] == [first["id"]]


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


def test_an_exception_is_told_when_opened_assigned_commented_and_moved(api, services, ingest, reconciliation, bus):
    opened = _opened_exception(api, ingest, reconciliation, bus)
    exception_id = opened["data"]["id"]
    assert opened["data"]["url"] == f"/v1/reconciliation_exceptions/{exception_id}"
    assert opened["data"]["status"] == "open" and opened["data"]["totals"]

    base = f"/v1/reconciliation_exceptions/{exception_id}"
    ada = add_user(services.users, _environment(services), "ada")
    assert api.post(f"{base}/assignees", {"idp_user_id": "ada"}).status_code == 201
    signed_in = {"Authorization": f"Bearer {services.identity.token_for('ada')}"}
    assert api.post(f"{base}/comments", {"body": "looking"}, key=None, headers=signed_in).status_code == 201
    assert api.patch(base, {"status": "investigating"}).status_code == 200

    [assigned] = bus.events("reconciliation_exception.assigned")
    [commented] = bus.events("reconciliation_exception.commented")
    [moved] = bus.events("reconciliation_exception.status_changed")
    assert assigned["data"]["assignees"] == ["ada"] and assigned["data"]["previous_assignees"] == []
    assert (assigned["data"]["change"], assigned["data"]["idp_user_ids"]) == ("assigned", ["ada"])
    assert commented["data"]["comment"]["body"] == "looking"
    # A person's change names them, as its audit entry does; a key's names no one.
    assert commented["data"]["actor"] == f"user:{ada.id}" and "actor" not in assigned["data"]
    assert (moved["data"]["previous_status"], moved["data"]["status"]) == ("open", "investigating")


def test_events_the_bus_refuses_are_parked_and_the_sweeper_sends_them(api, services, ingest, bus):
    assert api.post("/v1/data_streams", {"key": "bank", "name": "Bank"}).status_code == 201
    real = services.ports
    elsewhere = replace(real, events=type(services.events)(services.aws.client("events"), "no-such-bus"))
    environment = services.ports.api_keys.list()[0].environment
    event = make_event(environment, "file_import.completed", "job 77", utc_now(), {"id": 77})
    event_service.emit(elsewhere, environment, event)  # the bus is not there: parked, nothing raised
    assert bus.events() == []
    assert [h.event.id for h in real.event_ledger.parked()] == [event.id]

    from chalicelib.handlers.sweeper import sweep_task
    sweep_task()  # the one-minute sweeper

    assert [e["id"] for e in bus.events()] == [event.id]
    assert real.event_ledger.parked() == []


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


def _bulk_event(api, ingest, bus):
    assert api.post("/v1/data_streams", {"key": "bank", "name": "Bank"}).status_code == 201
    ingest(record("bank", 1, 1250))
    [event] = bus.events("bulk_request.completed")
    return event, bus.received[0]["detail"]["environment"]


def _left_pending(services, environment, event_id, entry_kept: bool):
    """What a worker that died part-way leaves: the announcement pending since long ago, and its
    audit entry written (it died after it) or not (it died before: the entry is taken out, which
    the chain's verify would report, but this test only counts entries)."""
    from chalicelib.adapters.dynamodb import keys
    from chalicelib.domain.audit import AuditQuery
    from chalicelib.domain.clock import iso

    services.table.update(keys.announced_event(environment, event_id), "SET #state = :pending, #at = :long_ago",
                          values={":pending": "pending", ":long_ago": iso(utc_now() - timedelta(hours=1))},
                          names={"#state": "state", "#at": "at"})
    if not entry_kept:
        entries, _ = services.ports.audit.list_page(environment, AuditQuery(actor=None), limit=50, cursor=None)
        [entry] = [e for e in entries if e.summary.get("event_id") == event_id]
        services.table.delete(keys.audit_entry(environment, entry.seq))


def _entries_of(api, event):
    return [e for e in api.get("/v1/audit_events?resource_type=bulk_request").json_body["data"]
            if e["summary"].get("event_id") == event["id"]]


def test_a_retry_after_a_worker_died_between_the_audit_entry_and_the_mark_writes_no_second_entry(
        api, services, ingest, bus):
    event, environment = _bulk_event(api, ingest, bus)
    _left_pending(services, environment, event["id"], entry_kept=True)
    job = services.ports.ingestion_jobs.get(environment, event["data"]["id"])

    lifecycle.conclude(services.ports, job, job.status)  # the job's retry
    lifecycle.conclude(services.ports, job, job.status)  # and another

    assert len(_entries_of(api, event)) == 1
    assert [e["id"] for e in bus.events("bulk_request.completed")] == [event["id"]] * 2  # sent again once


def test_a_retry_after_a_worker_died_before_the_audit_entry_writes_it(api, services, ingest, bus):
    event, environment = _bulk_event(api, ingest, bus)
    _left_pending(services, environment, event["id"], entry_kept=False)
    assert _entries_of(api, event) == []
    job = services.ports.ingestion_jobs.get(environment, event["data"]["id"])

    lifecycle.conclude(services.ports, job, job.status)

    assert len(_entries_of(api, event)) == 1


def test_a_duplicate_beside_a_live_announcement_leaves_it_to_its_worker(api, services, ingest, bus):
    event, environment = _bulk_event(api, ingest, bus)
    from chalicelib.adapters.dynamodb import keys
    services.table.update(keys.announced_event(environment, event["id"]), "SET #state = :pending",
                          values={":pending": "pending"}, names={"#state": "state"})  # reserved a moment ago
    job = services.ports.ingestion_jobs.get(environment, event["data"]["id"])

    lifecycle.conclude(services.ports, job, job.status)

    assert len(_entries_of(api, event)) == 1 and len(bus.events("bulk_request.completed")) == 1


def test_an_exception_whose_refresh_died_before_announcing_it_is_announced_by_the_next(
        api, services, ingest, reconciliation, bus):
    from chalicelib.services import reconciliation_exceptions

    old = (utc_now() - timedelta(days=30)).date().isoformat()
    ingest(record("bank", 1, 900, old))
    environment = services.ports.api_keys.list()[0].environment
    # The refresh that opened it died before announcing it: no event, no audit entry, no mark (its
    # announcement goes to fakes that nothing reads).
    died = replace(services.ports, events=FakeEventPublisher(), audit=FakeAuditRepository(),
                   event_ledger=FakeEventLedger())
    reconciliation_exceptions.refresh(died, environment, reconciliation["id"])
    [exception] = api.get("/v1/reconciliation_exceptions").json_body["data"]
    assert bus.events("reconciliation_exception.opened") == []

    reconciliation_exceptions.refresh(services.ports, environment, reconciliation["id"])
    reconciliation_exceptions.refresh(services.ports, environment, reconciliation["id"])

    [opened] = bus.events("reconciliation_exception.opened")
    assert opened["data"]["id"] == exception["id"]
    entries = api.get(f"/v1/audit_events?resource_type=reconciliation_exception&resource_id={exception['id']}"
                      ).json_body["data"]
    assert [e["action"] for e in entries] == ["reconciliation_exception.opened"]


def test_events_are_sent_in_calls_of_at_most_240_kb():
    from chalicelib.adapters.events import BYTES_PER_CALL, EventBridgePublisher

    events = [make_event("acme", "reconciliation_exception.commented", f"comment {n}", utc_now(),
                         {"comment": {"body": "x" * 100_000}}) for n in range(5)]
    batches = EventBridgePublisher(None, "bus")._batches("acme", events)

    assert [len(b) for b in batches] == [2, 2, 1]
    assert all(sum(len(entry["Detail"]) for _, entry in batch) <= BYTES_PER_CALL for batch in batches)


# The outbox: a change nothing retries (a person's, an exception resolving itself) loses no event
# when its process dies between the save and the event ---------------------------------------------

class Died(BaseException):
    """The process ends here (as a Lambda killed mid-call): no handler of ours catches it."""


@contextmanager
def dying_before_sending(services):
    """Inside, a change is saved and its process dies before its event goes: at the first write that
    sends it (its publication, or the reservation of its announcement)."""
    ports = services.ports
    with ports_swapped(services, events=Replaced(ports.events, publish=_die),
                       event_ledger=Replaced(ports.event_ledger, reserve=_die)), pytest.raises(Died):
        yield


def _dying_at_announcements(ports):
    """Ports whose process dies as an automated decision's announcement is reserved: before its audit
    entry and its event."""
    return replace(ports, event_ledger=Replaced(ports.event_ledger, reserve=_die))


def _sweep_after(services, delay: timedelta) -> int:
    return event_service.publish_parked(services.ports, now=utc_now() + delay)


def _environment(services):
    return services.ports.api_keys.list()[0].environment


def test_a_match_by_hand_whose_process_died_before_its_event_is_told_by_the_sweeper_once(
        api, services, ingest, reconciliation, bus):
    from chalicelib.adapters.dynamodb import keys
    from chalicelib.services import matches

    ids = ingest(record("bank", 1, 500)) + ingest(record("ledger", 1, 500))
    environment = _environment(services)
    with dying_before_sending(services):
        matches.create_manual_match(services.ports, environment, reconciliation["id"], ids, False, None)
    [match] = api.get(f"/v1/reconciliation_matches?reconciliation_id={reconciliation['id']}").json_body["data"]
    assert bus.events("reconciliation_match.created") == []

    assert _sweep_after(services, timedelta(seconds=30)) == 0  # its request might still be alive: left to it
    assert _sweep_after(services, timedelta(minutes=3)) == 1

    [created] = bus.events("reconciliation_match.created")
    assert created["data"]["id"] == match["id"] and created["data"]["record_count"] == 2
    assert services.ports.event_ledger.held() == []
    assert keys.PENDING_EVENTS not in services.table.get(keys.match(environment, match["id"]))
    assert _sweep_after(services, timedelta(minutes=10)) == 0
    assert len(bus.events("reconciliation_match.created")) == 1


def test_a_person_s_exception_changes_whose_process_died_are_told_by_the_sweeper(
        api, services, ingest, reconciliation, bus):
    from chalicelib.domain.reconciliation_exceptions import ExceptionStatus
    from chalicelib.services import reconciliation_exceptions as exceptions

    opened = _opened_exception(api, ingest, reconciliation, bus)
    exception_id, environment = opened["data"]["id"], _environment(services)
    add_user(services.users, environment, "ada")
    for change in (lambda: exceptions.add_comment(services.ports, environment, exception_id, body="looking",
                                                  author_idp_id="ada", mentions=[]),
                   lambda: exceptions.add_assignee(services.ports, environment, exception_id, idp_user_id="ada"),
                   lambda: exceptions.update(services.ports, environment, exception_id, title=None, description=None,
                                             status=ExceptionStatus.INVESTIGATING)):
        with dying_before_sending(services):
            change()

    assert _sweep_after(services, timedelta(minutes=3)) == 3

    [commented] = bus.events("reconciliation_exception.commented")
    [assigned] = bus.events("reconciliation_exception.assigned")
    [moved] = bus.events("reconciliation_exception.status_changed")
    assert commented["data"]["comment"]["body"] == "looking" and assigned["data"]["idp_user_ids"] == ["ada"]
    assert (moved["data"]["previous_status"], moved["data"]["status"]) == ("open", "investigating")
    assert services.ports.event_ledger.held() == []


def test_a_change_refused_or_never_saved_tells_nothing_and_its_hold_is_dropped(
        api, services, ingest, reconciliation, bus):
    from chalicelib.domain.errors import NotFound
    from chalicelib.services import matches

    environment = _environment(services)
    first, second = (matches.create_manual_match(
        services.ports, environment, reconciliation["id"],
        ingest(record("bank", n, 500)) + ingest(record("ledger", n, 500)), False, None) for n in (1, 2))
    # A confirm that read the match before another request unmatched it: refused after its event was held.
    stale = services.ports.matches.get(environment, first.id)
    assert api.delete(f"/v1/reconciliation_matches/{first.id}").status_code in (200, 204)
    reading_stale = replace(services.ports, matches=Replaced(services.ports.matches, get=lambda *_: stale))
    with pytest.raises(NotFound):
        matches.confirm(reading_stale, environment, first.id)
    # An unmatch whose process died before its last write.
    dying = replace(services.ports, matches=Replaced(services.ports.matches, mark_unmatched=_die))
    with pytest.raises(Died):
        matches.unmatch(dying, environment, second.id)
    assert sorted(h.event.type for h in services.ports.event_ledger.held()) == [
        "reconciliation_match.confirmed", "reconciliation_match.deleted"]

    assert _sweep_after(services, timedelta(minutes=3)) == 0

    assert bus.events("reconciliation_match.confirmed") == []
    assert [e["data"]["id"] for e in bus.events("reconciliation_match.deleted")] == [first.id]
    assert services.ports.event_ledger.held() == []


def _die(*_args, **_kwargs):
    raise Died()


def test_an_exception_that_resolved_itself_and_died_before_announcing_it_is_announced_by_the_sweeper_once(
        api, services, ingest, reconciliation, bus):
    from chalicelib.services import reconciliation_exceptions as exceptions

    old = (utc_now() - timedelta(days=30)).date().isoformat()
    [bank_id] = ingest(record("bank", 1, 900, old))
    api.post(f"/v1/reconciliations/{reconciliation['id']}/runs")
    [opened] = bus.events("reconciliation_exception.opened")
    [ledger_id] = ingest(record("ledger", 1, 900, old))
    assert api.post("/v1/reconciliation_matches", {"reconciliation_id": reconciliation["id"],
                                                   "record_ids": [bank_id, ledger_id]}).status_code == 201
    environment = _environment(services)
    with dying_before_sending(services):
        exceptions.refresh(services.ports, environment, reconciliation["id"])
    exception = api.get(f"/v1/reconciliation_exceptions/{opened['data']['id']}").json_body
    assert exception["status"] == "resolved" and bus.events("reconciliation_exception.status_changed") == []

    assert _sweep_after(services, timedelta(minutes=3)) == 0  # a refresh may live 15 minutes: left to it
    assert _sweep_after(services, timedelta(minutes=21)) == 1
    assert _sweep_after(services, timedelta(minutes=30)) == 0

    [resolved] = bus.events("reconciliation_exception.status_changed")
    assert (resolved["data"]["previous_status"], resolved["data"]["status"]) == ("open", "resolved")
    entries = api.get(f"/v1/audit_events?resource_type=reconciliation_exception&resource_id={exception['id']}"
                      ).json_body["data"]
    [entry] = [e for e in entries if e["action"] == "reconciliation_exception.status_changed"]
    assert entry["actor"] == f"system:exception_refresh:{reconciliation['id']}"
    assert entry["summary"]["event_id"] == resolved["id"]


def _unreachable(*_args) -> None:
    raise RuntimeError("the bus and the table are both unreachable")


def test_a_change_whose_event_could_not_be_sent_still_answers_and_the_sweeper_sends_it(
        api, services, ingest, reconciliation, bus):
    ids = ingest(record("bank", 1, 500)) + ingest(record("ledger", 1, 500))
    # The bus refuses the events and the ledger cannot park them: once held, an event's hold is all
    with ports_swapped(services, events=Replaced(services.ports.events, publish=_unreachable),
                       event_ledger=Replaced(services.ports.event_ledger, park=_unreachable)):
        response = api.post("/v1/reconciliation_matches",
                            {"reconciliation_id": reconciliation["id"], "record_ids": ids})
    assert response.status_code == 201 and bus.events("reconciliation_match.created") == []

    assert _sweep_after(services, timedelta(minutes=3)) == 1
    assert [e["data"]["id"] for e in bus.events("reconciliation_match.created")] == [response.json_body["id"]]


def test_an_import_the_sweeper_failed_and_died_before_announcing_is_announced_by_a_later_sweep_once(
        api, services, bus):
    """Nothing retries the sweeper's own decisions (the import leaves its lists once ended): the
    decision is held before it is made, and a later sweep announces one its sweeper left."""
    from chalicelib.services.ingestion import files, sweeper

    assert api.post("/v1/data_streams", {"key": "bank", "name": "Bank"}).status_code == 201
    created = api.post("/v1/data_streams/bank/file_imports", {"filename": "nov.csv", "format": "csv"}).json_body
    never_uploaded = utc_now() + files.UPLOAD_WAIT + timedelta(minutes=1)
    with pytest.raises(Died):
        sweeper.sweep(_dying_at_announcements(services.ports), now=never_uploaded)
    assert api.get(f"/v1/file_imports/{created['id']}").json_body["status"] == "failed"
    assert bus.events("file_import.failed") == []

    sweeper.sweep(services.ports, now=utc_now() + timedelta(minutes=1))  # within the hold's lease
    assert bus.events("file_import.failed") == []
    sweeper.sweep(services.ports, now=utc_now() + timedelta(minutes=21))
    sweeper.sweep(services.ports, now=utc_now() + timedelta(minutes=30))

    [failed] = bus.events("file_import.failed")
    assert failed["data"]["id"] == created["id"] and "never uploaded" in failed["data"]["error_message"]
    entries = api.get(f"/v1/audit_events?resource_type=file_import&resource_id={created['id']}").json_body["data"]
    assert [e["action"] for e in entries] == ["file_import.failed", "file_import.created"]
    assert services.ports.event_ledger.decisions("ingestion_job") == []


def test_a_decision_the_sweeper_made_and_announced_leaves_nothing_held(api, services, bus):
    from chalicelib.services.ingestion import files, sweeper

    assert api.post("/v1/data_streams", {"key": "bank", "name": "Bank"}).status_code == 201
    api.post("/v1/data_streams/bank/file_imports", {"filename": "nov.csv", "format": "csv"})
    sweeper.sweep(services.ports, now=utc_now() + files.UPLOAD_WAIT + timedelta(minutes=1))

    assert len(bus.events("file_import.failed")) == 1
    assert services.ports.event_ledger.decisions("ingestion_job") == []


def test_a_run_and_an_investigation_the_sweeper_failed_and_died_before_announcing_are_announced_later(
        api, services, ingest, reconciliation, bus):
    from chalicelib.domain.reconciliation_exceptions import RecordFilter
    from chalicelib.domain.runs import MAX_RESTARTS, STUCK_AFTER
    from chalicelib.services import investigations, reconciliation_runs
    from tests.fakes import FakeWorkflows

    opened = _opened_exception(api, ingest, reconciliation, bus)
    environment = _environment(services)
    services.ports = replace(services.ports, run_workflows=FakeWorkflows())  # a run nothing executes
    stuck = api.post(f"/v1/reconciliations/{reconciliation['id']}/runs").json_body
    for _ in range(MAX_RESTARTS):
        assert services.ports.runs.count_restart(services.ports.runs.get(environment, stuck["id"]))
    abandoned = investigations.start(services.ports, environment, opened["data"]["id"], RecordFilter())

    dying = _dying_at_announcements(services.ports)
    with pytest.raises(Died):
        reconciliation_runs.sweep(dying, now=utc_now() + STUCK_AFTER + timedelta(minutes=1))
    with pytest.raises(Died):
        investigations.sweep(dying, now=utc_now() + timedelta(hours=2))
    assert services.ports.runs.get(environment, stuck["id"]).status.value == "failed"
    assert bus.events("reconciliation_run.failed") == [] and bus.events("investigation.completed") == []

    for _ in range(2):
        reconciliation_runs.sweep(services.ports, now=utc_now() + timedelta(minutes=21))
        investigations.sweep(services.ports, now=utc_now() + timedelta(minutes=21))

    [failed] = bus.events("reconciliation_run.failed")
    [investigated] = bus.events("investigation.completed")
    assert failed["data"]["id"] == stuck["id"] and "restarts did not help" in failed["data"]["error_message"]
    assert (investigated["data"]["id"], investigated["data"]["status"]) == (abandoned.id, "failed")
    assert services.ports.event_ledger.decisions("reconciliation_run") == []
    assert services.ports.event_ledger.decisions("investigation") == []


def test_two_changes_racing_to_tell_the_same_event_id_send_only_the_one_saved(api, services, ingest, reconciliation,
                                                                               bus):
    """A person dismisses an exception while a refresh resolves the same version of it: both events
    would have one id (`exception N version V`). The person's save wins and its process dies before
    sending; the refresh's save is refused. Only the dismissal is told, by the sweeper."""
    from chalicelib.domain.reconciliation_exceptions import ExceptionStatus
    from chalicelib.services import reconciliation_exceptions as exceptions

    opened = _opened_exception(api, ingest, reconciliation, bus)
    environment = _environment(services)
    stale = services.ports.exceptions.get(environment, opened["data"]["id"])
    with dying_before_sending(services):
        exceptions.update(services.ports, environment, stale.id, title=None, description=None,
                          status=ExceptionStatus.DISMISSED)
    exceptions._resolve_empty(services.ports, stale, utc_now())  # the refresh's, refused: changed meanwhile
    assert len(services.ports.event_ledger.held()) == 2

    assert _sweep_after(services, timedelta(minutes=21)) == 1

    [told] = bus.events("reconciliation_exception.status_changed")
    assert (told["data"]["previous_status"], told["data"]["status"]) == ("open", "dismissed")
    assert services.ports.exceptions.get(environment, stale.id).status is ExceptionStatus.DISMISSED
    entries = api.get(f"/v1/audit_events?resource_type=reconciliation_exception&resource_id={stale.id}"
                      ).json_body["data"]
    assert not [e for e in entries if e["actor"].startswith("system:exception_refresh")
                and e["action"] == "reconciliation_exception.status_changed"]
    assert services.ports.event_ledger.held() == []


def test_a_held_decision_whose_announcement_is_still_pending_is_kept_until_it_is_done(api, services, bus):
    """The sweeper died after reserving the announcement and writing its audit entry, before the
    event: a later sweep finds the announcement pending (its lease runs from the reservation), so
    it keeps the decision, and announces once the announcement's own lease is over."""
    from chalicelib.services.ingestion import files, sweeper

    assert api.post("/v1/data_streams", {"key": "bank", "name": "Bank"}).status_code == 201
    created = api.post("/v1/data_streams/bank/file_imports", {"filename": "nov.csv", "format": "csv"}).json_body
    dying_at_the_event = replace(services.ports, events=Replaced(services.ports.events, publish=_die))
    with pytest.raises(Died):
        sweeper.sweep(dying_at_the_event, now=utc_now() + files.UPLOAD_WAIT + timedelta(minutes=1))

    sweeper.sweep(services.ports, now=utc_now() + timedelta(minutes=21))
    assert bus.events("file_import.failed") == []
    assert len(services.ports.event_ledger.decisions("ingestion_job")) == 1  # kept: not announced yet

    [entry] = [e for e in api.get(f"/v1/audit_events?resource_type=file_import&resource_id={created['id']}"
                                  ).json_body["data"] if e["action"] == "file_import.failed"]
    _left_pending(services, _environment(services), entry["summary"]["event_id"], entry_kept=True)
    sweeper.sweep(services.ports, now=utc_now() + timedelta(minutes=21))

    assert [e["data"]["id"] for e in bus.events("file_import.failed")] == [created["id"]]
    assert services.ports.event_ledger.decisions("ingestion_job") == []
