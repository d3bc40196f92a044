"""Approvals of partial matches over HTTP (docs/approvals.md, docs/partial-payments.md): the policy
weighs the shares a match takes (per currency, against that currency's threshold), not the whole
amounts of the records it takes them of; an unmatch of a partial match weighs the shares it gives back."""
from __future__ import annotations

from tests.integration.conftest import record
from tests.integration.test_approvals import people, set_policy, signed  # noqa: F401 (people: a fixture)


def manual(api, reconciliation, record_ids, headers, **fields):
    return api.post("/v1/reconciliation_matches", {"reconciliation_id": reconciliation["id"],
                                                   "record_ids": record_ids, **fields}, **headers)


def remaining(api, record_id, reconciliation):
    found = [a for a in api.get(f"/v1/records/{record_id}").json_body["allocations"]
             if a["reconciliation_id"] == reconciliation["id"]]
    return found[0]["amount_remaining"] if found else None


def test_a_share_under_the_threshold_of_an_invoice_above_it_goes_through_and_its_rest_waits(
        api, ingest, reconciliation, people):  # noqa: F811
    set_policy(api, reconciliation, actions=["manual_match"], thresholds={"USD": 50000})  # 500.00
    invoice = ingest(record("ledger", 1, 100000, direction="debit"))[0]  # 1,000.00: above the threshold
    first, rest = ingest(record("bank", 1, 40000), record("bank", 2, 60000))
    alice = signed(people["alice"])

    part = manual(api, reconciliation, [first, invoice], alice, allocations=[{"record_id": invoice, "amount": 40000}])

    assert part.status_code == 201, part.json_body  # 400.00 taken: the invoice's 1,000.00 is not what moves
    assert remaining(api, invoice, reconciliation) == 60000
    held = manual(api, reconciliation, [rest, invoice], alice)  # takes what is left: 600.00, above 500.00
    assert held.status_code == 202, held.json_body
    assert (held.json_body["amount"], held.json_body["amount_decimal_places"], held.json_body["currency"],
            held.json_body["threshold"]) == (60000, 2, "USD", 50000)
    assert remaining(api, invoice, reconciliation) == 60000  # nothing moved while it waits

    done = api.post(f"/v1/approvals/{held.json_body['id']}/approve", **signed(people["bob"])).json_body

    assert done["status"] == "approved", done
    match = api.get(f"/v1/reconciliation_matches/{done['result']['reconciliation_match_id']}").json_body
    assert match["allocations"] == [{"record_id": invoice, "amount": 60000}]
    assert api.get(f"/v1/records/{invoice}").json_body["status"] == "reconciled"


def test_shares_are_weighed_against_their_own_currencys_threshold(api, ingest, reconciliation, people):  # noqa: F811
    set_policy(api, reconciliation, actions=["manual_match"], thresholds={"USD": 50000, "EUR": 30000})
    alice = signed(people["alice"])
    for n, currency, expected in ((1, "USD", 201), (2, "EUR", 202)):
        invoice = ingest(record("ledger", n, 90000, direction="debit", currency=currency))[0]
        payment = ingest(record("bank", n, 40000, currency=currency))[0]  # 400.00: under 500 USD, over 300 EUR

        made = manual(api, reconciliation, [payment, invoice], alice,
                      allocations=[{"record_id": invoice, "amount": 40000}])

        assert made.status_code == expected, (currency, made.json_body)
        if expected == 202:
            assert (made.json_body["currency"], made.json_body["amount"], made.json_body["threshold"]) == (
                "EUR", 40000, 30000)
            assert made.json_body["params"]["allocations"] == [[invoice, 40000]]  # replayed with its shares


def test_an_unmatch_of_a_partial_match_weighs_the_share_it_gives_back(api, ingest, reconciliation, people):  # noqa: F811
    invoice = ingest(record("ledger", 1, 100000, direction="debit"))[0]
    small, large = ingest(record("bank", 1, 30000), record("bank", 2, 70000))
    alice = signed(people["alice"])
    small_match = manual(api, reconciliation, [small, invoice], alice,
                         allocations=[{"record_id": invoice, "amount": 30000}]).json_body
    large_match = manual(api, reconciliation, [large, invoice], alice).json_body  # the 700.00 left
    set_policy(api, reconciliation, actions=["unmatch"], thresholds={"USD": 50000})

    given_back = api.delete(f"/v1/reconciliation_matches/{small_match['id']}", **alice)
    held = api.delete(f"/v1/reconciliation_matches/{large_match['id']}", **alice)

    assert given_back.status_code == 204  # 300.00 back: the invoice's 1,000.00 is not what moves
    assert remaining(api, invoice, reconciliation) == 30000
    assert held.status_code == 202, held.json_body
    assert (held.json_body["amount"], held.json_body["currency"], held.json_body["threshold"]) == (70000, "USD", 50000)
