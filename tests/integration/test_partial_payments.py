"""Partial payments over HTTP (docs/partial-payments.md): an invoice paid in parts by hand, its
remaining amount, its cover, unmatching that gives the share back, refusals, and a race of matches
that must never allocate more than the invoice holds."""
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest

from chalicelib.adapters.dynamodb.allocations import partly_paid_key
from chalicelib.domain.clock import utc_now
from chalicelib.domain.errors import Conflict, ValidationFailed
from chalicelib.services import matches
from chalicelib.services import reconciliation_exceptions as exceptions
from chalicelib.services.api_keys import create_key
from chalicelib.services.records import delete_record
from tests.integration.conftest import record


def manual(api, reconciliation, record_ids, **fields):
    return api.post("/v1/reconciliation_matches", {"reconciliation_id": reconciliation["id"],
                                                   "record_ids": record_ids, **fields})


def allocation_of(api, record_id, reconciliation):
    """The record's status and its allocation in the reconciliation (None: not paid in part there)."""
    body = api.get(f"/v1/records/{record_id}").json_body
    found = [a for a in body["allocations"] if a["reconciliation_id"] == reconciliation["id"]]
    return body["status"], (found[0] if found else None)


@pytest.fixture
def invoice(ingest):
    """An invoice of 10.00 in the ledger (side B), and the bank (side A) payments of it."""
    return ingest(record("ledger", 1, 1000, direction="debit"))[0]


def test_an_invoice_paid_in_two_parts_shows_what_remains_until_covered_and_unmatching_gives_it_back(
        api, ingest, reconciliation, invoice):
    first, second = ingest(record("bank", 1, 400), record("bank", 2, 600))

    part = manual(api, reconciliation, [first, invoice], allocations=[{"record_id": invoice, "amount": 400}])

    assert part.status_code == 201, part.json_body
    assert part.json_body["allocations"] == [{"record_id": invoice, "amount": 400}]
    assert part.json_body["differences"] == {"amount": 0}
    status, allocation = allocation_of(api, invoice, reconciliation)
    assert status == "unreconciled"
    assert (allocation["amount_allocated"], allocation["amount_remaining"]) == (400, 600)
    assert allocation["shares"] == [{"reconciliation_match_id": part.json_body["id"], "amount": 400}]
    assert api.get(f"/v1/records/{first}").json_body["status"] == "reconciled"
    assert api.get(f"/v1/records/{first}").json_body["allocations"] == []  # taken whole

    rest = manual(api, reconciliation, [second, invoice])  # the invoice takes what it has left

    assert rest.status_code == 201, rest.json_body
    assert rest.json_body["allocations"] == [{"record_id": invoice, "amount": 600}]
    status, allocation = allocation_of(api, invoice, reconciliation)
    assert status == "reconciled" and (allocation["amount_allocated"], allocation["amount_remaining"]) == (1000, 0)
    assert manual(api, reconciliation, ingest(record("bank", 3, 1))
                  + [invoice]).status_code == 409  # covered: matched in this reconciliation

    assert api.delete(f"/v1/reconciliation_matches/{part.json_body['id']}").status_code == 204

    status, allocation = allocation_of(api, invoice, reconciliation)
    assert status == "unreconciled" and (allocation["amount_allocated"], allocation["amount_remaining"]) == (600, 400)
    assert api.get(f"/v1/records/{first}").json_body["status"] == "unreconciled"
    assert api.delete(f"/v1/reconciliation_matches/{rest.json_body['id']}").status_code == 204
    assert allocation_of(api, invoice, reconciliation) == ("unreconciled", None)
    whole = manual(api, reconciliation, ingest(record("bank", 4, 1000)) + [invoice])
    assert whole.status_code == 201 and whole.json_body["allocations"] is None  # whole again, as before


def test_one_payment_split_over_two_invoices(api, ingest, reconciliation):
    payment = ingest(record("bank", 1, 1500))[0]
    one, two = ingest(record("ledger", 1, 1000, direction="debit"), record("ledger", 2, 500, direction="debit"))

    first = manual(api, reconciliation, [payment, one], allocations=[{"record_id": payment, "amount": 1000}])
    second = manual(api, reconciliation, [payment, two])

    assert (first.status_code, second.status_code) == (201, 201), (first.json_body, second.json_body)
    status, allocation = allocation_of(api, payment, reconciliation)
    assert status == "reconciled" and [s["amount"] for s in allocation["shares"]] == [1000, 500]
    assert api.get(f"/v1/records/{one}").json_body["status"] == "reconciled"


