"""Currencies (docs/currencies.md): rates read exactly, converted without losing a cent, the columnar
conversion equal to the exact one for every amount and rate, the rate of a record's date found, and
the engine matching records of two currencies at it."""
import json
from datetime import date, timedelta
from decimal import ROUND_HALF_EVEN, Decimal, localcontext

import polars as pl
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from chalicelib.domain.errors import ValidationFailed
from chalicelib.domain.fx import (
    MAX_RATE_DECIMALS,
    MAX_RATE_DIGITS,
    Conversion,
    Rate,
    RateRow,
    convert,
    parse_rate,
    parse_rates_csv,
)
from chalicelib.domain.matching import match_records
from chalicelib.domain.matching.conversion import add_conversions, converted_amount, rates_frame
from chalicelib.domain.matching.frames import engine_frames
from chalicelib.domain.matching.near_misses import described, near_misses
from chalicelib.domain.matching.partition import plan_partitions
from chalicelib.domain.rules import Rule, validate_rule

INT64_MAX = 2 ** 63 - 1
amounts = st.integers(min_value=0, max_value=INT64_MAX)
rates = st.builds(Rate, st.integers(min_value=1, max_value=10 ** MAX_RATE_DIGITS - 1),
                  st.integers(min_value=0, max_value=MAX_RATE_DECIMALS))
places = st.integers(min_value=0, max_value=6)
target_places = st.sampled_from([0, 2, 3, 4])


def exact(amount: int, from_places: int, to_places: int, rate: Rate, inverted: bool) -> Decimal:
    """The reference: decimals, with precision to spare, rounded half to even to a target minor unit."""
    with localcontext() as context:
        context.prec = 120
        value = Decimal(amount).scaleb(-from_places)
        value = value / Decimal(rate.text) if inverted else value * Decimal(rate.text)
        return value.scaleb(to_places).quantize(Decimal(1), rounding=ROUND_HALF_EVEN)


# Rates --------------------------------------------------------------------------------------------

def test_a_rate_is_kept_as_the_exact_decimal_it_says():
    assert parse_rate("1.0842") == Rate(10842, 4)
    assert parse_rate("1.084200").text == "1.0842"
    assert parse_rate("150") == Rate(150, 0)
    assert parse_rate("0.000000000001") == Rate(1, 12)
    assert parse_rate(" 2.50 ").text == "2.5"


@pytest.mark.parametrize("text,problem", [
    ("0", "must be above 0"), ("0.000", "must be above 0"), ("-1.2", "positive decimal"), ("1e3", "positive decimal"),
    ("1,08", "positive decimal"), ("", "positive decimal"), (".5", "positive decimal"),
    ("0.0000000000001", "more than 12 decimals"), ("1234567890123456", "more than 15 significant digits")])
def test_a_rate_that_is_not_a_positive_exact_decimal_is_refused(text, problem):
    refused = parse_rate(text)
    assert isinstance(refused, str) and problem in refused


