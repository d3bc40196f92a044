"""Exceptions: how unmatched records come and go, and the queue people work from (on moto, through the API)."""
from datetime import timedelta

import pytest

from chalicelib.domain.clock import utc_now
from tests.integration.conftest import record

RULE = {"name": "Amount", "priority": 1, "conditions": [{"field": "amount", "operator": "equals"},
                                                        {"field": "date", "operator": "within", "days": 3}]}


def days_ago(n: int) -> str:
    return (utc_now().date() - timedelta(days=n)).isoformat()


@pytest.fixture
def ran(api, ingest, reconciliation):
    """Bank: 10.00 and 25.00 (credit) and 7.00 (debit) unmatched for weeks, 5.00 matched, 3.00 from today.
    Ledger: the 5.00 partner, and 40.00 unmatched for weeks."""
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
        "credit_count": 2, "credit_sum": 3500, "avg_age_days": round((20 + 40 + 100) / 3, 2),
        "oldest_at": f"{days_ago(100)}T00:00:00Z", "newest_at": f"{days_ago(20)}T00:00:00Z"}
    assert bank["description"] == "3 unmatched records totalling 28.00 USD (2 credits, 1 debits)"
    ids = [r["id"] for r in api.get(f"/v1/reconciliation_exceptions/{bank['id']}/records").json_body["data"]]
    assert ids == sorted(ran["bank"][:3], reverse=True)  # neither the matched one nor today's


def test_refreshing_again_adds_newly_overdue_records_to_the_same_exception(api, services, ran):
    from chalicelib.services.reconciliation_exceptions import refresh

    refresh(services.ports, "acme", ran["reconciliation"]["id"], now=utc_now() + timedelta(days=5))

    assert len(queue(api, data_stream_key="bank")["data"]) == 1
    assert bank_exception(api, ran)["aggregates"]["record_count"] == 4  # today's 3.00 is 5 days old by then


def test_records_matched_later_leave_and_an_emptied_exception_resolves_itself(api, services, ingest, ran):
    from chalicelib.services.reconciliation_exceptions import refresh

    ledger = ingest(record("ledger", 3, 1000, days_ago(20)), record("ledger", 4, 2500, days_ago(40)),
                    record("ledger", 5, 700, days_ago(100), direction="debit"))
    for bank_id, ledger_id in zip(ran["bank"][:3], ledger):
        body = {"reconciliation_id": ran["reconciliation"]["id"], "record_ids": [bank_id, ledger_id]}
        assert api.post("/v1/reconciliation_matches", body).status_code == 201

    refresh(services.ports, "acme", ran["reconciliation"]["id"])

    exception = api.get(f"/v1/reconciliation_exceptions/{bank_exception(api, ran)['id']}").json_body
    assert exception["status"] == "resolved" and exception["closed_at"]
    assert exception["aggregates"]["record_count"] == 0
    assert exception["comments"][-1]["author_idp_id"] == "system"
    assert "resolved automatically" in exception["comments"][-1]["body"]


@pytest.mark.parametrize("moves, refused", [
    (["investigating", "open", "dismissed", "open", "resolved"], None),
    (["dismissed", "investigating"], "investigating"),
    (["resolved", "dismissed"], "dismissed"),
])
def test_status_moves_follow_the_table(api, ran, moves, refused):
    exception_id = bank_exception(api, ran)["id"]
    for status in moves:
        response = api.patch(f"/v1/reconciliation_exceptions/{exception_id}", {"status": status})
        if status == refused:
            assert response.status_code == 409 and "cannot become" in response.json_body["message"]
            return
        assert response.status_code == 200, response.json_body
        body = response.json_body
        assert body["status"] == status
        assert (body["closed_at"] is not None) == (status in ("dismissed", "resolved"))


def test_a_reopen_sets_opened_at_again_and_clears_closed_at(api, ran):
    exception = bank_exception(api, ran)
    api.patch(f"/v1/reconciliation_exceptions/{exception['id']}", {"status": "dismissed"})
    reopened = api.patch(f"/v1/reconciliation_exceptions/{exception['id']}", {"status": "open"}).json_body
    assert reopened["closed_at"] is None and reopened["opened_at"] > exception["opened_at"]


def test_a_title_and_description_written_by_a_person_stay(api, services, ran):
    from chalicelib.services.reconciliation_exceptions import refresh

    exception_id = bank_exception(api, ran)["id"]
    api.patch(f"/v1/reconciliation_exceptions/{exception_id}", {"title": "Missing deposits",
                                                                "description": "Chasing the bank"})
    refresh(services.ports, "acme", ran["reconciliation"]["id"], now=utc_now() + timedelta(days=5))
    shown = api.get(f"/v1/reconciliation_exceptions/{exception_id}").json_body
    assert (shown["title"], shown["description"]) == ("Missing deposits", "Chasing the bank")
    assert shown["aggregates"]["record_count"] == 4


