"""An export's unreconciled records, read at the scale of millions: which records are open comes
from the open-records index, keys alone (about a tenth of reading whole items), and what each
record holds from the analytics mirror, whose rows never change once published: the id, stream,
date, amount and the rest a record was ingested with. Only a record the mirror does not hold yet
(its import still replicating, or mirrored before `created_at` was) is read from the table.

The rows come newest first, as `GET /records?status=unreconciled` lists them, a window of ids at
a time; the cursor after a window is the last id given, so a worker that stops continues below it.
An import's compressed Parquet is fetched once and kept while the windows still reach into its
block of ids (a block belongs to one import: ids descend, so an import the windows have passed
is dropped); each window decodes only the row groups it needs."""
from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from chalicelib.domain import export_frames
from chalicelib.domain.exports import COLUMNS, ExportKind, Page, record_row
from chalicelib.domain.records import RecordQuery, RecordStatus
from chalicelib.services.ports import Ports

WINDOW_ROWS = 20_000  # ids read, and rows written, per page: a few MB of CSV
CURSOR_PREFIX = "unreconciled-below:"
_AT = {column.name: at for at, column in enumerate(COLUMNS[ExportKind.RECORDS])}  # record_row's cells


def serves(query: RecordQuery, cursor: str | None) -> bool:
    """Whether this path lists what the query asks for: unreconciled records, by stream or dates (an
    external id is one guard's record or a few, an import one block of ids: the list route's own
    reads of those are quicker),
    from its start or from a cursor of its own (an export checkpointed by the list route's read,
    before this path existed, goes on with that read)."""
    return (query.status is RecordStatus.UNRECONCILED and query.external_id is None and query.file_import_id is None
            and (cursor is None or cursor.startswith(CURSOR_PREFIX)))


def pages(ports: Ports, environment: str, query: RecordQuery, cursor: str | None,
          window_rows: int = WINDOW_ROWS) -> Iterator[Page]:
    below = int(cursor.removeprefix(CURSOR_PREFIX)) if cursor else None
    ids = ports.records.unreconciled_ids(environment, query.data_stream_key, below)
    mirrored = _MirroredRows(ports, environment)
    while True:
        window = list(itertools.islice(ids, window_rows))
        full = len(window) == window_rows
        yield Page([], f"{CURSOR_PREFIX}{window[-1][0]}" if full else None, frame=mirrored.rows(window, query))
        if not full:
            return


@dataclass(frozen=True)
class _Import:
    stream_key: str
    job_id: int
    first_id: int
    last_id: int


class _MirroredRows:
    def __init__(self, ports: Ports, environment: str) -> None:
        self._ports = ports
        self._environment = environment
        self._imports: dict[str, list[_Import]] = {}  # by stream, read once
        self._frames: dict[_Import, Any] = {}  # lazy frames of the imports the windows are in

    def rows(self, window: list[tuple[int, str]], query: RecordQuery) -> Any:
        """The export rows of these ids that the query admits, as a frame of `record_row`'s columns,
        newest first."""
        if not window:
            return export_frames.page_of([], [], None)
        low, high = window[-1][0], window[0][0]
        by_stream: dict[str, list[int]] = {}
        for record_id, stream in window:
            by_stream.setdefault(stream, []).append(record_id)
        mirrored = []
        for stream, wanted in by_stream.items():
            imports = [frame for block in self._imports_of(stream) if block.last_id >= low and block.first_id <= high
                       if (frame := self._frame(block)) is not None]
            mirrored.append(export_frames.unreconciled_from_mirror(imports, low, high, wanted))
        for block in [b for b in self._frames if b.first_id >= low]:  # the windows below never reach it
            del self._frames[block]
        missing = {record_id for record_id, _ in window} - set().union(*map(export_frames.ids_of, mirrored))
        # Not in the mirror yet, or mirrored without a column the export has: from the table
        from_table = [record_row(r) for r in self._ports.records.find_many(self._environment, missing).values()
                      if r.status is RecordStatus.UNRECONCILED] if missing else []
        filtered = (query.file_import_id, query.date_from, query.date_to) != (None, None, None)  # the read did the rest
        return export_frames.page_of(mirrored, from_table, (lambda row: _admitted(row, query)) if filtered else None)

    def _imports_of(self, stream: str) -> list[_Import]:
        if stream not in self._imports:
            blocks = []
            for job_id in self._ports.mirror.published_imports(self._environment, stream):
                job = self._ports.ingestion_jobs.find(self._environment, job_id)
                if job is not None and (ids := job.record_ids) is not None:
                    blocks.append(_Import(stream, job_id, ids.start, ids.stop - 1))
            self._imports[stream] = blocks
        return self._imports[stream]

    def _frame(self, block: _Import) -> Any | None:
        if block not in self._frames:
            self._frames[block] = self._ports.mirror.import_rows(self._environment, block.stream_key, block.job_id)
        return self._frames[block]


def _admitted(row: tuple[Any, ...], query: RecordQuery) -> bool:
    """The query's filters on an export row (`record_row`'s columns)."""
    def cell(name: str) -> Any:
        return row[_AT[name]]

    return query.admits_values(cell("data_stream_key"), RecordStatus(cell("status")), cell("file_import_id"),
                               cell("external_id"), cell("date"))