@given(rates)
def test_a_rates_text_reads_back_as_the_same_rate(rate):
    assert parse_rate(rate.text) == Rate(rate.mantissa // 10 ** _zeros(rate), rate.scale - _zeros(rate))
    assert Decimal(rate.text) == Decimal(rate.mantissa).scaleb(-rate.scale)


def _zeros(rate: Rate) -> int:
    """Trailing zeros of the mantissa that lie after the point (the text drops them)."""
    n = 0
    while n < rate.scale and rate.mantissa % 10 ** (n + 1) == 0:
        n += 1
    return n


def test_a_rates_csv_is_read_whatever_its_column_order_and_each_bad_row_is_named():
    results, unreadable = parse_rates_csv("\ufeffRATE,base,Quote,date,note\n1.08,eur,USD,2026-03-02,x\n"
                                          "2,EUR,USD,2026-13-01\n\n3,ABC,USD,2026-03-02\n")
    assert unreadable is None
    assert results[0].rate == RateRow(date(2026, 3, 2), "EUR", "USD", Rate(108, 2))
    assert [(r.row, [(e.field, e.message) for e in r.errors]) for r in results[1:]] == [
        (2, [("date", "'2026-13-01' is not a date YYYY-MM-DD")]),
        (4, [("base", "'ABC' is not an ISO 4217 currency code")])]
    assert parse_rates_csv("") == ([], "the CSV is empty: its first line names the columns date, base, quote, rate")
    assert parse_rates_csv("date,base,quote,rate\n")[1] == "the CSV has a header and no row"


def test_a_rate_with_an_unquoted_decimal_comma_is_refused_not_cut_to_its_integer_part():
    results, unreadable = parse_rates_csv('date,base,quote,rate\n2026-03-04,GBP,USD,1,27\n2026-03-05,GBP,USD,"1,27"\n')
    assert unreadable is None
    assert results[0].rate is None
    assert [(e.field, e.message) for e in results[0].errors] == [
        ("rate", 'the row has 5 cells and the header names 4: a decimal comma must be quoted ("1,27") or '
                 "written with a point (1.27)")]
    assert results[1].rate is None and results[1].errors[0].field == "rate"  # quoted, still not a decimal point
    excel, _ = parse_rates_csv("date,base,quote,rate,\n2026-03-04,GBP,USD,1,27\n")  # a header ending in a comma
    assert excel[0].rate is None and excel[0].errors[0].field == "rate"
    noted, _ = parse_rates_csv("date,base,quote,rate,note\n2026-03-04,GBP,USD,1,27\n2026-03-05,GBP,USD,1,x\n")
    assert noted[0].rate is None and noted[1].rate == RateRow(date(2026, 3, 5), "GBP", "USD", Rate(1, 0))
    trailing, _ = parse_rates_csv("date,base,quote,rate\n2026-03-04,GBP,USD,1.27,\n")  # an empty last cell is no value
    assert trailing[0].rate == RateRow(date(2026, 3, 4), "GBP", "USD", Rate(127, 2))


# Converting exactly --------------------------------------------------------------------------------

@pytest.mark.parametrize("amount,from_places,to_places,rate,inverted,expected", [
    (10_000, 2, 2, "1.0842", False, 10_842),     # 100.00 EUR -> 108.42 USD
    (5, 2, 2, "0.1", False, 0),                  # 0.005: a tie, to the even 0.00
    (15, 2, 2, "0.1", False, 2),                 # 0.015: a tie, to the even 0.02
    (25, 2, 2, "0.1", False, 2),                 # 0.025: a tie, to the even 0.02
    (15_050, 0, 2, "150.5", True, 10_000),       # 15050 JPY / 150.5 = 100.00 USD
    (1, 0, 2, "3", True, 33),                    # 1 JPY / 3 = 0.333.. -> 0.33
    (10_000, 2, 0, "150.5", False, 15_050),      # 100.00 USD -> 15050 JPY
    (10_050, 2, 0, "0.01", False, 1),            # 100.50 * 0.01 = 1.005 JPY -> 1
    (1_000, 2, 3, "0.30712", False, 3_071),      # 10.00 USD -> 3.071 KWD (3.0712)
    (12_345, 3, 2, "3.2562", False, 4_020),      # 12.345 KWD -> 40.197789 -> 40.20 USD
])
def test_conversion_rounds_half_to_even_in_the_targets_minor_units(amount, from_places, to_places, rate, inverted,
                                                                   expected):
    parsed = parse_rate(rate)
    assert isinstance(parsed, Rate)
    assert convert(amount, from_places, to_places, parsed, inverted) == expected
    assert exact(amount, from_places, to_places, parsed, inverted) == expected


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(amounts, places, target_places, rates, st.booleans()), min_size=1, max_size=50))
def test_the_columnar_conversion_is_the_exact_one_for_every_amount_and_rate(cases):
    """The engine's Int128 arithmetic against decimals: never a cent apart, and null exactly when the
    result would not fit a 64-bit amount."""
    frame = pl.DataFrame({"amount": [c[0] for c in cases], "from": [c[1] for c in cases],
                          "to": [c[2] for c in cases], "mantissa": [c[3].mantissa for c in cases],
                          "scale": [c[3].scale for c in cases], "inverted": [c[4] for c in cases]},
                         schema={"amount": pl.Int64, "from": pl.Int32, "to": pl.Int32, "mantissa": pl.Int64,
                                 "scale": pl.Int32, "inverted": pl.Boolean})
    got = converted_amount(frame, pl.col("amount"), pl.col("from"), pl.col("to"), pl.col("mantissa"),
                           pl.col("scale"), pl.col("inverted")).to_list()
    for (amount, from_places, to_places, rate, inverted), columnar in zip(cases, got, strict=True):
        reference = exact(amount, from_places, to_places, rate, inverted)
        assert convert(amount, from_places, to_places, rate, inverted) == reference
        assert columnar == (int(reference) if reference <= INT64_MAX else None), (amount, rate, inverted)


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=0, max_value=10 ** 12), rates)
def test_converting_there_and_back_loses_at_most_what_rounding_twice_can(amount, rate):
    """amount -> rate -> inverse rate, both at two decimals: within half a cent of each rounding,
    carried through the rate (never a whole cent more)."""
    there = convert(amount, 2, 2, rate)
    back = convert(there, 2, 2, rate, inverted=True)
    slack = Decimal(1) / 2 + Decimal(1) / 2 / Decimal(rate.text)
    assert abs(back - amount) <= slack