@pytest.mark.parametrize("allocations, field", [
    ([{"record_id": "INVOICE", "amount": 1001}], "allocations[0].amount"),
    ([{"record_id": "PAYMENT", "amount": 10}], "allocations"),  # the sides no longer balance
    ([{"record_id": 999999, "amount": 10}], "allocations[0].record_id"),
    ([{"record_id": "INVOICE", "amount": 400}, {"record_id": "INVOICE", "amount": 400}], "allocations[1].record_id"),
    ([{"record_id": "INVOICE", "amount": 0}], "allocations[0].amount"),
    ([{"record_id": "INVOICE", "amount": 4.5}], "allocations[0].amount"),
])
def test_a_share_that_is_too_large_unbalanced_or_malformed_is_refused(api, ingest, reconciliation, invoice,
                                                                      allocations, field):
    payment = ingest(record("bank", 1, 400))[0]
    named = {"INVOICE": invoice, "PAYMENT": payment}
    body = [{**a, "record_id": named.get(a["record_id"], a["record_id"])} for a in allocations]

    refused = manual(api, reconciliation, [payment, invoice], allocations=body)

    assert refused.status_code == 422, refused.json_body
    assert field in [e["field"].removeprefix("body.") for e in refused.json_body.get("errors", [])] \
        or field in refused.json_body["message"], refused.json_body
    assert allocation_of(api, invoice, reconciliation) == ("unreconciled", None)


def test_a_whole_match_of_an_invoice_paid_in_part_must_balance_against_what_remains(api, ingest, reconciliation,
                                                                                     invoice):
    first, full = ingest(record("bank", 1, 400), record("bank", 2, 1000))
    assert manual(api, reconciliation, [first, invoice],
                  allocations=[{"record_id": invoice, "amount": 400}]).status_code == 201

    refused = manual(api, reconciliation, [full, invoice])

    assert refused.status_code == 422 and "differ by 400" in refused.json_body["message"], refused.json_body
    allowed = manual(api, reconciliation, [full, invoice], allow_difference=True, reason="overpaid by 4.00")
    assert allowed.status_code == 201 and allowed.json_body["differences"] == {"amount": 400}
    assert allocation_of(api, invoice, reconciliation)[0] == "reconciled"


def test_concurrent_partial_matches_never_allocate_more_than_the_invoice(api, services, ingest, reconciliation,
                                                                          invoice):
    payments = ingest(*[record("bank", n, 300) for n in range(6)])  # 18.00 offered for 10.00

    def pay(payment):
        # The service itself, on threads (chalice's test client is not safe to share between them):
        # the requests race through validation, which all pass, to the claims' conditional writes.
        try:
            return matches.create_manual_match(services.ports, "acme", reconciliation["id"], [payment, invoice],
                                               False, None, {invoice: 300}).id
        except (Conflict, ValidationFailed) as refused:
            return refused

    with ThreadPoolExecutor(max_workers=6) as pool:
        answers = list(pool.map(pay, payments))

    made = [a for a in answers if isinstance(a, int)]
    assert len(made) == 3, answers  # 3 x 300 fit in 1000; a 4th does not
    status, allocation = allocation_of(api, invoice, reconciliation)
    assert status == "unreconciled" and (allocation["amount_allocated"], allocation["amount_remaining"]) == (900, 100)
    assert sorted(s["reconciliation_match_id"] for s in allocation["shares"]) == sorted(made)
    refused = [p for p, a in zip(payments, answers) if not isinstance(a, int)]
    assert all(api.get(f"/v1/records/{p}").json_body["status"] == "unreconciled" for p in refused)
    assert all(api.get(f"/v1/reconciliation_matches/{m}").json_body["allocations"] == [
        {"record_id": invoice, "amount": 300}] for m in made)


