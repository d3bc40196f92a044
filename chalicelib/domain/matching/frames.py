"""The frames around the engines: pure polars code that turns what storage hands over (pages of
record columns, records) into the engines' input, and what the matching engine finds into
the plan a run persists, and reads that plan back as matches and their members.

It lives in the domain so that the services, which orchestrate a run's phases, hold no columnar
code and import no polars: they pass frames from the run's files (adapters/run_files.py) to
these functions and get frames, or domain objects, back. polars is imported here at module
level, like the engines; the services import this module only inside the functions that need it,
so that a Lambda without the engine layer (tests/deploy) still imports the app.
"""
from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Iterator, Sequence
from datetime import date, datetime
from typing import Any

import polars as pl

from chalicelib.domain.matches import Match, MatchMember, MatchStatus
from chalicelib.domain.matching.outcome import MatchOutcome
from chalicelib.domain.record_changes import CHANGE_BLOCK_IDS
from chalicelib.domain.records import OpenRecord, ReconciledRecord, Record, RecordColumns, RecordStatus
from chalicelib.domain.rules import Condition
from chalicelib.domain.tallies import CurrencyAmounts, combined

Frame = pl.DataFrame  # what the services hand on between these functions and the run's files

POWERS_OF_TEN = {n: 10 ** n for n in range(19)}  # exact integer factors between decimal places
ENGINE_COLUMNS = ("id", "amount", "direction", "date", "currency", "description", "external_id")
# metadata keys the investigation engine reads as a reference
REFERENCE_KEYS = ("reference", "ref", "payment_reference")
# What writing a member needs of its record, and the money a big match keeps beside its members.
PERSISTED_RECORD_COLUMNS = ("id", "data_stream_key", "matched_in", "amount", "currency", "direction", "decimal_places",
                            "date")
MONEY_COLUMNS = ("amount", "currency", "direction", "decimal_places")


# Open records, for the matching engine -----------------------------------------------------------

def open_records_frame(pages: Iterable[RecordColumns], metadata_keys: list[str], new_jobs: set[int] | None,
                       writing: Collection[int] = frozenset()) -> pl.DataFrame:
    """The engine's input (see domain/matching) from pages of record columns (see
    adapters/dynamodb/record_columns), plus what persisting needs (`data_stream_key`,
    `matched_in`), for continuous runs `is_new`, and `status` (for adopting a stream).
    Records of a job in `writing` are left out: a job still writing may write a record again.
    Each page becomes a small frame at once: nothing holds a Python object per record. In id
    order, however the pages came (a stream's shards are read at once)."""
    schema = record_schema(metadata_keys)
    parts = [_page_frame(page, metadata_keys, new_jobs, writing) for page in pages]
    return pl.concat(parts).sort("id") if parts else pl.DataFrame(schema=schema)


def record_schema(metadata_keys: list[str]) -> dict[str, Any]:
    """The columns of `open_records_frame`, typed, so that an empty side has them all too: one
    Utf8 column `metadata.<key>` per metadata key a rule reads."""
    return {"id": pl.Int64, "amount": pl.Int64, "direction": pl.Utf8, "date": pl.Date, "currency": pl.Utf8,
            "decimal_places": pl.Int32, "description": pl.Utf8, "external_id": pl.Utf8, "data_stream_key": pl.Utf8,
            "matched_in": pl.List(pl.Int64), "is_new": pl.Boolean, **{key: pl.Utf8 for key in metadata_keys},
            "status": pl.Utf8}


def _page_frame(page: RecordColumns, metadata_keys: list[str], new_jobs: set[int] | None,
                writing: Collection[int]) -> pl.DataFrame:
    """One page of record columns as a frame: dates parsed, `is_new` from the record's job, the
    metadata JSON decoded only when a rule reads a metadata key."""
    schema = record_schema(metadata_keys)
    job = pl.Series(page["file_import_id"], dtype=pl.Int64)
    metadata = [json.loads(m) if m else {} for m in page["metadata"]] if metadata_keys else []
    derived = {"date": pl.Series(page["date"], dtype=pl.Utf8).str.to_date("%Y-%m-%d"),
               "is_new": _is_in(job, new_jobs if new_jobs is not None else ()),
               **{key: [_text(m.get(key.removeprefix("metadata."))) for m in metadata] for key in metadata_keys}}
    frame = pl.DataFrame({name: derived[name] if name in derived else page[name] for name in schema}, schema=schema)
    return frame.filter(~_is_in(job, writing)) if writing else frame