# Rule validation ------------------------------------------------------------------------------------

RULE = {"name": "EUR to USD", "conditions": [{"field": "amount", "operator": "within", "tolerance": 1},
                                            {"field": "currency", "operator": "equals"},
                                            {"field": "date", "operator": "within", "days": 2}],
        "conversion": {"rate_stream_key": "ecb", "side": "side_a", "to_currency": "USD"}}


def test_a_rules_conversion_is_checked_and_kept_in_its_body():
    definition = validate_rule(RULE)
    assert definition.conversion == Conversion("ecb", "side_a", "USD", 7)
    assert validate_rule(definition.as_body()) == definition
    assert "conversion" not in validate_rule({**RULE, "conversion": None}).as_body()
    with pytest.raises(ValidationFailed) as refused:
        validate_rule({**RULE, "conversion": {"rate_stream_key": "ECB!", "side": "a", "to_currency": "XYZ",
                                              "max_days_back": True, "rate": 1}})
    assert [e.field for e in refused.value.errors] == [
        "conversion.rate_stream_key", "conversion.side", "conversion.to_currency", "conversion.max_days_back",
        "conversion.rate"]
    assert definition.patched({"conversion": None}).conversion is None


# The rate of a record's date, and the engine ------------------------------------------------------

SCHEMA = {"id": pl.Int64, "amount": pl.Int64, "currency": pl.Utf8, "decimal_places": pl.Int32, "date": pl.Date,
          "direction": pl.Utf8, "description": pl.Utf8, "external_id": pl.Utf8}


def records(*rows):
    return pl.DataFrame([(i, amount, currency, places, day, "credit", None, None)
                         for i, amount, currency, places, day in rows], schema=SCHEMA, orient="row")


def rule_of(body=RULE, rule_id=7):
    return Rule("acme", rule_id, 1, validate_rule(body), None)


def the_rates(*rows):
    return {"ecb": rates_frame([RateRow(day, base, quote, parse_rate(text)) for day, base, quote, text in rows])}


def converted(frame, rule, rates, side="a"):
    return add_conversions(frame, side, [rule], rates)


D = date(2026, 3, 2)