# Exceptions and tallies count what remains ---------------------------------------------------------

def ledger_exception(api, reconciliation):
    page = api.get(f"/v1/reconciliation_exceptions?reconciliation_id={reconciliation['id']}"
                   "&data_stream_key=ledger").json_body["data"]
    active = [e for e in page if e["status"] in ("open", "investigating")]
    return active[0] if active else None


def test_an_exception_counts_what_an_invoice_paid_in_part_has_left(api, services, ingest, reconciliation):
    old = (utc_now().date() - timedelta(days=40)).isoformat()
    invoice = ingest(record("ledger", 1, 1000, old, direction="debit"))[0]
    first, second = ingest(record("bank", 1, 400, old), record("bank", 2, 600, old))
    exceptions.refresh(services.ports, "acme", reconciliation["id"])
    assert ledger_exception(api, reconciliation)["aggregates"]["debit_sum"] == 1000

    part = manual(api, reconciliation, [first, invoice], allocations=[{"record_id": invoice, "amount": 400}])
    exceptions.refresh(services.ports, "acme", reconciliation["id"])

    held = ledger_exception(api, reconciliation)
    assert (held["aggregates"]["record_count"], held["aggregates"]["debit_sum"]) == (1, 600)
    assert held["aggregates"]["total_amount"] == -600
    rest = manual(api, reconciliation, [second, invoice])
    exceptions.refresh(services.ports, "acme", reconciliation["id"])
    assert ledger_exception(api, reconciliation) is None  # covered: it left, and the exception resolved
    for match in (part, rest):
        assert api.delete(f"/v1/reconciliation_matches/{match.json_body['id']}").status_code == 204
    exceptions.refresh(services.ports, "acme", reconciliation["id"])
    assert ledger_exception(api, reconciliation)["aggregates"]["debit_sum"] == 1000  # every share given back


def test_another_environment_can_neither_pay_nor_see_a_share_of_the_first(api, services, ingest, reconciliation,
                                                                          invoice):
    payment = ingest(record("bank", 1, 400))[0]
    part = manual(api, reconciliation, [payment, invoice], allocations=[{"record_id": invoice, "amount": 400}])
    other = create_key(services.api_keys, "globex")[1]
    for key in ("bank", "ledger"):
        assert api.post("/v1/data_streams", {"key": key, "name": key}, key=other).status_code == 201
    own = api.post("/v1/reconciliations", {"name": "B's", "side_a_stream_keys": ["bank"],
                                           "side_b_stream_keys": ["ledger"]}, key=other).json_body

    theirs = api.post("/v1/reconciliation_matches", {"reconciliation_id": own["id"], "record_ids": [payment, invoice],
                                                     "allocations": [{"record_id": invoice, "amount": 1}]}, key=other)
    assert theirs.status_code == 422 and "not found" in str(theirs.json_body)  # A's records do not exist in B
    assert api.get(f"/v1/records/{invoice}", key=other).status_code == 404
    assert api.get(f"/v1/reconciliation_matches/{part.json_body['id']}", key=other).status_code == 404
    assert services.ports.claims.partly_paid("globex", own["id"]) == {}
    assert allocation_of(api, invoice, reconciliation)[1]["amount_allocated"] == 400  # A's share untouched


# A rule that allocates in parts --------------------------------------------------------------------

PARTIAL_RULE = {"name": "Instalments", "priority": 1, "cardinality": "many_to_one", "allocation": "partial",
                "conditions": [{"field": "description", "operator": "equals", "normalize": ["case"]},
                               {"field": "date", "operator": "within", "days": 60}]}


def run(api, reconciliation):
    started = api.post(f"/v1/reconciliations/{reconciliation['id']}/runs")
    assert started.status_code == 202, started.json_body
    done = api.get(f"/v1/reconciliations/{reconciliation['id']}/runs/{started.json_body['id']}").json_body
    assert done["status"] == "completed", done
    return done