def test_assignees_and_comments(api, ran):
    exception_id = bank_exception(api, ran)["id"]
    base = f"/v1/reconciliation_exceptions/{exception_id}"
    ada = api.post(f"{base}/assignees", {"idp_user_id": "ada"})
    assert ada.status_code == 201 and ada.json_body["idp_user_id"] == "ada"
    assert api.post(f"{base}/assignees", {"idp_user_id": "ada"}).json_body["id"] == ada.json_body["id"]
    api.post(f"{base}/assignees", {"idp_user_id": "bob"})
    assert [e["id"] for e in queue(api, assignee="ada")["data"]] == [exception_id]
    assert api.delete(f"{base}/assignees/{ada.json_body['id']}").status_code == 204
    assert api.delete(f"{base}/assignees/{ada.json_body['id']}").status_code == 404
    assert queue(api, assignee="ada")["data"] == []

    for text in ("first", "second"):
        response = api.post(f"{base}/comments", {"body": text, "author_idp_id": "bob", "mentions": [7]})
        assert response.status_code == 201 and response.json_body["mentions"] == [7]
    comments = api.get(base).json_body["comments"]
    assert [c["body"] for c in comments] == ["first", "second"]  # newest last
    assert api.post(f"{base}/comments", {"body": "", "author_idp_id": "bob"}).status_code == 422


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


def test_the_sweeper_refreshes_reconciliations_not_refreshed_for_an_hour(api, services, ran):
    from chalicelib.services.reconciliation_exceptions import sweep

    assert sweep(services.ports) == 0  # the run just refreshed it
    assert sweep(services.ports, now=utc_now() + timedelta(hours=2, days=5)) == 1
    assert bank_exception(api, ran)["aggregates"]["record_count"] == 4


def test_amounts_kept_with_different_decimal_places_add_up_at_one_scale(api, ingest, reconciliation):
    assert api.post(f"/v1/reconciliations/{reconciliation['id']}/rules", RULE).status_code == 201
    ingest(record("bank", 1, 500, days_ago(20), decimal_places=2), record("bank", 2, 5, days_ago(20), decimal_places=0),
           record("bank", 3, 1250, days_ago(20), decimal_places=3))
    api.post(f"/v1/reconciliations/{reconciliation['id']}/runs")
    [row] = queue(api, data_stream_key="bank")["data"]
    assert row["decimal_places"] == 3
    assert row["aggregates"]["credit_sum"] == 5000 + 5000 + 1250  # 5.00 + 5 + 1.250, in thousandths
    assert row["description"] == "3 unmatched records totalling 11.250 USD (3 credits, 0 debits)"
    detail = api.get(f"/v1/reconciliation_exceptions/{row['id']}?amount_min=5000&amount_max=5000").json_body
    assert detail["filtered_aggregates"]["record_count"] == 2


def test_a_close_refused_for_a_stale_version_keeps_the_exception_the_only_active_one(api, services, ran):
    from dataclasses import replace

    from chalicelib.domain.errors import Conflict
    from chalicelib.domain.reconciliation_exceptions import ExceptionStatus
    from chalicelib.services.reconciliation_exceptions import refresh

    current = services.exceptions.get("acme", bank_exception(api, ran)["id"])
    stale = replace(current.moved(ExceptionStatus.DISMISSED, utc_now()), version=current.version)  # a lost race
    with pytest.raises(Conflict):
        services.exceptions.save(stale, previous=replace(current, version=current.version - 1))

    refresh(services.ports, "acme", ran["reconciliation"]["id"], now=utc_now() + timedelta(days=5))
    assert [(e["id"], e["status"]) for e in queue(api, data_stream_key="bank")["data"]] == [(current.id, "open")]


def test_a_refresh_cut_short_after_adding_records_is_put_right_by_the_next(api, services, ran):
    from chalicelib.services.reconciliation_exceptions import refresh

    exception = services.exceptions.get("acme", bank_exception(api, ran)["id"])
    services.exceptions.set_totals(exception, {"record_count": 0, "credit_count": 0, "credit_sum": 0, "debit_count": 0,
                                               "debit_sum": 0, "date_ordinal_sum": 0, "oldest": None, "newest": None},
                                   "")  # as if the crash came before the totals were written

    refresh(services.ports, "acme", ran["reconciliation"]["id"])

    assert bank_exception(api, ran)["aggregates"]["record_count"] == 3