def test_the_rate_is_the_latest_on_or_before_the_date_within_the_days_back_else_none():
    rule = rule_of({**RULE, "conversion": {**RULE["conversion"], "max_days_back": 3}})
    rates = the_rates((D, "EUR", "USD", "1.10"), (D + timedelta(days=2), "EUR", "USD", "1.20"),
                      (D + timedelta(days=2), "USD", "EUR", "0.5"),  # the direct pair wins on its day
                      (D + timedelta(days=4), "USD", "EUR", "0.8"))  # only the reverse pair: divided
    side = records((1, 10_000, "EUR", 2, D - timedelta(days=1)), (2, 10_000, "EUR", 2, D),
                   (3, 10_000, "EUR", 2, D + timedelta(days=1)), (4, 10_000, "EUR", 2, D + timedelta(days=3)),
                   (5, 10_000, "EUR", 2, D + timedelta(days=5)), (6, 10_000, "USD", 2, D),
                   (7, 10_000, "EUR", 2, D + timedelta(days=40)))
    out = converted(side, rule, rates)
    assert out["fx.7.amount"].to_list() == [None, 11_000, 11_000, 12_000, 12_500, 10_000, None]
    assert out["fx.7.currency"].to_list() == [None, "USD", "USD", "USD", "USD", "USD", None]
    notes = [n and json.loads(n) for n in out["fx.7.note"].to_list()]
    assert notes[0] is None and notes[5] is None  # no rate; already in USD: nothing converted
    assert (notes[3]["rate"], notes[3]["pair"], notes[3]["inverted"]) == ("1.2", "EUR/USD", False)
    assert (notes[4]["rate"], notes[4]["pair"], notes[4]["inverted"], notes[4]["rate_date"]) == (
        "0.8", "USD/EUR", True, "2026-03-06")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.integers(min_value=1, max_value=10 ** 11), min_size=1, max_size=20, unique=True),
       st.builds(Rate, st.integers(min_value=1, max_value=10 ** 9), st.integers(min_value=0, max_value=9)))
def test_a_record_matches_the_exact_converted_amount_and_not_a_cent_beside_it(euros, rate):
    """For every amount and rate: side B holds the exact conversion of each EUR amount; with no
    tolerance the engine pairs each with it, and with the cent above or below it pairs nothing."""
    rule = rule_of({**RULE, "conditions": [{"field": "amount", "operator": "equals"},
                                           {"field": "currency", "operator": "equals"}]})
    rates = {"ecb": rates_frame([RateRow(D, "EUR", "USD", rate)])}
    side_a = converted(records(*((i, e, "EUR", 2, D) for i, e in enumerate(euros))), rule, rates)
    targets = [convert(e, 2, 2, rate) for e in euros]
    assume(max(targets) < 2 ** 62)  # amounts a record can hold (the overflow itself: the test above)
    for shift in (0, 1, -1):
        side_b = records(*((10_000 + i, t + shift, "USD", 2, D) for i, t in enumerate(targets) if t + shift >= 0))
        a, b = engine_frames(side_a, side_b)
        outcome = match_records(a, b, [rule])
        amount_b = dict(zip(side_b["id"].to_list(), side_b["amount"].to_list(), strict=True))
        by_match: dict[int, dict[str, int]] = {}
        for member in outcome.members.to_dicts():
            by_match.setdefault(member["match_no"], {})[member["side"]] = member["record_id"]
        for pair in by_match.values():  # never a cent apart
            assert amount_b[pair["b"]] == targets[pair["a"]]
        if shift == 0:
            assert len(by_match) == len(euros)
            assert all('"conversions":[{"record_id":' in d for d in outcome.matches["differences"].to_list())


def test_a_converted_amount_meets_its_counterpart_at_the_engines_scale():
    """USD kept with four decimals on side B: the converted amount (two) is brought up exactly."""
    rule = rule_of()
    rates = the_rates((D, "EUR", "USD", "1.0842"))
    side_a = converted(records((1, 10_000, "EUR", 2, D)), rule, rates)
    side_b = records((2, 1_084_200, "USD", 4, D))
    a, b = engine_frames(side_a, side_b)
    assert a["fx.7.amount"].to_list() == [1_084_200] and b["amount"].to_list() == [1_084_200]
    assert match_records(a, b, [rule]).matches.height == 1


def test_a_grouped_rule_sums_the_converted_amounts_of_its_members():
    rule = rule_of({**RULE, "cardinality": "many_to_one", "group_by": {"side_a": ["external_id"], "side_b": []},
                    "conditions": [{"field": "amount", "operator": "equals"},
                                   {"field": "currency", "operator": "equals"}]})
    rates = the_rates((D, "EUR", "USD", "1.5"))
    side_a = records((1, 1_000, "EUR", 2, D), (2, 3_001, "EUR", 2, D)).with_columns(external_id=pl.lit("batch-1"))
    side_a = converted(side_a, rule, rates)  # 15.00 + 45.015 -> 45.02 (half to even of 4501.5)
    side_b = records((3, 6_002, "USD", 2, D))
    a, b = engine_frames(side_a, side_b)
    outcome = match_records(a, b, [rule])
    assert outcome.matches.height == 1
    assert outcome.matches["differences"][0].count('"record_id"') == 2


