"""Bulk actions over HTTP (on moto, the worker in-process): many exceptions assigned, moved or
commented on at once, many proposed matches confirmed or rejected, by ids or by the list routes'
filters; a result per item, each item audited as its single route audits it, refused per item
where the caller's role may not do it, and never twice however often its message is delivered."""
from __future__ import annotations

import json
from datetime import timedelta

import pytest
from chalice.app import SQSEvent

from chalicelib.domain import bulk_actions as domain
from chalicelib.domain.clock import utc_now
from chalicelib.domain.users import Role
from chalicelib.handlers.bulk import handle_bulk_messages
from chalicelib.local.runtime import sqs_event
from chalicelib.services import bulk_actions as service
from tests.integration.conftest import record
from tests.support.people import add_user
from tests.support.worlds import dated, world_of_api

PROPOSING = {"name": "Amount", "priority": 1, "auto_confirm": False,
             "conditions": [{"field": "amount", "operator": "equals"},
                            {"field": "date", "operator": "within", "days": 3}]}
EXCEPTIONS, MATCHES = "/v1/reconciliation_exceptions/bulk", "/v1/reconciliation_matches/bulk"


def days_ago(n: int) -> str:
    return (utc_now().date() - timedelta(days=n)).isoformat()


@pytest.fixture
def world(api, services, ingest, reconciliation):
    """Bank to ledger: three pairs a rule only proposes (weeks old), and bank 25.00 and ledger
    40.00 unmatched for weeks (an open exception each, holding the proposed ones too). A user of
    each role. Built once a process, restored after."""
    return world_of_api(dated("test_bulk_actions_api.world"), api,
                        lambda: _world(api, services, ingest, reconciliation))


def _world(api, services, ingest, reconciliation):
    rid = reconciliation["id"]
    assert api.post(f"/v1/reconciliations/{rid}/rules", PROPOSING).status_code == 201
    ingest(*[record("bank", n, 1000 + n, days_ago(20)) for n in range(3)], record("bank", 9, 2500, days_ago(40)))
    ingest(*[record("ledger", n, 1000 + n, days_ago(20)) for n in range(3)], record("ledger", 9, 4000, days_ago(30)))
    run = api.post(f"/v1/reconciliations/{rid}/runs").json_body
    assert api.get(f"/v1/reconciliations/{rid}/runs/{run['id']}").json_body["status"] == "completed"
    matches = api.get(f"/v1/reconciliation_matches?reconciliation_id={rid}").json_body["data"]
    assert [m["status"] for m in matches] == ["proposed"] * 3
    exceptions = {e["data_stream_key"]: e["id"]
                  for e in api.get(f"/v1/reconciliation_exceptions?reconciliation_id={rid}").json_body["data"]}
    people = {role: add_user(services.users, "acme", f"bulk-{role.value}", role) for role in Role}
    return {"reconciliation_id": rid, "matches": sorted(m["id"] for m in matches), "exceptions": exceptions,
            "users": {role.value: (user.id, user.idp_user_id) for role, user in people.items()}}


def as_role(services, world, role: str) -> dict:
    """The request's keywords for a person of `role`, signed in (no API key)."""
    return {"key": None, "headers": {"Authorization": f"Bearer {services.identity.token_for(world['users'][role][1])}"}}


def submit(api, path, body, **kw):
    response = api.post(path, body, **kw)
    assert response.status_code == 202, response.json_body
    return response.json_body


def done(api, worker, action, **kw):
    """The action once the worker has drained the queue (it runs in-process: no wait to poll)."""
    worker.drain()
    answer = api.get(action["url"], **kw)
    assert answer.status_code == 200, answer.json_body
    assert answer.json_body["status"] == "completed", answer.json_body
    return answer.json_body


def audit_entries(api, resource_type, resource_id, action):
    entries = api.get(f"/v1/audit_events?resource_type={resource_type}&resource_id={resource_id}").json_body["data"]
    return [e for e in entries if e["action"] == action]


