"""Matching by hand: POST /reconciliation_matches, on moto through the API."""
import pytest

from tests.integration.conftest import record


def manual(api, reconciliation, record_ids, **fields):
    return api.post("/v1/reconciliation_matches", {"reconciliation_id": reconciliation["id"],
                                                   "record_ids": record_ids, **fields})


def test_records_that_balance_are_matched_by_hand_and_confirmed(api, ingest, reconciliation):
    bank = ingest(record("bank", 1, 3000))
    ledger = ingest(record("ledger", 1, 1000), record("ledger", 2, 2000))

    response = manual(api, reconciliation, bank + ledger)

    assert response.status_code == 201, response.json_body
    match = response.json_body
    assert match["status"] == "confirmed" and match["reconciliation_rule_id"] is None
    assert sorted(r["side"] for r in match["records"]) == ["a", "b", "b"]
    assert api.get(f"/v1/records/{ledger[1]}").json_body["status"] == "reconciled"


def test_totals_that_differ_need_allow_difference_and_a_reason(api, ingest, reconciliation):
    bank = ingest(record("bank", 1, 3000))
    ledger = ingest(record("ledger", 1, 2950))

    refused = manual(api, reconciliation, bank + ledger)
    assert refused.status_code == 422 and "differ by 50" in refused.json_body["message"]
    no_reason = manual(api, reconciliation, bank + ledger, allow_difference=True)
    assert no_reason.status_code == 422 and no_reason.json_body["errors"][0]["field"] == "reason"

    accepted = manual(api, reconciliation, bank + ledger, allow_difference=True, reason="bank fee of 0.50")

    assert accepted.status_code == 201
    assert accepted.json_body["reason"] == "bank fee of 0.50" and accepted.json_body["differences"] == {"amount": 50}


def test_an_unknown_reconciliation_is_not_found(api, ingest, reconciliation):
    assert api.post("/v1/reconciliation_matches", {"reconciliation_id": 404, "record_ids": [1]}).status_code == 404


@pytest.mark.parametrize("body", [{"reconciliation_id": 10 ** 30, "record_ids": [1]},
                                  {"reconciliation_id": 1, "record_ids": [10 ** 2000]},
                                  {"reconciliation_id": 1, "record_ids": [0]}])
def test_ids_no_key_could_hold_are_refused_as_invalid(api, body):
    response = api.post("/v1/reconciliation_matches", body)
    assert response.status_code == 422, response.json_body


def test_a_match_id_filter_no_key_could_hold_is_invalid(api):
    assert api.get(f"/v1/records?reconciliation_match_id={10 ** 40}").status_code == 422
    assert api.get(f"/v1/reconciliation_matches?reconciliation_id={10 ** 40}").status_code == 422


def test_a_match_of_more_than_100_records_shows_its_count_and_lists_its_records_by_page(api, ingest, reconciliation):
    bank = ingest(record("bank", 1, 101))
    ledger = ingest(*[record("ledger", n, 1) for n in range(101)])

    created = manual(api, reconciliation, bank + ledger)

    assert created.status_code == 201
    match = api.get(f"/v1/reconciliation_matches/{created.json_body['id']}").json_body
    assert match["record_count"] == 102 and match["records"] is None
    small = manual(api, reconciliation, ingest(record("bank", 2, 5)) + ingest(record("ledger", 200, 5))).json_body
    assert small["record_count"] is None and len(small["records"]) == 2
    seen, cursor = [], None
    while True:
        page = api.get(f"/v1/records?reconciliation_match_id={match['id']}&limit=40"
                       + (f"&cursor={cursor}" if cursor else "")).json_body
        seen += [r["id"] for r in page["data"]]
        cursor = page["next_cursor"]
        if not cursor:
            break
    assert sorted(seen) == sorted(bank + ledger) and seen == sorted(seen, reverse=True)