def test_a_partial_rule_matches_instalments_and_leaves_the_rest_open_until_covered(api, ingest, reconciliation):
    rule = api.post(f"/v1/reconciliations/{reconciliation['id']}/rules", PARTIAL_RULE)
    assert rule.status_code == 201 and rule.json_body["allocation"] == "partial", rule.json_body
    invoice, other = ingest(record("ledger", 1, 1000, direction="debit", description="INV-7"),
                            record("ledger", 2, 800, direction="debit", description="INV-8"))
    first, second, stranger = ingest(record("bank", 1, 300, "2026-11-03", description="inv-7"),
                                     record("bank", 2, 200, "2026-11-04", description="INV-7"),
                                     record("bank", 3, 100, description="INV-9"))

    ran = run(api, reconciliation)

    assert ran["rule_summary"][str(rule.json_body["id"])] == 3
    status, allocation = allocation_of(api, invoice, reconciliation)
    assert status == "unreconciled" and (allocation["amount_allocated"], allocation["amount_remaining"]) == (500, 500)
    [share] = allocation["shares"]
    match = api.get(f"/v1/reconciliation_matches/{share['reconciliation_match_id']}").json_body
    assert match["allocations"] == [{"record_id": invoice, "amount": 500}] and match["status"] == "confirmed"
    assert sorted(r["id"] for r in match["records"]) == sorted([invoice, first, second])
    assert {api.get(f"/v1/records/{r}").json_body["status"] for r in (first, second)} == {"reconciled"}
    assert api.get(f"/v1/records/{stranger}").json_body["status"] == "unreconciled"
    assert allocation_of(api, other, reconciliation) == ("unreconciled", None)

    last = ingest(record("bank", 4, 500, "2026-11-20", description="INV-7"))[0]
    run(api, reconciliation)

    status, allocation = allocation_of(api, invoice, reconciliation)
    assert status == "reconciled" and [s["amount"] for s in allocation["shares"]] == [500, 500]
    assert api.get(f"/v1/records/{last}").json_body["status"] == "reconciled"
    assert api.delete(f"/v1/reconciliation_matches/{match['id']}").status_code == 204
    status, allocation = allocation_of(api, invoice, reconciliation)
    assert status == "unreconciled" and allocation["amount_remaining"] == 500
    run(api, reconciliation)  # the payments given back are matched again, in part
    assert allocation_of(api, invoice, reconciliation)[0] == "reconciled"


def test_a_partial_rule_never_takes_more_than_an_invoice_has_left(api, ingest, reconciliation):
    assert api.post(f"/v1/reconciliations/{reconciliation['id']}/rules", PARTIAL_RULE).status_code == 201
    invoice = ingest(record("ledger", 1, 1000, direction="debit", description="INV-7"))[0]
    payments = ingest(*[record("bank", n, 400, f"2026-11-0{n + 1}", description="INV-7") for n in range(3)])

    run(api, reconciliation)

    status, allocation = allocation_of(api, invoice, reconciliation)
    assert status == "unreconciled" and (allocation["amount_allocated"], allocation["amount_remaining"]) == (800, 200)
    statuses = [api.get(f"/v1/records/{p}").json_body["status"] for p in payments]
    assert statuses == ["reconciled", "reconciled", "unreconciled"]  # the third would overpay: left open


@pytest.mark.parametrize("changes, message", [
    ({"cardinality": "one_to_one"}, "one_to_many or many_to_one"),
    ({"group_by": {"side_a": ["description"]}}, "no group_by"),
    ({"allocation": "some"}, "'whole' or 'partial'"),
])
def test_a_partial_rule_must_be_one_to_many_or_many_to_one_without_group_by(api, reconciliation, changes, message):
    refused = api.post(f"/v1/reconciliations/{reconciliation['id']}/rules", {**PARTIAL_RULE, **changes})
    assert refused.status_code == 422 and message in str(refused.json_body), refused.json_body


def test_a_record_paid_in_part_is_not_deleted_until_its_shares_are_given_back(api, ingest, reconciliation, invoice):
    payment = ingest(record("bank", 1, 400))[0]
    part = manual(api, reconciliation, [payment, invoice], allocations=[{"record_id": invoice, "amount": 400}])

    refused = api.delete(f"/v1/records/{invoice}")

    assert refused.status_code == 409 and "paid in part" in refused.json_body["message"], refused.json_body
    assert api.delete(f"/v1/reconciliation_matches/{part.json_body['id']}").status_code == 204
    assert api.delete(f"/v1/records/{invoice}").status_code == 204