def test_a_status_by_ids_moves_each_exception_and_fails_an_unknown_one_alone(api, world, worker):
    bank, ledger = world["exceptions"]["bank"], world["exceptions"]["ledger"]
    action = submit(api, EXCEPTIONS, {"action": "status", "status": "dismissed", "ids": [bank, 999_999, ledger]})
    assert (action["status"], action["total_items"], action["target"], action["action"]) == (
        "pending", 3, "reconciliation_exception", "status")
    assert action["url"] == f"/v1/bulk_actions/{action['id']}" and action["selection"] == {"ids": 3}

    finished = done(api, worker, action)

    assert (finished["succeeded_items"], finished["failed_items"], finished["skipped_items"]) == (2, 1, 0)
    assert finished["processed_items"] == 3 and finished["progress"] == 100 and finished["completed_at"]
    assert finished["results"] == [
        {"index": 0, "id": bank, "status": "succeeded", "error": None},
        {"index": 1, "id": 999_999, "status": "failed", "error": "reconciliation exception 999999 not found"},
        {"index": 2, "id": ledger, "status": "succeeded", "error": None}]
    assert finished["next_cursor"] is None
    for exception_id in (bank, ledger):
        assert api.get(f"/v1/reconciliation_exceptions/{exception_id}").json_body["status"] == "dismissed"
        # Audited as the single PATCH is: its action, the status before and after, who asked and in which bulk action
        [entry] = audit_entries(api, "reconciliation_exception", exception_id, "reconciliation_exception.updated")
        assert entry["summary"]["bulk_action_id"] == action["id"]
        assert entry["summary"]["before"] == {"status": "open"} and entry["summary"]["after"] == {"status": "dismissed"}
        assert entry["actor"].startswith("api_key:")
    [created] = audit_entries(api, "bulk_action", action["id"], "bulk_action.created")
    assert created["summary"]["total_items"] == 3 and created["summary"]["action"] == "status"

    # The same again: nothing to do, and nothing audited
    again = done(api, worker, submit(api, EXCEPTIONS, {"action": "status", "status": "dismissed",
                                                       "ids": [bank, ledger]}))
    assert [(r["status"], r["error"]) for r in again["results"]] == [("skipped", "already dismissed")] * 2
    assert len(audit_entries(api, "reconciliation_exception", bank, "reconciliation_exception.updated")) == 1


def test_a_move_the_status_table_refuses_fails_that_item(api, world, worker):
    bank = world["exceptions"]["bank"]
    assert api.patch(f"/v1/reconciliation_exceptions/{bank}", {"status": "dismissed"}).status_code == 200
    finished = done(api, worker, submit(api, EXCEPTIONS, {"action": "status", "status": "investigating",
                                                          "ids": [bank, world["exceptions"]["ledger"]]}))
    assert [r["status"] for r in finished["results"]] == ["failed", "succeeded"]
    assert finished["results"][0]["error"] == "an exception that is dismissed cannot become investigating"


def test_assign_by_the_queues_filter_assigns_each_once(api, services, world, worker):
    user_id, idp = world["users"]["preparer"]
    body = {"action": "assign", "user_id": user_id, "filter": {"reconciliation_id": world["reconciliation_id"]}}
    action = submit(api, EXCEPTIONS, body, **as_role(services, world, "preparer"))
    assert action["selection"] == {"filter": {"reconciliation_id": world["reconciliation_id"]}}
    assert action["params"] == {"user_id": user_id, "idp_user_id": idp}
    finished = done(api, worker, action)
    assert finished["total_items"] == 2 and finished["succeeded_items"] == 2
    assert {r["id"] for r in finished["results"]} == set(world["exceptions"].values())
    for exception_id in world["exceptions"].values():
        detail = api.get(f"/v1/reconciliation_exceptions/{exception_id}").json_body
        assert [a["user_id"] for a in detail["assignees"]] == [user_id]
        [entry] = audit_entries(api, "reconciliation_exception", exception_id, "reconciliation_exception.assigned")
        assert entry["actor"] == f"user:{world['users']['preparer'][0]}"
    # The queue's filter, as the list reads it: nobody unassigned is left
    again = done(api, worker, submit(api, EXCEPTIONS, {**body, "filter": {"unassigned": True}}))
    assert again["total_items"] == 0 and again["results"] == []
    twice = done(api, worker, submit(api, EXCEPTIONS, body))
    assert [r["status"] for r in twice["results"]] == ["skipped", "skipped"]


def test_the_filter_takes_the_queues_service_level_filters_and_selects_what_the_queue_lists(api, world, worker):
    rid = world["reconciliation_id"]
    listed = api.get(f"/v1/reconciliation_exceptions?reconciliation_id={rid}").json_body["data"]
    bucket, severity = listed[0]["age_bucket"], listed[0]["severity"]
    for given in ({"age_bucket": bucket}, {"severity": severity}, {"age_bucket": "0_1d"}, {"overdue": True},
                  {"age_bucket": bucket, "severity": severity, "overdue": False}):
        query = "&".join(f"{k}={str(v).lower()}" for k, v in given.items())
        queue = {e["id"] for e in api.get(f"/v1/reconciliation_exceptions?reconciliation_id={rid}&{query}").json_body[
            "data"]}
        action = submit(api, EXCEPTIONS, {"action": "status", "status": "open",
                                          "filter": {"reconciliation_id": rid, **given}})
        finished = done(api, worker, action)
        assert {r["id"] for r in finished["results"]} == queue, given  # open already: skipped, each named
        assert finished["total_items"] == len(queue)
    assert api.post(EXCEPTIONS, {"action": "status", "status": "open",
                                 "filter": {"severity": "urgent"}}).status_code == 422


