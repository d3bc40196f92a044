"""A run's partial pass (domain/matching/partial.py): instalments matched to an invoice, never more
than it has left, each payment used once, whole matches of a record paid in part left out."""
from datetime import date

import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from chalicelib.domain.matching.outcome import MATCH_SCHEMA, MEMBER_SCHEMA, MatchOutcome
from chalicelib.domain.matching.partial import with_partial_matches
from chalicelib.domain.rules import Rule, validate_rule

RULE = Rule(environment="test", id=7, reconciliation_id=1, created_at=None, definition=validate_rule({
    "name": "Instalments", "cardinality": "many_to_one", "allocation": "partial",
    "conditions": [{"field": "description", "operator": "equals"}]}))


def frame(rows):
    return pl.DataFrame([{"id": i, "amount": amount, "currency": "USD", "decimal_places": 2,
                          "date": date(2026, 11, 1 + n % 28), "direction": direction, "description": text,
                          "external_id": None} for n, (i, amount, direction, text) in enumerate(rows)],
                        schema={"id": pl.Int64, "amount": pl.Int64, "currency": pl.Utf8, "decimal_places": pl.Int64,
                                "date": pl.Date, "direction": pl.Utf8, "description": pl.Utf8,
                                "external_id": pl.Utf8})


def empty_outcome(side_a, side_b, matches=None, members=None):
    return MatchOutcome(matches=matches if matches is not None else pl.DataFrame(schema=MATCH_SCHEMA),
                        members=members if members is not None else pl.DataFrame(schema=MEMBER_SCHEMA),
                        rule_summary={"unmatched": {"side_a": side_a.height, "side_b": side_b.height}},
                        unmatched_a=side_a["id"], unmatched_b=side_b["id"])


@settings(max_examples=150, deadline=None)
@given(invoices=st.lists(st.tuples(st.integers(1, 5000), st.integers(0, 4999)), min_size=1, max_size=4),
       payments=st.lists(st.tuples(st.integers(1, 3000), st.integers(0, 3)), max_size=12))
def test_shares_never_exceed_what_each_invoice_has_left_and_each_payment_pays_once(invoices, payments):
    # Two invoices share each reference: a payment offered to both is taken by one at most.
    side_b = frame([(100 + n, amount, "debit", f"INV-{n // 2}") for n, (amount, _) in enumerate(invoices)])
    side_a = frame([(n + 1, amount, "credit", f"INV-{target % len(invoices) // 2}")
                    for n, (amount, target) in enumerate(payments)])
    allocated = {100 + n: min(paid, amount - 1) for n, (amount, paid) in enumerate(invoices) if min(paid, amount - 1)}

    outcome = with_partial_matches(empty_outcome(side_a, side_b), side_a, side_b, [RULE], allocated)

    members = outcome.members
    assert members["record_id"].n_unique() == members.height  # a record in one match at most
    assert outcome.matches["match_no"].to_list() == list(range(outcome.matches.height))
    amounts = dict(zip(side_a["id"].to_list() + side_b["id"].to_list(),
                       side_a["amount"].to_list() + side_b["amount"].to_list(), strict=True))
    for match_no in outcome.matches["match_no"].to_list():
        rows = members.filter(pl.col("match_no") == match_no)
        [invoice] = rows.filter(pl.col("side") == "b").iter_rows(named=True)
        paid = sum(amounts[r] for r in rows.filter(pl.col("side") == "a")["record_id"].to_list())
        left = amounts[invoice["record_id"]] - allocated.get(invoice["record_id"], 0)
        assert 0 < paid <= left  # no cent created: the share is what the payments hold, within what is left
        assert invoice["share"] == (None if paid == left and invoice["record_id"] not in allocated else paid)
        assert all(amounts[r] > 0 for r in rows["record_id"].to_list())
    assert outcome.rule_summary["unmatched"]["side_a"] + members.filter(pl.col("side") == "a").height == side_a.height


def test_a_whole_match_of_an_invoice_paid_in_part_is_left_out_and_renumbered():
    side_b = frame([(100, 1000, "debit", "INV-1"), (101, 500, "debit", "INV-2")])
    side_a = frame([(1, 1000, "credit", "X"), (2, 500, "credit", "Y")])
    matches = pl.DataFrame({"match_no": [0, 1], "rule_id": [3, 3], "status": ["confirmed"] * 2,
                            "group_key": ["a", "b"], "differences": [None, None]}, schema=MATCH_SCHEMA)
    members = pl.DataFrame({"match_no": [0, 0, 1, 1], "side": ["a", "b", "a", "b"],
                            "record_id": [1, 100, 2, 101]}, schema=MEMBER_SCHEMA)
    outcome = MatchOutcome(matches=matches, members=members, rule_summary={"3": 4, "unmatched": {}},
                           unmatched_a=pl.Series([], dtype=pl.Int64), unmatched_b=pl.Series([], dtype=pl.Int64))

    kept = with_partial_matches(outcome, side_a, side_b, [], {100: 300})

    assert kept.matches["match_no"].to_list() == [0] and kept.matches["group_key"].to_list() == ["b"]
    assert sorted(kept.members["record_id"].to_list()) == [2, 101] and kept.members["match_no"].to_list() == [0, 0]
    assert sorted(kept.unmatched_a.to_list()) == [1] and sorted(kept.unmatched_b.to_list()) == [100]


def test_a_payment_offered_to_two_invoices_goes_to_the_first_by_id_and_the_next_fits_the_rest():
    side_b = frame([(100, 1000, "debit", "INV-1"), (101, 400, "debit", "INV-1"), (102, 700, "debit", "INV-2")])
    side_a = frame([(1, 300, "credit", "INV-1"), (2, 200, "credit", "INV-1"), (3, 900, "credit", "INV-1"),
                    (4, 300, "credit", "INV-2"), (5, 500, "credit", "INV-2")])

    outcome = with_partial_matches(empty_outcome(side_a, side_b), side_a, side_b, [RULE], {})

    by_invoice = {}
    for match_no in outcome.matches["match_no"].to_list():
        rows = outcome.members.filter(pl.col("match_no") == match_no)
        [(invoice, share)] = rows.filter(pl.col("side") == "b").select("record_id", "share").rows()
        by_invoice[invoice] = (share, sorted(rows.filter(pl.col("side") == "a")["record_id"].to_list()))
    # 100 takes 300 + 200 and stops at 900 (it would overpay); 101 is left nothing that fits (900 > 400).
    # 102 (alone with its offers) takes 300 and stops at 500 (800 > 700).
    assert by_invoice == {100: (500, [1, 2]), 102: (300, [4])}
