"""Exceptions: how unmatched records come and go, and the queue people work from (on moto, through the API)."""
from datetime import timedelta

import pytest

from chalicelib.domain.clock import utc_now
from chalicelib.domain.users import UserStatus
from tests.integration.conftest import record
from tests.support.people import add_user
from tests.support.worlds import dated, world_of_api

RULE = {"name": "Amount", "priority": 1, "conditions": [{"field": "amount", "operator": "equals"},
                                                        {"field": "date", "operator": "within", "days": 3}]}


def days_ago(n: int) -> str:
    return (utc_now().date() - timedelta(days=n)).isoformat()


@pytest.fixture
def ran(api, ingest, reconciliation):
    """Bank: 10.00 and 25.00 (credit) and 7.00 (debit) unmatched for weeks, 5.00 matched, 3.00 from today.
    Ledger: the 5.00 partner, and 40.00 unmatched for weeks. Built once a process, restored after."""
    return world_of_api(dated("test_exceptions_api.ran"), api, lambda: _ran(api, ingest, reconciliation))


def _ran(api, ingest, reconciliation):
    assert api.post(f"/v1/reconciliations/{reconciliation['id']}/rules", RULE).status_code == 201
    bank = ingest(record("bank", 1, 1000, days_ago(20)), record("bank", 2, 2500, days_ago(40)),
                  record("bank", 3, 700, days_ago(100), direction="debit"), record("bank", 4, 500, days_ago(10)),
                  record("bank", 5, 300, days_ago(0)))
    ledger = ingest(record("ledger", 1, 500, days_ago(10)), record("ledger", 2, 4000, days_ago(8)))
    run = api.post(f"/v1/reconciliations/{reconciliation['id']}/runs").json_body
    assert api.get(f"/v1/reconciliations/{reconciliation['id']}/runs/{run['id']}").json_body["status"] == "completed"
    return {"bank": bank, "ledger": ledger, "reconciliation": reconciliation}


def queue(api, **params):
    query = "&".join(f"{k}={v}" for k, v in params.items())
    response = api.get(f"/v1/reconciliation_exceptions?{query}")
    assert response.status_code == 200, response.json_body
    return response.json_body


def bank_exception(api, ran):
    [row] = queue(api, data_stream_key="bank")["data"]
    return row


def test_a_run_leaves_one_open_exception_per_stream_for_records_past_their_grace(api, ran):
    page = queue(api, reconciliation_id=ran["reconciliation"]["id"])
    assert page["has_more"] is False and page["offset"] == 0
    assert sorted(e["data_stream_key"] for e in page["data"]) == ["bank", "ledger"]
    bank = bank_exception(api, ran)
    assert bank["title"] == "Bank: unmatched records" and bank["status"] == "open"
    assert bank["reconciliation_name"] == "Bank to ledger" and bank["data_stream_name"] == "Bank"
    assert bank["aggregates"] == {
        "record_count": 3, "total_amount": 1000 + 2500 - 700, "debit_count": 1, "debit_sum": 700,
        "credit_count": 2, "credit_sum": 3500, "pending_confirmation_count": 0,
        "avg_age_days": round((20 + 40 + 100) / 3, 2),
        "oldest_at": f"{days_ago(100)}T00:00:00Z", "newest_at": f"{days_ago(20)}T00:00:00Z"}
    assert bank["description"] == "3 unmatched records totalling 28.00 USD (2 credits, 1 debit)"
    ids = [r["id"] for r in api.get(f"/v1/reconciliation_exceptions/{bank['id']}/records").json_body["data"]]
    assert ids == sorted(ran["bank"][:3], reverse=True)  # neither the matched one nor today's


def test_a_reopen_sets_opened_at_again_and_clears_closed_at(api, ran):
    exception = bank_exception(api, ran)
    api.patch(f"/v1/reconciliation_exceptions/{exception['id']}", {"status": "dismissed"})
    reopened = api.patch(f"/v1/reconciliation_exceptions/{exception['id']}", {"status": "open"}).json_body
    assert reopened["closed_at"] is None and reopened["opened_at"] > exception["opened_at"]