def test_a_comment_is_written_once_per_exception_however_often_its_message_comes(api, world, worker, services,
                                                                                monkeypatch):
    ids = sorted(world["exceptions"].values())
    author = world["users"]["preparer"][1]
    action = submit(api, EXCEPTIONS, {"action": "comment", "body": "Chasing the bank", "author_idp_id": author,
                                      "ids": ids})
    # The first delivery dies after its items were applied, before their results were stored
    saved = services.bulk_actions.save_chunk

    def dies(*args, **kwargs):
        raise RuntimeError("the worker died")

    monkeypatch.setattr(services.bulk_actions, "save_chunk", dies)
    with pytest.raises(RuntimeError):
        service.process(services.ports, "acme", action["id"])
    monkeypatch.setattr(services.bulk_actions, "save_chunk", saved)
    for exception_id in ids:
        assert len(api.get(f"/v1/reconciliation_exceptions/{exception_id}").json_body["comments"]) == 1

    # Delivered again (the queue still holds the first message), then the same message once more
    finished = done(api, worker, action)
    event = SQSEvent(sqs_event([{"MessageId": "m-1", "ReceiptHandle": "r-1", "Body": json.dumps(
        service.message("acme", action["id"])), "Attributes": {"ApproximateReceiveCount": "1"}}],
        "recon-test-bulk", "us-east-1"), None)
    handle_bulk_messages(event)
    handle_bulk_messages(event)

    # Each item's result was kept with its mark when its comment was written: the same result again
    assert {(r["status"], r["error"]) for r in finished["results"]} == {("succeeded", None)}
    for exception_id in ids:
        comments = api.get(f"/v1/reconciliation_exceptions/{exception_id}").json_body["comments"]
        assert [(c["body"], c["author_idp_id"]) for c in comments] == [("Chasing the bank", author)]
        assert len(audit_entries(api, "reconciliation_exception", exception_id,
                                 "reconciliation_exception.commented")) == 1
    assert api.get(action["url"]).json_body == finished


def test_an_approver_confirms_a_reconciliations_proposed_matches_by_filter(api, services, world, worker):
    approver = as_role(services, world, "approver")
    action = submit(api, MATCHES, {"action": "confirm", "filter": {"reconciliation_id": world["reconciliation_id"]}},
                    **approver)
    finished = done(api, worker, action)
    assert finished["total_items"] == 3 and finished["succeeded_items"] == 3
    for match_id in world["matches"]:
        match = api.get(f"/v1/reconciliation_matches/{match_id}").json_body
        assert match["status"] == "confirmed"
        assert {r["status"] for r in match["records"]} == {"reconciled"}
        [entry] = audit_entries(api, "reconciliation_match", match_id, "reconciliation_match.confirmed")
        assert entry["actor"] == f"user:{world['users']['approver'][0]}"
        assert entry["summary"]["bulk_action_id"] == action["id"]
    # None proposed is left; by ids, each is already so
    assert done(api, worker, submit(api, MATCHES, {"action": "confirm", "filter": {
        "reconciliation_id": world["reconciliation_id"]}}, **approver))["total_items"] == 0
    again = done(api, worker, submit(api, MATCHES, {"action": "confirm", "ids": world["matches"]}, **approver))
    assert {(r["status"], r["error"]) for r in again["results"]} == {("skipped", "already confirmed")}


def test_reject_unmatches_proposed_matches_and_refuses_a_confirmed_one(api, world, worker):
    first, second, third = world["matches"]
    assert api.post(f"/v1/reconciliation_matches/{third}/confirm").status_code == 200
    finished = done(api, worker, submit(api, MATCHES, {"action": "reject", "ids": [first, second, third]}))
    assert [r["status"] for r in finished["results"]] == ["succeeded", "succeeded", "failed"]
    assert "is confirmed: only proposed matches are rejected here" in finished["results"][2]["error"]
    assert api.get(f"/v1/reconciliation_matches/{first}").status_code == 404
    assert api.get(f"/v1/reconciliation_matches/{third}").json_body["status"] == "confirmed"
    assert len(audit_entries(api, "reconciliation_match", first, "reconciliation_match.deleted")) == 1
    again = done(api, worker, submit(api, MATCHES, {"action": "reject", "ids": [first]}))
    assert again["results"][0]["status"] == "skipped"


