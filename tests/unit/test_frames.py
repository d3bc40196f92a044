"""The frames around the matching engine (domain/matching/frames.py): a run's plan is cut in chunks
without splitting a match, in chunk order; amounts of one currency are brought to one scale."""
from __future__ import annotations

from datetime import date

import polars as pl

from chalicelib.domain.matching.frames import engine_frames, members_by_match, plan_chunks, record_schema
from chalicelib.domain.matching.outcome import MATCH_SCHEMA, MEMBER_SCHEMA, MatchOutcome

DAY = date(2026, 3, 2)


def side(*rows: dict) -> pl.DataFrame:
    """Open records as the load phase keeps them (record_schema without `status`)."""
    defaults = {"direction": "credit", "date": DAY, "currency": "USD", "decimal_places": 2, "description": None,
                "external_id": None, "data_stream_key": "bank", "matched_in": [], "is_new": False}
    schema = {k: v for k, v in record_schema([]).items() if k != "status"}
    return pl.DataFrame([{**defaults, **row} for row in rows], schema=schema)


def outcome(sizes: list[int]) -> tuple[MatchOutcome, pl.DataFrame, pl.DataFrame]:
    """Matches numbered from 0 with `sizes[n]` records each (one on side A, the rest on side B),
    and the sides holding those records; members listed in reverse, as no order is promised."""
    matches, members, a_rows, b_rows = [], [], [], []
    record_id = 0
    for match_no, size in enumerate(sizes):
        matches.append({"match_no": match_no, "rule_id": 1, "status": "confirmed", "group_key": None,
                        "differences": None})
        for k in range(size):
            record_id += 1
            members.append({"match_no": match_no, "side": "a" if k == 0 else "b", "record_id": record_id})
            (a_rows if k == 0 else b_rows).append({"id": record_id, "amount": 100,
                                                   "data_stream_key": "ledger" if k == 0 else "bank"})
    result = MatchOutcome(matches=pl.DataFrame(matches, schema=MATCH_SCHEMA),
                          members=pl.DataFrame(members[::-1], schema=MEMBER_SCHEMA), rule_summary={},
                          unmatched_a=pl.Series([], dtype=pl.Int64), unmatched_b=pl.Series([], dtype=pl.Int64))
    return result, side(*a_rows), side(*b_rows)


def test_the_plan_never_splits_a_match_and_is_in_chunk_order():
    found, side_a, side_b = outcome([2, 2, 3, 1, 5, 2])

    matches, members, starts = plan_chunks(found, side_a, side_b, chunk_records=4)

    # 2+2 fill the first chunk; 3+1 the second; 5 is bigger than a chunk, alone; 2 the last
    assert starts == [0, 2, 4, 5]  # each chunk's first match number: the chunks are these ranges
    assert matches.select("match_no", "chunk").rows() == [(0, 0), (1, 0), (2, 1), (3, 1), (4, 2), (5, 3)]
    assert members["chunk"].to_list() == sorted(members["chunk"].to_list())
    assert members["match_no"].to_list() == sorted(members["match_no"].to_list())
    by_match = members_by_match(members)
    assert {n: {r["chunk"] for r in rows} for n, rows in by_match.items()} == {0: {0}, 1: {0}, 2: {1}, 3: {1},
                                                                               4: {2}, 5: {3}}
    assert [len(rows) for rows in by_match.values()] == [2, 2, 3, 1, 5, 2]
    assert members.filter(pl.col("side") == "a")["data_stream_key"].unique().to_list() == ["ledger"]


def test_a_plan_of_no_match_has_no_chunk():
    found, side_a, side_b = outcome([])

    matches, members, starts = plan_chunks(found, side_a, side_b, chunk_records=4)

    assert (starts, matches.height, members.height) == ([], 0, 0)


def test_amounts_of_one_currency_compare_at_one_scale():
    side_a = side({"id": 1, "amount": 100, "decimal_places": 2},    # 1.00
                  {"id": 2, "amount": 5, "currency": "JPY", "decimal_places": 0})
    side_b = side({"id": 3, "amount": 1, "decimal_places": 0},      # 1
                  {"id": 4, "amount": 5, "currency": "JPY", "decimal_places": 0})

    engine_a, engine_b = engine_frames(side_a, side_b)

    assert engine_a["amount"].to_list() == [100, 5]
    assert engine_b["amount"].to_list() == [100, 5]   # 1 with no decimals is 1.00, not 0.01
    assert engine_a.columns == ["id", "amount", "direction", "date", "currency", "description", "external_id"]
    assert "is_new" in engine_frames(side_a, side_b, only_new=True)[0].columns


def test_a_big_matchs_money_comes_from_its_members_exactly_and_an_old_plan_gives_none():
    from chalicelib.domain.matching.frames import members_money
    from chalicelib.domain.tallies import CurrencyAmounts
    big = 2**63 - 1
    members = pl.DataFrame({
        "match_no": [0, 0, 0, 1, 1], "amount": [big, big, 5, 7, 8], "currency": ["USD", "USD", "USD", "EUR", "EUR"],
        "direction": ["credit", "credit", "debit", "credit", "credit"], "decimal_places": [2, 2, 3, 2, 2]})
    assert members_money(members, 2) == {0: {"USD": CurrencyAmounts("USD", 3, big * 2 * 10, 5, 3)}}
    assert members_money(members, 1) == {0: {"USD": CurrencyAmounts("USD", 3, big * 2 * 10, 5, 3)},
                                         1: {"EUR": CurrencyAmounts("EUR", 2, 15, 0, 2)}}
    assert members_money(members.drop("amount"), 1) == {}
