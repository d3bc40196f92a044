"""Issue 37 point 3 over HTTP, on moto: a partial rule's run netting refunds against an invoice's
payments, the dry run showing the partial matches the run then makes (one pass, the same answer),
and runs that fan out in partitions applying the pass in each, or saying why not
(docs/partial-payments.md)."""
from chalicelib.domain.matching import partition
from chalicelib.domain.matching.partition import BlockingKey
from chalicelib.domain.rules import Condition, Operator
from tests.integration.conftest import record
from tests.integration.test_partial_payments import PARTIAL_RULE, allocation_of, manual, run
from tests.integration.test_reconciliation_runs import add_rule, matches_of
from tests.integration.test_run_fanout import fan_out, second_reconciliation

# One rule the partial rule's condition shares: a run split in partitions hashes on description.
WHOLE_RULE = {"name": "Exact", "priority": 1, "cardinality": "one_to_one",
              "conditions": [{"field": "description", "operator": "equals", "normalize": ["case"]},
                             {"field": "amount", "operator": "equals"}]}


def rule_of(api, reconciliation, body=None):
    return add_rule(api, reconciliation, body or PARTIAL_RULE)


def dry_run(api, rule):
    response = api.post(f"/v1/reconciliation_rules/{rule['id']}/dry_run")
    assert response.status_code == 200, response.json_body
    return response.json_body


def test_a_run_nets_a_refund_against_the_payments_of_an_invoice(api, ingest, reconciliation):
    rule = rule_of(api, reconciliation)
    invoice = ingest(record("ledger", 1, 1000, "2026-11-01", direction="debit", description="INV-7"))[0]
    # The refund (a debit in the bank) comes first: it is netted, never taken for a payment.
    refund, paid, again, late = ingest(record("bank", 1, 100, "2026-11-02", direction="debit", description="INV-7"),
                                       record("bank", 2, 600, "2026-11-03", description="INV-7"),
                                       record("bank", 3, 300, "2026-11-04", description="inv-7"),
                                       record("bank", 4, 800, "2026-11-05", description="INV-7"))

    ran = run(api, reconciliation)

    assert ran["rule_summary"][str(rule["id"])] == 4  # the invoice, two payments and the refund
    status, allocation = allocation_of(api, invoice, reconciliation)
    assert status == "unreconciled" and (allocation["amount_allocated"], allocation["amount_remaining"]) == (800, 200)
    [share] = allocation["shares"]
    match = api.get(f"/v1/reconciliation_matches/{share['reconciliation_match_id']}").json_body
    assert match["allocations"] == [{"record_id": invoice, "amount": 800}]  # 600 + 300 - 100
    assert sorted(r["id"] for r in match["records"]) == sorted([invoice, refund, paid, again])
    assert api.get(f"/v1/records/{refund}").json_body["status"] == "reconciled"
    assert api.get(f"/v1/records/{late}").json_body["status"] == "unreconciled"  # 800 would overpay: left open

    # Unmatching gives the netted share back whole; the run takes it again, the same way.
    assert api.delete(f"/v1/reconciliation_matches/{match['id']}").status_code == 204
    assert allocation_of(api, invoice, reconciliation) == ("unreconciled", None)
    run(api, reconciliation)
    assert allocation_of(api, invoice, reconciliation)[1]["amount_allocated"] == 800


def test_a_payout_net_of_its_refund_covers_it_whole(api, ingest, reconciliation):
    rule_of(api, reconciliation)
    payout = ingest(record("ledger", 1, 500, "2026-11-01", direction="debit", description="PO-1"))[0]
    charge, refund = ingest(record("bank", 1, 600, "2026-11-02", description="PO-1"),
                            record("bank", 2, 100, "2026-11-03", direction="debit", description="PO-1"))

    run(api, reconciliation)

    body = api.get(f"/v1/records/{payout}").json_body
    assert body["status"] == "reconciled" and body["allocations"] == []  # matched whole: 600 - 100
    assert {api.get(f"/v1/records/{r}").json_body["status"] for r in (charge, refund)} == {"reconciled"}


def test_a_dry_run_shows_the_partial_matches_the_run_then_makes(api, ingest, reconciliation):
    rule = rule_of(api, reconciliation)
    invoice, other = ingest(record("ledger", 1, 1000, "2026-11-01", direction="debit", description="INV-7"),
                            record("ledger", 2, 800, "2026-11-01", direction="debit", description="INV-8"))
    # INV-8 was paid 300 by hand already: the dry run, as the run, allocates what it has left.
    by_hand = ingest(record("bank", 9, 300, "2026-11-01", description="by hand"))[0]
    assert manual(api, reconciliation, [by_hand, other],
                  allocations=[{"record_id": other, "amount": 300}]).status_code == 201
    ingest(record("bank", 1, 400, "2026-11-02", description="INV-7"),
           record("bank", 2, 50, "2026-11-03", direction="debit", description="INV-7"),
           record("bank", 3, 500, "2026-11-02", description="INV-8"))

    shown = dry_run(api, rule)

    assert (shown["matches"], shown["partial_matches"], shown["matched_records"]) == (2, 2, 5)
    by_invoice = {m["side_b_record_ids"][0]: m for m in shown["sample"]}
    assert by_invoice[invoice]["allocations"] == [{"record_id": invoice, "amount": 350}]  # 400 - 50
    assert by_invoice[other]["allocations"] == [{"record_id": other, "amount": 500}]  # finishes covering it
    assert allocation_of(api, invoice, reconciliation) == ("unreconciled", None)  # a dry run writes nothing

    run(api, reconciliation)

    made = {}
    for match in matches_of(api, reconciliation):
        body = api.get(f"/v1/reconciliation_matches/{match['id']}").json_body
        if body["reconciliation_rule_id"] == rule["id"]:
            made[body["allocations"][0]["record_id"]] = (
                body["allocations"], sorted(r["id"] for r in body["records"] if r["side"] == "a"))
    assert made == {one: (m["allocations"], m["side_a_record_ids"]) for one, m in by_invoice.items()}
    assert allocation_of(api, other, reconciliation)[0] == "reconciled"