def test_what_the_callers_role_may_not_do_is_refused_per_item(api, services, world, worker):
    # A preparer may work exceptions, but confirming a match is an approver's: each item is refused
    action = submit(api, MATCHES, {"action": "confirm", "ids": world["matches"][:2]},
                    **as_role(services, world, "preparer"))
    finished = done(api, worker, action)
    assert [(r["status"], r["error"]) for r in finished["results"]] == [
        ("failed", "forbidden: confirming a match needs the approver role or above; yours is preparer")] * 2
    assert {api.get(f"/v1/reconciliation_matches/{m}").json_body["status"] for m in world["matches"]} == {"proposed"}
    # A viewer may not ask at all
    refused = api.post(EXCEPTIONS, {"action": "status", "status": "resolved", "ids": [1]},
                       **as_role(services, world, "viewer"))
    assert refused.status_code == 403
    assert refused.json_body["message"] == ("POST /v1/reconciliation_exceptions/bulk needs the preparer role or above; "
                                            "yours is viewer")


@pytest.mark.parametrize("body, field, message", [
    ({"action": "status", "status": "open"}, "ids", "give ids or filter (one of the two)"),
    ({"action": "status", "status": "open", "ids": [1], "filter": {}}, "ids", "give ids or filter (one of the two)"),
    ({"action": "status", "status": "open", "ids": [1, 2, 1]}, "ids", "ids[2]: 1 is repeated"),
    ({"action": "status", "status": "open", "ids": list(range(1, 1002))}, "ids", "at most 1000"),
    ({"action": "status", "status": "open", "filter": {"statuss": "open"}}, "filter.statuss", "is not allowed"),
    ({"action": "status", "ids": [1]}, "status", "give the status"),
    ({"action": "status", "status": "gone", "ids": [1]}, "status", ""),
    ({"action": "assign", "ids": [1]}, "user_id", "give user_id or idp_user_id"),
    ({"action": "assign", "user_id": 999, "ids": [1]}, "user_id", "is not an active user"),
    ({"action": "comment", "body": "x", "ids": [1]}, "author_idp_id", "an API key names the comment's author"),
    ({"action": "nothing", "ids": [1]}, "action", ""),
    ({"action": "status", "status": "open", "filter": {"amount_min": 5, "amount_max": 1}}, "amount_min",
     "must not be above amount_max"),
])
def test_a_bad_request_is_refused_naming_its_field_before_anything_is_done(api, body, field, message):
    response = api.post(EXCEPTIONS, body)
    assert response.status_code == 422, response.json_body
    [error] = [e for e in response.json_body["errors"] if e["field"] == field]
    assert message in error["message"]


def test_a_filter_selecting_more_than_the_cap_is_refused(api, world, monkeypatch):
    monkeypatch.setattr(domain, "MAX_FILTERED", 2)
    response = api.post(MATCHES, {"action": "confirm", "filter": {"reconciliation_id": world["reconciliation_id"]}})
    assert response.status_code == 422
    assert response.json_body["errors"][0] == {"field": "filter", "message": (
        "the filter selects more than 2 proposed matches; a bulk action takes at most 2: narrow the filter")}
    unknown = api.post(MATCHES, {"action": "confirm", "filter": {"reconciliation_id": 999_999}})
    assert unknown.status_code == 404


def test_an_idempotency_key_returns_the_first_action_and_refuses_another_body(api, world, worker):
    body = {"action": "status", "status": "investigating", "ids": [world["exceptions"]["bank"]]}
    first = submit(api, EXCEPTIONS, body, headers={"Idempotency-Key": "k-1"})
    again = submit(api, EXCEPTIONS, body, headers={"Idempotency-Key": "k-1"})
    assert again["id"] == first["id"]
    other = api.post(EXCEPTIONS, {**body, "status": "resolved"}, headers={"Idempotency-Key": "k-1"})
    assert other.status_code == 409
    assert done(api, worker, first)["succeeded_items"] == 1
    assert submit(api, EXCEPTIONS, body, headers={"Idempotency-Key": "k-1"})["status"] == "completed"