def test_near_misses_name_the_missing_rate_and_the_rate_behind_an_amount():
    rule = rule_of()
    rates = the_rates((D, "EUR", "USD", "1.0842"))
    side_a = converted(records((1, 10_000, "EUR", 2, D), (2, 10_000, "GBP", 2, D)), rule, rates)
    side_b = records((3, 10_850, "USD", 2, D))
    a, b = engine_frames(side_a, side_b)
    found = described(near_misses(a, b, rule, subject_side="a"), rule, "a")
    by_id = {e["record_id"]: e for e in found}
    assert by_id[1]["failed_conditions"][0]["message"] == (
        "amount off by 0.08 USD, 0.07 USD more than the 0.01 USD allowed (converted: this record: 100.00 EUR at "
        "EUR/USD 1.0842 of 2026-03-02 = 108.42 USD)")
    assert by_id[2]["failed_conditions"][0]["message"] == (
        "no rate for GBP/USD (nor USD/GBP) in rate stream 'ecb' on 2026-03-02 nor in the 7 days before")
    from_b = described(near_misses(a, b, rule, subject_side="b"), rule, "b")
    assert from_b[0]["candidate_record_id"] == 1 and from_b[0]["conversions"][0]["record"] == "candidate"


def test_a_converting_rule_is_never_split_on_currency_or_amount():
    plain = rule_of({**RULE, "conversion": None}, rule_id=1)
    converting = rule_of(rule_id=2)
    assert [k.field for k in plan_partitions([plain], 4).keys] == ["currency"]
    refused = plan_partitions([plain, converting], 4, records((1, 1, "EUR", 2, D), (2, 5, "EUR", 2, D + timedelta(9))))
    assert not refused.keys and refused.axis in (None, "date")


def test_a_run_in_partitions_matches_across_currencies_as_one_piece_does():
    """Hashed on the reference both rules share (never on currency or amount): each partition
    carries its records' converted amounts, and the merge is the single engine's answer."""
    from chalicelib.domain.matching.partition import match_partitioned

    reference = {"field": "external_id", "operator": "equals"}
    converting = rule_of({**RULE, "conditions": [*RULE["conditions"], reference]}, rule_id=2)
    plain = rule_of({**RULE, "conversion": None, "conditions": [*RULE["conditions"], reference]}, rule_id=1)
    rates = the_rates((D, "EUR", "USD", "1.0842"), (D, "USD", "JPY", "150.5"))
    rows_a = [(i, 10_000 + i, ("EUR", "JPY", "USD")[i % 3], 0 if i % 3 == 1 else 2, D) for i in range(300)]
    side_a = records(*rows_a).with_columns(external_id=pl.format("ref-{}", pl.col("id") % 50))
    targets = [convert(a, p, 2, parse_rate("1.0842" if c == "EUR" else "150.5"), c == "JPY") if c != "USD" else a
               for _, a, c, p, _ in rows_a]
    side_b = records(*((1_000 + i, t + (i % 4 == 0), "USD", 2, D) for i, t in enumerate(targets))).with_columns(
        external_id=pl.format("ref-{}", (pl.col("id") - 1_000) % 50))
    a, b = engine_frames(converted(side_a, converting, rates), side_b)
    plan = plan_partitions([plain, converting], 4)
    assert [k.field for k in plan.keys] == ["external_id"]

    whole = match_records(a, b, [plain, converting])
    parts = match_partitioned(a, b, [plain, converting], plan).outcome

    assert whole.matches.height > 100
    assert parts.matches.to_dicts() == whole.matches.to_dicts()
    assert parts.members.to_dicts() == whole.members.to_dicts()
    assert any('"conversions"' in d for d in parts.matches["differences"].to_list())


def test_a_partial_rule_takes_no_conversion():
    # Shares are minor units of the records' own currency: a converting partial rule is refused (422)
    with pytest.raises(ValidationFailed, match="partial allocates within one currency"):
        validate_rule({**RULE, "cardinality": "many_to_one", "allocation": "partial"})
    assert validate_rule({**RULE, "cardinality": "many_to_one"}).conversion is not None