def test_assignees_and_comments(api, ran, services):
    exception_id = bank_exception(api, ran)["id"]
    base = f"/v1/reconciliation_exceptions/{exception_id}"
    add_user(services.users, "acme", "ada")
    bob = add_user(services.users, "acme", "bob")
    ada = api.post(f"{base}/assignees", {"idp_user_id": "ada"})
    assert ada.status_code == 201 and ada.json_body["idp_user_id"] == "ada"
    assert api.post(f"{base}/assignees", {"idp_user_id": "ada"}).json_body["id"] == ada.json_body["id"]
    by_id = api.post(f"{base}/assignees", {"user_id": bob.id})
    assert by_id.status_code == 201 and by_id.json_body == {"id": by_id.json_body["id"], "user_id": bob.id,
                                                            "idp_user_id": "bob"}
    assert [e["id"] for e in queue(api, assignee="ada")["data"]] == [exception_id]
    assert api.delete(f"{base}/assignees/{ada.json_body['id']}").status_code == 204
    assert api.delete(f"{base}/assignees/{ada.json_body['id']}").status_code == 404
    assert queue(api, assignee="ada")["data"] == []

    for text in ("first", "second"):
        response = api.post(f"{base}/comments", {"body": text, "author_idp_id": "bob", "mentions": [bob.id]})
        assert response.status_code == 201 and response.json_body["mentions"] == [bob.id]
    comments = api.get(base).json_body["comments"]
    assert [c["body"] for c in comments] == ["first", "second"]  # newest last
    assert api.post(f"{base}/comments", {"body": "", "author_idp_id": "bob"}).status_code == 422


def test_only_users_not_deactivated_are_assigned_mentioned_or_authors(api, ran, services):
    """Whom a write names is a user of the environment who is not deactivated (an invited one
    counts): else 422 naming them, nothing written."""
    base = f"/v1/reconciliation_exceptions/{bank_exception(api, ran)['id']}"
    ada = add_user(services.users, "acme", "ada")
    gone = add_user(services.users, "acme", "gone", status=UserStatus.DEACTIVATED)
    invited = add_user(services.users, "acme", "new", status=UserStatus.INVITED)
    add_user(services.users, "globex", "eve")
    for body, field in [({"idp_user_id": "nobody"}, "idp_user_id"), ({"idp_user_id": "gone"}, "idp_user_id"),
                        ({"idp_user_id": "eve"}, "idp_user_id"),
                        ({"user_id": 999}, "user_id"),
                        ({}, "user_id"), ({"user_id": ada.id, "idp_user_id": "gone"}, "idp_user_id")]:
        refused = api.post(f"{base}/assignees", body)
        assert refused.status_code == 422 and refused.json_body["errors"][0]["field"] == field, (body, refused.json_body)
    refused = api.post(f"{base}/comments", {"body": "x", "author_idp_id": "ada", "mentions": [ada.id, gone.id, 999]})
    assert refused.status_code == 422
    assert [(e["field"], e["message"]) for e in refused.json_body["errors"]] == [
        ("mentions[1]", f"user {gone.id} is not an active user of this environment"),
        ("mentions[2]", "user 999 is not an active user of this environment")]
    for author in ("nobody", "gone", None):
        refused = api.post(f"{base}/comments", {"body": "x", "author_idp_id": author})
        assert refused.status_code == 422 and refused.json_body["errors"][0]["field"] == "author_idp_id"
    detail = api.get(base).json_body
    assert detail["assignees"] == [] and detail["comments"] == []
    assigned = api.post(f"{base}/assignees", {"user_id": invited.id})  # invited, not yet signed in
    assert assigned.status_code == 201 and assigned.json_body["user_id"] == invited.id
    for path, body in [("assignees", {}), ("comments", {"body": "x"})]:  # 404 before 422
        assert api.post(f"/v1/reconciliation_exceptions/999999/{path}", body).status_code == 404


def test_a_signed_in_person_is_the_author_of_their_comment(api, ran, services):
    base = f"/v1/reconciliation_exceptions/{bank_exception(api, ran)['id']}"
    ada = add_user(services.users, "acme", "ada")
    add_user(services.users, "acme", "bob")
    token = {"key": None, "headers": {"Authorization": f"Bearer {services.identity.token_for('ada')}"}}
    made = api.post(f"{base}/comments", {"body": "mine", "mentions": [ada.id]}, **token)
    assert made.status_code == 201 and made.json_body["author_idp_id"] == "ada"
    posing = api.post(f"{base}/comments", {"body": "as bob", "author_idp_id": "bob"}, **token)
    assert posing.status_code == 422 and posing.json_body["errors"][0]["field"] == "author_idp_id"
    [entry] = [e for e in api.get("/v1/audit_events?resource_type=reconciliation_exception").json_body["data"]
               if e["action"] == "reconciliation_exception.commented"]
    assert entry["actor"] == f"user:{ada.id}"