def test_a_dry_run_of_a_whole_rule_has_no_partial_match(api, ingest, reconciliation):
    rule = rule_of(api, reconciliation, WHOLE_RULE)
    ingest(record("ledger", 1, 1000, direction="debit", description="INV-7"), record("bank", 1, 1000, description="INV-7"))

    shown = dry_run(api, rule)

    assert (shown["matches"], shown["partial_matches"]) == (1, 0) and shown["sample"][0]["allocations"] is None


def instalments(ingest, suffix=""):
    """Twelve invoices, each paid in part by two payments and a refund (no exact sum: only the partial pass
    matches them), and an exact pair for the whole rule; ids in the order given."""
    ledger, bank = "ledger" + suffix, "bank" + suffix
    invoices = ingest(*[record(ledger, n, 1000 + n, "2026-11-01", direction="debit", description=f"INV-{n}")
                        for n in range(12)], record(ledger, 99, 4242, description="EXACT"))
    payments = ingest(*[r for n in range(12) for r in (
        record(bank, 3 * n, 300, "2026-11-02", description=f"INV-{n}"),
        record(bank, 3 * n + 1, 40 + n, "2026-11-03", direction="debit", description=f"INV-{n}"),
        record(bank, 3 * n + 2, 200, "2026-11-04", description=f"inv-{n}"))], record(bank, 99, 4242, description="EXACT"))
    return invoices, payments


def partial_outcome(api, reconciliation, invoices, payments):
    """Each invoice's share and the positions of the payments that took it."""
    position = {r: n for n, r in enumerate(payments)}
    found = {}
    for n, invoice in enumerate(invoices):
        status, allocation = allocation_of(api, invoice, reconciliation)
        if allocation is None:
            found[n] = status
            continue
        [share] = allocation["shares"]
        match = api.get(f"/v1/reconciliation_matches/{share['reconciliation_match_id']}").json_body
        found[n] = (share["amount"], sorted(position[r["id"]] for r in match["records"] if r["side"] == "a"))
    return found


def test_a_run_that_fans_out_applies_the_partial_pass_in_each_partition(api, services, ingest, reconciliation):
    # Given the same records in two reconciliations with a whole and a partial rule sharing description equals
    copy = second_reconciliation(api)
    partial = {}
    for target in (reconciliation, copy):
        rule_of(api, target, WHOLE_RULE)
        partial[target["id"]] = rule_of(api, target, {**PARTIAL_RULE, "priority": 2})["id"]
    ids = instalments(ingest)
    copy_ids = instalments(ingest, "2")

    # When one runs in one piece and the other is forced to fan out
    whole = run(api, copy)
    fan_out(services, run_records=30, partition_records=16)
    split = run(api, reconciliation)

    # Then the fanned-out run made the same partial matches, in its partitions
    assert services.runs.get("acme", split["id"]).partitions >= 2
    assert "partial_skipped" not in split["rule_summary"]
    assert split["rule_summary"][str(partial[reconciliation["id"]])] == 48 == whole["rule_summary"][
        str(partial[copy["id"]])]
    assert split["matched_records"] == whole["matched_records"] == 50
    found = partial_outcome(api, reconciliation, *ids)
    assert found == partial_outcome(api, copy, *copy_ids)
    assert [found[n] for n in range(12)] == [(460 - n, [3 * n, 3 * n + 1, 3 * n + 2]) for n in range(12)]
    assert found[12] == "reconciled"  # the exact pair, matched whole by the first rule


def test_a_run_split_on_a_key_the_partial_rule_lacks_says_it_skipped_the_pass(api, services, ingest, reconciliation,
                                                                               monkeypatch):
    # Given a plan that also hashes on currency, which the partial rule does not compare
    rule_of(api, reconciliation, WHOLE_RULE)
    partial = rule_of(api, reconciliation, {**PARTIAL_RULE, "priority": 2})
    real = partition.plan_partitions

    def on_currency_too(rules, partitions, side_a=None):
        plan = real(rules, partitions, side_a)
        currency = BlockingKey.of(Condition("currency", Operator.EQUALS))
        return partition.PartitionPlan(plan.partitions, keys=(*plan.keys, currency))
    monkeypatch.setattr(partition, "plan_partitions", on_currency_too)
    ids = instalments(ingest)
    fan_out(services, run_records=30, partition_records=16)

    ran = run(api, reconciliation)

    # Then the run says why the partial rule matched nothing, and its whole matches are made
    assert ran["rule_summary"]["partial_skipped"] == {str(partial["id"]): (
        f"partial pass of rule {partial['id']} skipped: the run was split in partitions by currency, not an "
        "equality condition of its partial pass: a record and the records paying it could sit in two partitions")}
    assert ran["rule_summary"][str(partial["id"])] == 0
    found = partial_outcome(api, reconciliation, *ids)
    assert [found[n] for n in range(12)] == ["unreconciled"] * 12 and found[12] == "reconciled"