def test_a_period_close_counts_what_an_invoice_paid_in_part_has_left(api, ingest, reconciliation, invoice):
    [payment] = ingest(record("bank", 1, 400))
    assert manual(api, reconciliation, [payment, invoice],
                  allocations=[{"record_id": invoice, "amount": 400}]).status_code == 201

    made = api.post(f"/v1/reconciliations/{reconciliation['id']}/period_closes", {
        "period_start": "2026-11-01", "period_end": "2026-11-30", "note": "November"})

    assert made.status_code == 201, made.json_body
    [usd] = made.json_body["unmatched"]
    assert (usd["currency"], usd["count"], usd["debits"], usd["credits"]) == ("USD", 1, 600, 0)  # 10.00 less 4.00


def test_a_first_share_taken_while_the_last_one_is_given_back_keeps_the_record_listed_as_paid_in_part(
        api, services, ingest, reconciliation, invoice, monkeypatch):
    # The list of records paid in part is what the exception refresh counts remaining amounts by: a
    # record off it while a match holds a share of it shows its whole amount as owed.
    first, second = ingest(record("bank", 1, 400), record("bank", 2, 600))
    ports, rid = services.ports, reconciliation["id"]
    part = matches.create_manual_match(ports, "acme", rid, [first, invoice], False, None, {invoice: 400})
    table = ports.claims._table
    delete, raced = table.delete, []

    def a_first_share_lands_before_the_list_entry_goes(key, *args, **kwargs):
        if "PARTLY_PAID" in key["pk"] and not raced:  # the last share is gone from the record
            raced.append(matches.create_manual_match(ports, "acme", rid, [second, invoice], False, None,
                                                     {invoice: 600}))
        return delete(key, *args, **kwargs)
    monkeypatch.setattr(table, "delete", a_first_share_lands_before_the_list_entry_goes)

    matches.unmatch(ports, "acme", part.id)
    monkeypatch.undo()

    assert raced and allocation_of(api, invoice, reconciliation)[1]["amount_allocated"] == 600
    assert ports.claims.partly_paid("acme", rid) == {invoice: {raced[0].id: 600}}


def test_the_last_share_given_back_takes_the_record_off_the_list(api, services, ingest, reconciliation, invoice):
    first = ingest(record("bank", 1, 400))[0]
    part = matches.create_manual_match(services.ports, "acme", reconciliation["id"], [first, invoice], False, None,
                                       {invoice: 400})
    assert services.ports.claims.partly_paid("acme", reconciliation["id"]) == {invoice: {part.id: 400}}
    matches.unmatch(services.ports, "acme", part.id)
    assert services.ports.claims._table.get(partly_paid_key("acme", reconciliation["id"], invoice)) is None


def test_a_delete_meeting_a_first_share_taken_after_its_check_is_refused(api, services, ingest, reconciliation,
                                                                         invoice, monkeypatch):
    # DELETE /v1/records/{id} reads the record's shares first; a partial match landing between that
    # read and the delete's mark must still keep the record: the mark itself refuses a record paid in part.
    payment = ingest(record("bank", 1, 400))[0]
    ports, mark, made = services.ports, services.ports.records.mark_deleting, []

    def a_share_lands_between_the_check_and_the_mark(*args, **kwargs):
        made.append(matches.create_manual_match(ports, "acme", reconciliation["id"], [payment, invoice], False,
                                                None, {invoice: 400}))
        return mark(*args, **kwargs)
    monkeypatch.setattr(ports.records, "mark_deleting", a_share_lands_between_the_check_and_the_mark)

    with pytest.raises(Conflict, match="paid in part"):
        delete_record(ports, "acme", invoice)

    assert api.get(f"/v1/reconciliation_matches/{made[0].id}").status_code == 200
    assert allocation_of(api, invoice, reconciliation)[1]["amount_allocated"] == 400
    monkeypatch.undo()
    matches.unmatch(ports, "acme", made[0].id)  # its last share gone, it may be deleted
    delete_record(ports, "acme", invoice)
    assert api.get(f"/v1/records/{invoice}").status_code == 404