def test_assignments_and_comments_made_before_users_existed_keep_their_strings(api, ran, services):
    """Existing data: an assignee or author whose string names no user is shown as stored (user_id
    null), still filters the queue, and can be unassigned; only new writes are checked."""
    from dataclasses import replace

    from chalicelib.domain.reconciliation_exceptions import Assignee, ExceptionComment

    exception_id = bank_exception(api, ran)["id"]
    ports = services.ports
    current = ports.exceptions.get("acme", exception_id)
    legacy = replace(current, assignees=(Assignee(41, "legacy-person"),), version=current.version + 1)
    ports.exceptions.save(legacy, previous=current)
    ports.exceptions.add_comment(legacy, ExceptionComment(id=42, body="old", author_idp_id="legacy-person",
                                                          mentions=(7,), created_at=utc_now()))
    detail = api.get(f"/v1/reconciliation_exceptions/{exception_id}").json_body
    assert detail["assignees"] == [{"id": 41, "user_id": None, "idp_user_id": "legacy-person"}]
    assert [(c["author_idp_id"], c["mentions"]) for c in detail["comments"]] == [("legacy-person", [7])]
    assert [e["id"] for e in queue(api, assignee="legacy-person")["data"]] == [exception_id]
    assert api.delete(f"/v1/reconciliation_exceptions/{exception_id}/assignees/41").status_code == 204


def test_filters_narrow_the_aggregates_and_the_records_alike(api, ran):
    base = f"/v1/reconciliation_exceptions/{bank_exception(api, ran)['id']}"
    for query, ids in [("direction=debit", [ran["bank"][2]]), ("amount_min=1000&amount_max=2000", [ran["bank"][0]]),
                       ("age_bucket=30_90d", [ran["bank"][1]]), ("age_bucket=gt_90d", [ran["bank"][2]]),
                       (f"date_from={days_ago(45)}", ran["bank"][:2])]:
        detail = api.get(f"{base}?{query}").json_body
        assert detail["filtered_aggregates"]["record_count"] == len(ids), query
        assert detail["aggregates"]["record_count"] == 3
        listed = api.get(f"{base}/records?{query}").json_body["data"]
        assert sorted(r["id"] for r in listed) == sorted(ids), query
    assert api.get(f"{base}?amount_min=5&amount_max=1").status_code == 422
    assert api.get(f"{base}?age_bucket=ancient").status_code == 422


def test_amount_filters_take_every_amount_a_record_may_hold_and_nothing_past_it(api, ran):
    """Given the amount bound of records (2**63 - 1 minor units), when an exception's records are
    filtered up to it, then the filter is accepted; one past it is refused as records are."""
    base = f"/v1/reconciliation_exceptions/{bank_exception(api, ran)['id']}"
    largest = 2**63 - 1
    detail = api.get(f"{base}?amount_min={largest}&amount_max={largest}")
    assert detail.status_code == 200 and detail.json_body["filtered_aggregates"]["record_count"] == 0
    assert api.get(f"{base}/records?amount_max={largest}").status_code == 200
    past = api.get(f"{base}/records?amount_max={largest + 1}")
    assert past.status_code == 422 and past.json_body["errors"][0]["field"] == "amount_max"


def test_records_of_an_exception_page_with_a_cursor(api, ran):
    base = f"/v1/reconciliation_exceptions/{bank_exception(api, ran)['id']}/records"
    first = api.get(f"{base}?limit=2").json_body
    second = api.get(f"{base}?limit=2&cursor={first['next_cursor']}").json_body
    assert [r["id"] for r in first["data"] + second["data"]] == sorted(ran["bank"][:3], reverse=True)
    assert second["next_cursor"] is None


def test_the_queue_pages_by_offset_and_refuses_bad_parameters(api, ran):
    first = queue(api, limit=1)
    assert len(first["data"]) == 1 and first["has_more"] is True
    second = queue(api, limit=1, offset=1)
    assert second["has_more"] is False and second["offset"] == 1
    assert first["data"][0]["id"] > second["data"][0]["id"]  # newest first
    assert queue(api, status="open", reconciliation_id=ran["reconciliation"]["id"])["data"]
    for bad in ("limit=0", "limit=101", "offset=-1", "status=closed"):
        assert api.get(f"/v1/reconciliation_exceptions?{bad}").status_code == 422, bad
    assert api.get("/v1/reconciliation_exceptions/999999").status_code == 404