# The columns of a page of record columns that the analytics mirror's rows hold as well (adapters/mirror.py).
IMPORTED_COLUMNS = {"id": pl.Int64, "amount": pl.Int64, "decimal_places": pl.Int64, "file_import_id": pl.Int64,
                    "direction": pl.Utf8, "date": pl.Utf8, "currency": pl.Utf8, "description": pl.Utf8,
                    "external_id": pl.Utf8, "data_stream_key": pl.Utf8}


def imported_page(rows: pl.LazyFrame, with_metadata: bool,
                  changed_blocks: Collection[int] = frozenset()) -> tuple[RecordColumns, int]:
    """Rows of the analytics mirror as a page of record columns, for records nothing has changed
    since their import wrote them: in no match (`matched_in` empty), unreconciled. The rows of ids
    in `changed_blocks` are left out (domain/record_changes.py: the table has them). With the page,
    how many rows the mirror held, those left out too."""
    columns = {**IMPORTED_COLUMNS, **({"metadata": pl.Utf8} if with_metadata else {})}
    frame = rows.select(pl.col(name).cast(kind) for name, kind in columns.items()).collect()
    held = frame.height
    if changed_blocks:
        blocks = pl.Series(sorted(changed_blocks), dtype=pl.Int64)
        frame = frame.filter(~(pl.col("id") // CHANGE_BLOCK_IDS).is_in(blocks))
    unmatched = pl.Series("matched_in", [[]], dtype=pl.List(pl.Int64)).new_from_index(0, frame.height)
    unreconciled = pl.Series("status", [RecordStatus.UNRECONCILED.value]).new_from_index(0, frame.height)
    return {**{name: frame[name] for name in frame.columns}, "matched_in": unmatched, "status": unreconciled}, held


def row_ids(rows: pl.LazyFrame) -> set[int]:
    """The record ids of an import's rows in the analytics mirror (tombstoned ones too)."""
    return set(rows.select(pl.col("id").cast(pl.Int64)).collect()["id"].to_list())


def _is_in(column: pl.Series, ids: Iterable[int]) -> pl.Series:
    """Null (a record of no job) is in no set."""
    return column.is_in(pl.Series(sorted(ids), dtype=pl.Int64)).fill_null(False)


def _text(value: Any) -> str | None:
    """A metadata value as the engine compares it: text as it is, anything else as its JSON, keys
    sorted (an object's key order is no part of it: the analytics mirror keeps them sorted)."""
    if value is None:
        return None
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def engine_frames(side_a: pl.DataFrame, side_b: pl.DataFrame,
                  only_new: bool = False) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The engine's columns (`is_new` too when only new records may pair), amounts of one
    currency brought to one scale: 1.00 kept with two decimals (100) and 1 kept with none (1)
    compare as 100 and 100, never as 100 and 1. The scale is the currency's most decimal places
    on either side, so amounts are only ever multiplied, exactly."""
    from chalicelib.domain.matching import conversion  # a converting rule's amounts (fx.<rule>.*)

    scales = (pl.concat([side_a.select("currency", "decimal_places"), side_b.select("currency", "decimal_places"),
                         *conversion.scale_rows(side_a), *conversion.scale_rows(side_b)])
              .group_by("currency").agg(pl.col("decimal_places").max().alias("scale")))
    columns = [c for c in side_a.columns if c in ENGINE_COLUMNS or c.startswith("metadata.")]
    if only_new:
        columns.append("is_new")

    def scaled(frame: pl.DataFrame) -> pl.DataFrame:
        factor = pl.col("scale") - pl.col("decimal_places")
        return (conversion.rescaled(frame, scales).join(scales, on="currency", how="left")
                .with_columns(pl.col("amount") * factor.replace_strict(POWERS_OF_TEN, return_dtype=pl.Int64))
                .select(columns + conversion.engine_columns(frame)))

    return scaled(side_a), scaled(side_b)


# The plan a run persists ----------------------------------------------------------------------------

def plan_chunks(outcome: MatchOutcome, side_a: pl.DataFrame, side_b: pl.DataFrame,
                chunk_records: int) -> tuple[pl.DataFrame, pl.DataFrame, list[int]]:
    """(matches, members, chunk starts): the outcome's matches and members with what persisting
    needs (each member's `data_stream_key` and `matched_in`, each row's `chunk`), cut in chunks
    of about `chunk_records` records so that one persist call stays short. A match is never split
    (its records are written together or not at all); a bigger one is a chunk of its own. A chunk
    is a contiguous range of match numbers, from its start to the next chunk's: the run keeps the
    starts, so that it knows a chunk's matches without these files. Rows are in chunk order so
    that a persist call reads only its chunk's Parquet row groups."""
    sizes = outcome.members.group_by("match_no").len().sort("match_no")
    chunk_of: list[int] = []  # by match_no, in order
    starts: list[int] = []
    filled = 0
    for match_no, size in zip(sizes["match_no"], sizes["len"], strict=True):
        if not starts or filled + size > chunk_records:
            starts.append(match_no)
            filled = 0
        chunk_of.append(len(starts) - 1)
        filled += size
    chunk_frame = sizes.select("match_no").with_columns(chunk=pl.Series(chunk_of, dtype=pl.Int64))
    records = pl.concat([side_a.select(*PERSISTED_RECORD_COLUMNS), side_b.select(*PERSISTED_RECORD_COLUMNS)])
    members = (outcome.members.join(records, left_on="record_id", right_on="id", how="left")
               .join(chunk_frame, on="match_no", how="left").sort("match_no", maintain_order=True))
    matches = outcome.matches.join(chunk_frame, on="match_no", how="left").sort("match_no", maintain_order=True)
    return matches, members, starts


def members_by_match(members: pl.DataFrame) -> dict[int, list[dict[str, Any]]]:
    """A chunk's member rows grouped by their match_no, matches and rows in the frame's order:
    a match's records are written, or undone, together."""
    by_match: dict[int, list[dict[str, Any]]] = {}
    for row in members.iter_rows(named=True):
        by_match.setdefault(row["match_no"], []).append(row)
    return by_match


def match_members(members: pl.DataFrame) -> dict[int, list[MatchMember]]:
    """`members_by_match`, each row a MatchMember (as writing or undoing a match takes it)."""
    return {match_no: [MatchMember(row["side"], row["record_id"], row["data_stream_key"],
                                   frozenset(row["matched_in"] or ()), share=row.get("share")) for row in rows]
            for match_no, rows in members_by_match(members).items()}


def planned_matches(matches: pl.DataFrame, members: pl.DataFrame, *, environment: str, reconciliation_id: int,
                    run_id: int, first_match_id: int, created_at: datetime) -> list[tuple[Match, list[MatchMember]]]:
    """One chunk of a run's plan as the matches to write, each with its members: match number n
    of the plan is match `first_match_id + n` (the run's block of ids)."""
    by_match = match_members(members)
    return [(Match(environment=environment, id=first_match_id + row["match_no"], reconciliation_id=reconciliation_id,
                   status=MatchStatus(row["status"]), group_key=row["group_key"],
                   record_count=len(by_match[row["match_no"]]), created_at=created_at,
                   reconciliation_rule_id=row["rule_id"], run_id=run_id,
                   differences=json.loads(row["differences"]) if row["differences"] else {},
                   allocations={m.record_id: m.share for m in by_match[row["match_no"]] if m.share is not None}),
             by_match[row["match_no"]])
            for row in matches.iter_rows(named=True)]


def amount_sum(column: str | pl.Expr) -> pl.Expr:
    """The exact sum of an amount column (see domain/money.py): int64 sums wrap past 2**63 - 1."""
    return (pl.col(column) if isinstance(column, str) else column).cast(pl.Int128).sum()


def money_by(frame: pl.DataFrame, group: str | None = None) -> dict[Any, dict[str, CurrencyAmounts]]:
    """The money by currency of the frame's rows (MONEY_COLUMNS), for each value of the `group`
    column (all rows under None without one): summed in 128 bits at each currency's largest decimal
    places, so exact though amounts go up to 2**63 - 1."""
    keys = [group] if group else []
    grouped = frame.group_by(*keys, "currency", "decimal_places", "direction").agg(
        pl.len().alias("count"), amount_sum("amount").alias("sum"))
    money: dict[Any, dict[str, CurrencyAmounts]] = {}
    for row in grouped.iter_rows(named=True):
        credit = row["direction"] == "credit"
        one = CurrencyAmounts(row["currency"], int(row["count"]), int(row["sum"]) if credit else 0,
                              0 if credit else int(row["sum"]), int(row["decimal_places"]))
        at = row[group] if group else None
        money[at] = combined(money.get(at, {}), {one.currency: one})
    return money


def members_money(members: pl.DataFrame, more_than: int) -> dict[int, dict[str, CurrencyAmounts]]:
    """The money of each match of more than `more_than` records in a chunk's members, by match_no.
    A plan written before the members carried their amounts gives none."""
    if not set(MONEY_COLUMNS) <= set(members.columns):
        return {}
    sizes = members.group_by("match_no").len()
    return money_by(members.join(sizes.filter(pl.col("len") > more_than).select("match_no"), on="match_no",
                                 how="semi"), "match_no")


def stream_keys(frame: pl.DataFrame) -> list[str]:
    """The data streams the frame's records belong to, each once: whose users a write must know."""
    return frame["data_stream_key"].unique().to_list()


# Adopting a stream ------------------------------------------------------------------------------------

def reconciled_records(frame: pl.DataFrame, stream_key: str) -> pl.DataFrame:
    """The records of `stream_key` in an open-records frame that are reconciled (by other
    reconciliations: a stream joining this one has them open again), with what reopening needs."""
    return (frame.filter((pl.col("data_stream_key") == stream_key)
                         & (pl.col("status") == RecordStatus.RECONCILED.value))
            .select(*PERSISTED_RECORD_COLUMNS))


def reconciled_slices(reconciled: pl.DataFrame, size: int) -> Iterator[list[ReconciledRecord]]:
    """`reconciled_records`, `size` at a time: a big stream is never held as Python objects whole."""
    for part in reconciled.iter_slices(size):
        yield [ReconciledRecord(row["id"], row["data_stream_key"], frozenset(row["matched_in"] or ()))
               for row in part.iter_rows(named=True)]


# A dry run's answer -----------------------------------------------------------------------------------

def rule_matches(outcome: MatchOutcome, rule_id: int, sample_size: int,
                 conditions: Sequence[Condition] = ()) -> dict[str, Any]:
    """What one rule matched in an outcome of it and the rules before it: how many records the
    earlier rules took, its matches (and how many are proposed), its matched records, the first
    `sample_size` matches with their records of each side (ids ascending) and differences, and,
    when the outcome explains the rule, the candidate pairs each of its `conditions` alone excluded."""
    mine = outcome.matches.filter(pl.col("rule_id") == rule_id).sort("match_no")
    members = outcome.members.join(mine.select("match_no"), on="match_no", how="semi")
    sides = members.group_by("match_no", "side").agg(pl.col("record_id").sort()).sort("match_no")
    ids = {(row["match_no"], row["side"]): row["record_id"] for row in sides.iter_rows(named=True)}
    # A partial match's shares (domain/matching/partial.py): record -> the share it takes, by match.
    shared = (members.filter(pl.col("share").is_not_null()) if "share" in members.columns
              else pl.DataFrame(schema={"match_no": pl.Int64, "record_id": pl.Int64, "share": pl.Int64}))
    shares: dict[int, list[dict[str, int]]] = {}
    for match_no, record_id, share in shared.sort("match_no", "record_id").select(
            "match_no", "record_id", "share").iter_rows():
        shares.setdefault(match_no, []).append({"record_id": record_id, "amount": share})
    sample = [{"status": row["status"], "group_key": row["group_key"],
               "side_a_record_ids": ids.get((row["match_no"], "a"), []),
               "side_b_record_ids": ids.get((row["match_no"], "b"), []),
               "differences": json.loads(row["differences"]) if row["differences"] else {},
               "allocations": shares.get(row["match_no"])}
              for row in mine.head(sample_size).iter_rows(named=True)]
    explained = ({"excluded_by_condition": [
        {"condition": i, "field": c.field, "operator": c.operator.value, "excluded_pairs": excluded}
        for i, (c, excluded) in enumerate(zip(conditions, outcome.condition_exclusions, strict=True))]}
        if outcome.condition_exclusions is not None else {})
    return {"taken_by_earlier_rules": outcome.members.height - members.height,
            "matches": mine.height, "proposed": mine.filter(pl.col("status") == MatchStatus.PROPOSED.value).height,
            "partial_matches": shared["match_no"].n_unique(),
            "matched_records": members.height, "sample": sample, **explained}


# Records, for the investigation engine ----------------------------------------------------------------

def investigation_frame(records: Sequence[Record | OpenRecord]) -> pl.DataFrame:
    """Records as the investigation engine reads them (see domain/investigations): the engine's
    columns, and `reference` from the first metadata key of REFERENCE_KEYS present."""
    return pl.DataFrame({
        "id": [r.id for r in records], "amount": [r.amount for r in records],
        "direction": [r.direction.value for r in records], "date": [date.fromisoformat(r.date) for r in records],
        "currency": [r.currency for r in records], "description": [r.description for r in records],
        "external_id": [r.external_id for r in records],
        "reference": [next((str(r.metadata[k]) for k in REFERENCE_KEYS if r.metadata.get(k) is not None), None)
                      for r in records],
    }, schema={"id": pl.Int64, "amount": pl.Int64, "direction": pl.Utf8, "date": pl.Date, "currency": pl.Utf8,
               "description": pl.Utf8, "external_id": pl.Utf8, "reference": pl.Utf8})
