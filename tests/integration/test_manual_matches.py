"""Matching by hand: POST /reconciliation_matches, on moto through the API."""
import pytest

from tests.integration.test_reconciliation_runs import ingest, reconciliation, record  # noqa: F401 (fixtures)


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


def test_a_side_booked_as_the_mirror_image_balances(api, ingest, reconciliation):
    bank = ingest(record("bank", 1, 3000, direction="credit"))
    ledger = ingest(record("ledger", 1, 3000, direction="debit"))
    assert manual(api, reconciliation, bank + ledger).status_code == 201


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


@pytest.mark.parametrize("case", ["one side only", "unknown record", "stream outside the reconciliation"])
def test_a_manual_match_that_cannot_be_is_refused_naming_the_problem(api, ingest, reconciliation, case):
    assert api.post("/v1/data_streams", {"key": "other", "name": "Other"}).status_code == 201
    bank = ingest(record("bank", 1, 1000), record("bank", 2, 1000))
    outside = ingest(record("other", 1, 1000))
    ids = {"one side only": bank, "unknown record": [bank[0], 99999],
           "stream outside the reconciliation": [bank[0], outside[0]]}[case]
    response = manual(api, reconciliation, ids)
    assert response.status_code == 422, response.json_body
    assert response.json_body["errors"][0]["field"].startswith("record_ids")


def test_a_record_already_matched_in_the_reconciliation_is_a_conflict(api, ingest, reconciliation):
    bank = ingest(record("bank", 1, 1000))
    ledger = ingest(record("ledger", 1, 1000), record("ledger", 2, 1000))
    assert manual(api, reconciliation, [bank[0], ledger[0]]).status_code == 201

    response = manual(api, reconciliation, [bank[0], ledger[1]])

    assert response.status_code == 409 and str(bank[0]) in response.json_body["message"]
    assert api.get(f"/v1/records/{ledger[1]}").json_body["status"] == "unreconciled"


def test_an_unknown_reconciliation_is_not_found(api, ingest, reconciliation):
    assert api.post("/v1/reconciliation_matches", {"reconciliation_id": 404, "record_ids": [1]}).status_code == 404