def test_results_come_a_page_at_a_time(api, world, worker):
    ids = [world["exceptions"]["bank"], 999_998, 999_997]
    action = submit(api, EXCEPTIONS, {"action": "status", "status": "investigating", "ids": ids})
    worker.drain()
    first = api.get(f"{action['url']}?limit=2").json_body
    assert [r["id"] for r in first["results"]] == ids[:2] and first["next_cursor"]
    rest = api.get(f"{action['url']}?limit=2&cursor={first['next_cursor']}").json_body
    assert [r["id"] for r in rest["results"]] == ids[2:] and rest["next_cursor"] is None
    assert api.get(f"{action['url']}?cursor=nonsense").status_code == 400


def test_another_environment_reaches_nothing_by_ids_or_by_filter(api, services, world, worker):
    from chalicelib.services.api_keys import create_key

    other = create_key(services.api_keys, "globex")[1]
    bank = world["exceptions"]["bank"]
    by_ids = done(api, worker, submit(api, EXCEPTIONS, {"action": "status", "status": "resolved", "ids": [bank]},
                                      key=other), key=other)
    assert by_ids["results"] == [{"index": 0, "id": bank, "status": "failed",
                                  "error": f"reconciliation exception {bank} not found"}]
    by_filter = done(api, worker, submit(api, EXCEPTIONS, {"action": "status", "status": "resolved", "filter": {
        "reconciliation_id": world["reconciliation_id"]}}, key=other), key=other)
    assert by_filter["total_items"] == 0
    matches = done(api, worker, submit(api, MATCHES, {"action": "reject", "ids": world["matches"]}, key=other),
                   key=other)
    assert {r["status"] for r in matches["results"]} == {"failed"}
    assert api.post(MATCHES, {"action": "reject", "filter": {"reconciliation_id": world["reconciliation_id"]}},
                    key=other).status_code == 404
    assert api.get(by_ids["url"]).status_code == 404  # and A does not see B's
    assert api.get(f"/v1/reconciliation_exceptions/{bank}").json_body["status"] == "open"
    assert {api.get(f"/v1/reconciliation_matches/{m}").json_body["status"] for m in world["matches"]} == {"proposed"}


def lose_queued_messages(services) -> None:
    """The bulk queue's messages, gone (lost, or delivered for the last time to a worker that was killed)."""
    sqs = services.aws.sqs
    url = sqs.get_queue_url(QueueName=services.settings.bulk_queue_name)["QueueUrl"]
    while messages := sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", []):
        for message in messages:
            sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])


def test_a_bulk_action_whose_message_was_lost_is_sent_again_by_the_sweeper_and_its_end_told(
        api, world, worker, services):
    action = submit(api, EXCEPTIONS, {"action": "status", "status": "investigating",
                                      "ids": sorted(world["exceptions"].values())})
    lose_queued_messages(services)
    worker.drain()
    assert api.get(action["url"]).json_body["status"] == "pending"  # nothing left to take it up
    counts = service.sweep(services.ports, utc_now() + timedelta(minutes=6))
    assert counts["started"] == 1, counts
    finished = done(api, worker, action)
    assert finished["succeeded_items"] == 2
    [entry] = audit_entries(api, "bulk_action", action["id"], "bulk_action.completed")
    assert entry["actor"] == f"system:bulk_action:{action['id']}"
    assert (entry["summary"]["status"], entry["summary"]["succeeded_items"]) == ("completed", 2)
    assert service.sweep(services.ports, utc_now() + timedelta(hours=2))["started"] == 0  # ended: not listed


def test_a_bulk_action_whose_worker_died_on_its_last_delivery_ends_failed_saying_why(api, world, worker, services):
    action = submit(api, EXCEPTIONS, {"action": "status", "status": "investigating",
                                      "ids": sorted(world["exceptions"].values())})
    lose_queued_messages(services)  # delivered for the last time, the worker killed by Lambda's timeout
    stored = services.bulk_actions.get("acme", action["id"])
    services.bulk_actions.move(stored, domain.BulkStatus.PROCESSING, started_at=utc_now(), last_progress_at=utc_now())
    when = utc_now()
    for _ in range(3):  # each re-sent message lost too
        when += timedelta(minutes=17)
        assert service.sweep(services.ports, when)["restarted"] == 1
        lose_queued_messages(services)
    assert service.sweep(services.ports, when + timedelta(minutes=17))["failed"] == 1
    failed = api.get(action["url"]).json_body
    assert failed["status"] == "failed" and "3 restarts did not help" in failed["error"]
    [entry] = audit_entries(api, "bulk_action", action["id"], "bulk_action.completed")
    assert entry["summary"]["status"] == "failed"
