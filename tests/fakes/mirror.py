"""The analytics mirror, as `adapters/mirror.py` keeps it in S3, with the rows in memory instead of
Parquet parts: parts staged per (stream, import, part) and published by `publish`, a row-count
marker per (stream, import) left by each `summarize`, and one tombstone per deleted record.

The answers are the adapter's: a stream's count is the rows its markers name (the largest, should
a retry have seen more parts) less the tombstones of those imports, so nothing counts before
`summarize`, and a tombstone counts against its (stream, import) whatever record id it names; a
chunk written again replaces its part; a publish moves only what is staged (a retry moves
nothing); `summarize` reads only published parts and gives per-stream totals whenever it is given
more than one stream.
"""
from __future__ import annotations

import json
from collections.abc import Iterable
from types import SimpleNamespace
from typing import Any

from chalicelib.domain.clock import iso
from chalicelib.domain.ingestion import ImportTotals, StreamTotals
from chalicelib.domain.records import Record
from chalicelib.domain.tallies import MirroredMoney, money_of

Row = dict[str, Any]  # a Parquet row: the adapter's COLUMNS


def _row(record: Record) -> Row:
    return {"id": record.id, "data_stream_key": record.data_stream_key, "data_stream_id": record.data_stream_id,
            "date": record.date, "amount": record.amount, "currency": record.currency,
            "decimal_places": record.decimal_places, "direction": record.direction.value,
            "description": record.description, "external_id": record.external_id,
            "file_import_id": record.file_import_id, "metadata": _metadata(record), "created_at": iso(record.created_at)}


def _metadata(record: Record) -> str | None:
    return json.dumps(record.metadata, sort_keys=True, separators=(",", ":")) if record.metadata else None


class FakeAnalyticsMirror:
    def __init__(self) -> None:
        # (environment, stream key, import id, part): the part's rows
        self.staged: dict[tuple[str, str, int, int], tuple[Row, ...]] = {}
        self.published: dict[tuple[str, str, int, int], tuple[Row, ...]] = {}
        self.row_markers: dict[tuple[str, str, int], set[int]] = {}  # (environment, stream key, import id)
        self.tombstones: set[tuple[str, str, int, int]] = set()  # (environment, stream key, import id, record id)

    def write_part(self, environment: str, job_id: int, part: int, records: Iterable[Record]) -> None:
        """Stage the chunk's records as one part per stream (a chunk written again replaces it)."""
        by_stream: dict[str, list[Row]] = {}
        for record in records:
            by_stream.setdefault(record.data_stream_key, []).append(_row(record))
        for stream_key, rows in by_stream.items():
            self.staged[(environment, stream_key, job_id, part)] = tuple(rows)

    def publish(self, environment: str, job_id: int, stream_keys: Iterable[str]) -> int:
        """Move the import's staged parts of these streams into the mirror; how many moved."""
        moved = 0
        for stream_key in stream_keys:
            for key in sorted(k for k in self.staged if k[:3] == (environment, stream_key, job_id)):
                self.published[key] = self.staged.pop(key)
                moved += 1
        return moved

    def tombstone(self, environment: str, stream_key: str, job_id: int, record_id: int) -> None:
        self.tombstones.add((environment, stream_key, job_id, record_id))

    def count_records(self, environment: str, stream_key: str) -> int:
        return sum(max(counts) - sum(1 for t in self.tombstones if t[:3] == (env, stream, job))
                   for (env, stream, job), counts in self.row_markers.items()
                   if (env, stream) == (environment, stream_key))

    def stream_money(self, environment: str, stream_key: str) -> MirroredMoney:
        """Money of the published imports' rows, less the records their tombstones name."""
        published = self.published_imports(environment, stream_key)
        rows = [row for (env, stream, job, _), part in self.published.items()
                if (env, stream) == (environment, stream_key) and job in published for row in part
                if (env, stream, job, row["id"]) not in self.tombstones]
        return MirroredMoney(money_of(SimpleNamespace(**row) for row in rows), frozenset(published))

    def published_imports(self, environment: str, stream_key: str) -> dict[int, int]:
        return {job: max(counts) for (env, stream, job), counts in self.row_markers.items()
                if (env, stream) == (environment, stream_key)}

    def reindex(self, environment: str, stream_key: str) -> dict[int, int]:
        return self.published_imports(environment, stream_key)  # one copy of each marker here: nothing to mend

    def import_rows(self, environment: str, stream_key: str, job_id: int) -> Any | None:
        """The import's published rows (tombstoned ones too) as a lazy frame, once it has its marker."""
        import polars as pl

        if (environment, stream_key, job_id) not in self.row_markers:
            return None
        rows = [row for key in sorted(self.published) if key[:3] == (environment, stream_key, job_id)
                for row in self.published[key]]
        return pl.DataFrame(rows, infer_schema_length=None).lazy() if rows else None

    def forget_import(self, environment: str, job_id: int, stream_keys: Iterable[str]) -> None:
        """The import's parts, markers and tombstones in these streams."""
        streams = set(stream_keys)

        def of_import(key: tuple) -> bool:
            return key[0] == environment and key[1] in streams and key[2] == job_id
        self.staged = {k: v for k, v in self.staged.items() if not of_import(k)}
        self.published = {k: v for k, v in self.published.items() if not of_import(k)}
        self.row_markers = {k: v for k, v in self.row_markers.items() if not of_import(k)}
        self.tombstones = {k for k in self.tombstones if not of_import(k)}

    def forget_stream(self, environment: str, stream_key: str) -> None:
        """Everything of the stream, staged or published, markers and tombstones too."""
        def of_stream(key: tuple) -> bool:
            return key[:2] == (environment, stream_key)
        self.staged = {k: v for k, v in self.staged.items() if not of_stream(k)}
        self.published = {k: v for k, v in self.published.items() if not of_stream(k)}
        self.row_markers = {k: v for k, v in self.row_markers.items() if not of_stream(k)}
        self.tombstones = {k for k in self.tombstones if not of_stream(k)}

    def summarize(self, environment: str, job_id: int, stream_keys: Iterable[str]) -> ImportTotals:
        """Totals of the import's published rows; leaves each stream's row-count marker."""
        parts_of: dict[str, list[tuple[Row, ...]]] = {}
        for stream_key in stream_keys:
            parts = [self.published[k] for k in sorted(self.published) if k[:3] == (environment, stream_key, job_id)]
            self.row_markers.setdefault((environment, stream_key, job_id), set()).add(sum(map(len, parts)))
            parts_of[stream_key] = parts
        total = _totals([part for parts in parts_of.values() for part in parts])
        if len(parts_of) > 1:
            return ImportTotals(total, {key: _totals(parts) for key, parts in parts_of.items()})
        return ImportTotals(total)


def _totals(parts: list[tuple[Row, ...]]) -> StreamTotals:
    """Count, credits, debits, date range and currencies of published rows."""
    if not parts:
        return StreamTotals()
    rows = [row for part in parts for row in part]
    dates = [row["date"] for row in rows if row["date"] is not None]
    return StreamTotals(count=len(rows), credits=sum(r["amount"] for r in rows if r["direction"] == "credit"),
                        debits=sum(r["amount"] for r in rows if r["direction"] != "credit"),
                        date_min=min(dates, default=None), date_max=max(dates, default=None),
                        currencies=tuple(sorted({row["currency"] for row in rows})))