def test_one_refresh_of_a_reconciliation_runs_at_a_time(api, services, ran):
    from chalicelib.services.reconciliation_exceptions import refresh

    now = utc_now()
    assert services.exceptions.take_refresh_lease("acme", ran["reconciliation"]["id"], now, timedelta(minutes=15))
    assert refresh(services.ports, "acme", ran["reconciliation"]["id"], now=now) is False
    assert refresh(services.ports, "acme", ran["reconciliation"]["id"],
                   now=now + timedelta(minutes=16)) is True  # a lease past its end is taken over


def test_a_reopen_while_another_exception_is_active_is_a_conflict_naming_it(api, services, ingest, ran):
    from chalicelib.services.reconciliation_exceptions import refresh

    first = bank_exception(api, ran)["id"]
    api.patch(f"/v1/reconciliation_exceptions/{first}", {"status": "dismissed"})
    ingest(record("bank", 9, 999, days_ago(30)))
    refresh(services.ports, "acme", ran["reconciliation"]["id"])
    second = [e["id"] for e in queue(api, data_stream_key="bank", status="open")["data"]]
    assert len(second) == 1 and second[0] != first

    response = api.patch(f"/v1/reconciliation_exceptions/{first}", {"status": "open"})

    assert response.status_code == 409 and str(second[0]) in response.json_body["message"]


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


def test_after_an_unmatch_and_a_manual_match_the_exception_holds_exactly_the_open_overdue_records(
        api, services, ingest, ran):
    from chalicelib.services.reconciliation_exceptions import sweep

    recon_id = ran["reconciliation"]["id"]
    [run_match] = api.get(f"/v1/reconciliation_matches?reconciliation_id={recon_id}").json_body["data"]
    [late] = ingest(record("ledger", 3, 1000, days_ago(20)))

    assert api.delete(f"/v1/reconciliation_matches/{run_match['id']}").status_code == 204  # bank 5.00 open again
    body = {"reconciliation_id": recon_id, "record_ids": [ran["bank"][0], late]}
    assert api.post("/v1/reconciliation_matches", body).status_code == 201  # bank 10.00 matched

    assert bank_exception(api, ran)["refresh_pending"] is True  # visible until the sweeper's next minute
    sweep(services.ports)

    bank = bank_exception(api, ran)
    assert bank["refresh_pending"] is False
    ids = [r["id"] for r in api.get(f"/v1/reconciliation_exceptions/{bank['id']}/records").json_body["data"]]
    assert ids == sorted([ran["bank"][1], ran["bank"][2], ran["bank"][3]], reverse=True)
    assert bank["aggregates"] == {
        "record_count": 3, "total_amount": 2500 - 700 + 500, "debit_count": 1, "debit_sum": 700,
        "credit_count": 2, "credit_sum": 3000, "avg_age_days": round((40 + 100 + 10) / 3, 2),
        "oldest_at": f"{days_ago(100)}T00:00:00Z", "newest_at": f"{days_ago(10)}T00:00:00Z"}
    [ledger] = queue(api, data_stream_key="ledger")["data"]
    assert ledger["aggregates"]["record_count"] == 2  # the ledger's 5.00, unmatched, joined its 40.00


def test_confirming_a_match_requests_a_refresh_too(api, services, ingest, reconciliation):
    assert api.post(f"/v1/reconciliations/{reconciliation['id']}/rules", {**RULE, "auto_confirm": False}).status_code == 201
    ingest(record("bank", 1, 1000, days_ago(20)))
    ingest(record("ledger", 1, 1000, days_ago(20)))
    api.post(f"/v1/reconciliations/{reconciliation['id']}/runs")
    [match] = api.get(f"/v1/reconciliation_matches?reconciliation_id={reconciliation['id']}").json_body["data"]
    assert not services.reconciliations.get("acme", reconciliation["id"]).exceptions_refresh_pending

    assert api.post(f"/v1/reconciliation_matches/{match['id']}/confirm").status_code == 200

    assert services.reconciliations.get("acme", reconciliation["id"]).exceptions_refresh_pending


def test_a_refresh_requested_while_a_refresh_runs_is_kept_for_the_next_sweep(api, services, ran):
    from chalicelib.services.reconciliation_exceptions import sweep

    recon_id = ran["reconciliation"]["id"]
    seen = services.reconciliations.get("acme", recon_id)  # a refresh starts, reading the reconciliation
    services.reconciliations.request_exceptions_refresh("acme", recon_id)  # a person unmatches meanwhile

    services.reconciliations.mark_exceptions_refreshed("acme", recon_id, utc_now(), seen.exceptions_refresh_requests)

    assert services.reconciliations.get("acme", recon_id).exceptions_refresh_pending
    assert sweep(services.ports) == 1
    assert not services.reconciliations.get("acme", recon_id).exceptions_refresh_pending