def test_the_queue_counts_sorts_and_filters_by_assignee_amount_and_age(api, ran, services):
    """Bank: 28.00 net (10.00 + 25.00 - 7.00), oldest record 100 days old; ledger: 40.00, 8 days old.
    Every filter and order is applied to what the list reads anyway; `total` counts the filtered
    queue whatever the page."""
    mine = {"reconciliation_id": ran["reconciliation"]["id"]}
    bank, ledger = bank_exception(api, ran)["id"], queue(api, data_stream_key="ledger")["data"][0]["id"]

    def ids(**params):
        page = queue(api, **mine, **params)
        assert page["total"] == len(page["data"]) or page["has_more"], page
        return [e["id"] for e in page["data"]]

    first = queue(api, **mine, limit=1)
    assert (first["total"], first["has_more"], len(first["data"])) == (2, True, 1)
    assert first["data"][0]["currency"] == "USD" and first["data"][0]["decimal_places"] == 2
    assert queue(api, **mine, limit=1, offset=1)["total"] == 2
    assert ids() == sorted([bank, ledger], reverse=True)
    assert ids(sort="amount") == [ledger, bank]
    assert ids(sort="oldest") == [bank, ledger]
    assert ids(amount_min=3000) == [ledger]
    assert ids(amount_min=2800, amount_max=2800) == [bank]  # the net's size, exact
    assert ids(amount_min=28001, amount_decimal_places=3) == [ledger]  # 28.001, compared at each scale
    assert sorted(ids(amount_min=28, amount_decimal_places=0)) == sorted([bank, ledger])
    assert ids(amount_max=2799) == []
    assert ids(older_than_days=50) == [bank]
    assert ids(older_than_days=101) == []
    assert sorted(ids(older_than_days=8)) == sorted([bank, ledger])

    bob = add_user(services.users, "acme", "bob")
    assert api.post(f"/v1/reconciliation_exceptions/{bank}/assignees", {"user_id": bob.id}).status_code == 201
    assert ids(assignee_user_id=bob.id) == [bank]
    assert ids(unassigned="true") == [ledger]
    assert queue(api, **mine, unassigned="true", sort="amount", amount_min=100)["total"] == 1
    for bad in ("amount_min=5&amount_max=1", "sort=largest", "unassigned=true&assignee_user_id=1",
                "older_than_days=-1", "amount_decimal_places=19", "amount_min=-1"):
        assert api.get(f"/v1/reconciliation_exceptions?{bad}").status_code == 422, bad


def test_a_refresh_writes_nothing_to_records_a_dismissed_exception_still_holds(api, services, ingest, ran):
    from chalicelib.adapters.dynamodb import keys
    from chalicelib.services.reconciliation_exceptions import refresh

    dismissed = bank_exception(api, ran)["id"]
    api.patch(f"/v1/reconciliation_exceptions/{dismissed}", {"status": "dismissed"})
    [newcomer] = ingest(record("bank", 9, 999, days_ago(30)))
    held = {keys.record("acme", i)["pk"] for i in ran["bank"][:3]}
    touched = []

    def note(params, **_):
        if params.get("Key", {}).get("pk", {}).get("S") in held:
            touched.append(params["Key"]["pk"]["S"])
    client = services.aws.dynamodb  # the table's client
    client.meta.events.register("provide-client-params.dynamodb.UpdateItem", note)
    try:
        refresh(services.ports, "acme", ran["reconciliation"]["id"])
    finally:
        client.meta.events.unregister("provide-client-params.dynamodb.UpdateItem", note)

    [active] = queue(api, data_stream_key="bank", status="open")["data"]
    ids = [r["id"] for r in api.get(f"/v1/reconciliation_exceptions/{active['id']}/records").json_body["data"]]
    assert ids == [newcomer] and touched == []  # the index told the refresh who holds them


@pytest.fixture
def proposed(api, ingest, reconciliation):
    """A rule that only proposes matched bank 10.00 with ledger 10.00 (weeks old); bank 25.00 found no partner.
    Built once a process, restored after."""
    return world_of_api(dated("test_exceptions_api.proposed"), api, lambda: _proposed(api, ingest, reconciliation))


def _proposed(api, ingest, reconciliation):
    assert api.post(f"/v1/reconciliations/{reconciliation['id']}/rules", {**RULE, "auto_confirm": False}).status_code \
        == 201
    bank = ingest(record("bank", 1, 1000, days_ago(20)), record("bank", 2, 2500, days_ago(40)))
    ledger = ingest(record("ledger", 1, 1000, days_ago(20)))
    run = api.post(f"/v1/reconciliations/{reconciliation['id']}/runs").json_body
    assert api.get(f"/v1/reconciliations/{reconciliation['id']}/runs/{run['id']}").json_body["status"] == "completed"
    [match] = api.get(f"/v1/reconciliation_matches?reconciliation_id={reconciliation['id']}").json_body["data"]
    assert match["status"] == "proposed"
    return {"bank": bank, "ledger": ledger, "match": match, "reconciliation": reconciliation}


def listed(api, query):
    return sorted(r["id"] for r in api.get(f"/v1/records?{query}").json_body["data"])


def test_records_of_a_proposed_match_await_confirmation_and_stay_in_their_exception(api, proposed):
    # Given a run whose rule proposed a match (see `proposed`)
    bank, ledger = proposed["bank"], proposed["ledger"]
    # Then its records are not reconciled yet, and say so
    assert api.get(f"/v1/records/{bank[0]}").json_body["status"] == "pending_confirmation"
    assert listed(api, "status=pending_confirmation") == sorted([bank[0], ledger[0]])
    assert listed(api, "status=reconciled") == [] and listed(api, "status=unreconciled") == [bank[1]]
    # And the exception still counts them, apart from the unmatched ones
    exception = bank_exception(api, proposed)
    assert exception["aggregates"]["record_count"] == 2
    assert exception["aggregates"]["pending_confirmation_count"] == 1
    base = f"/v1/reconciliation_exceptions/{exception['id']}"
    waiting = api.get(f"{base}?record_status=pending_confirmation").json_body["filtered_aggregates"]
    assert (waiting["record_count"], waiting["credit_sum"]) == (1, 1000)
    assert [r["id"] for r in api.get(f"{base}/records?record_status=pending_confirmation").json_body["data"]] == [
        bank[0]]
    assert [r["id"] for r in api.get(f"{base}/records?record_status=unreconciled").json_body["data"]] == [bank[1]]
    # And a later run does not match them again
    run = api.post(f"/v1/reconciliations/{proposed['reconciliation']['id']}/runs").json_body
    done = api.get(f"/v1/reconciliations/{proposed['reconciliation']['id']}/runs/{run['id']}").json_body
    assert (done["status"], done["matched_records"]) == ("completed", 0)


def test_confirming_a_proposed_match_reconciles_its_records_and_they_leave_the_exception(api, proposed):
    from chalicelib.handlers.sweeper import sweep_task

    bank, ledger = proposed["bank"], proposed["ledger"]
    # When a person confirms the match
    assert api.post(f"/v1/reconciliation_matches/{proposed['match']['id']}/confirm").status_code == 200
    # Then its records are reconciled, and leave the exception once it is refreshed
    assert listed(api, "status=reconciled") == sorted([bank[0], ledger[0]])
    assert listed(api, "status=pending_confirmation") == []
    sweep_task()
    aggregates = bank_exception(api, proposed)["aggregates"]
    assert (aggregates["record_count"], aggregates["pending_confirmation_count"]) == (1, 0)


def test_rejecting_a_proposed_match_opens_its_records_and_they_stay_in_the_exception(api, proposed):
    from chalicelib.handlers.sweeper import sweep_task

    bank = proposed["bank"]
    # When a person rejects (unmatches) the match
    assert api.delete(f"/v1/reconciliation_matches/{proposed['match']['id']}").status_code == 204
    # Then its records are unreconciled, and the exception counts them as such once refreshed
    assert api.get(f"/v1/records/{bank[0]}").json_body["status"] == "unreconciled"
    assert listed(api, "status=pending_confirmation") == []
    sweep_task()
    aggregates = bank_exception(api, proposed)["aggregates"]
    assert (aggregates["record_count"], aggregates["pending_confirmation_count"]) == (2, 0)
