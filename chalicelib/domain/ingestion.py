"""Ingestion jobs (bulk requests and file imports): their statuses, the moves allowed between
them, per-item results, and the arithmetic of their progress.

Status table: a job moves only along JOB_STATUSES; the repository turns each move into a
conditional write whose allowed "from" states come from this table, so the rule lives here.

    pending -> processing -> replicating -> completed
       |           |             |
       +-----------+-------------+--> failed
       +-----------+--> cancelled

A job that ends early (cancelled, failed) is first marked with its `ending`: from then no chunk
is written or counted by its workers and it cannot complete, while the end gives each item it
never reached a result. The status then turns in the one write that requires the counts to be
final (processed = total), so a final status is never read with counts still moving.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import Enum
from typing import Any

from chalicelib.domain.errors import BrokenInvariant
from chalicelib.domain.records import Record
from chalicelib.domain.status_machine import StatusMachine


class JobStatus(str, Enum):
    PENDING = "pending"
    PROCESSING = "processing"
    REPLICATING = "replicating"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


JOB_STATUSES = StatusMachine({  # completed, failed and cancelled are finished
    JobStatus.PENDING: {JobStatus.PROCESSING, JobStatus.FAILED, JobStatus.CANCELLED},
    JobStatus.PROCESSING: {JobStatus.REPLICATING, JobStatus.COMPLETED, JobStatus.FAILED, JobStatus.CANCELLED},
    JobStatus.REPLICATING: {JobStatus.COMPLETED, JobStatus.FAILED},
})
CANCELLABLE = frozenset({JobStatus.PENDING, JobStatus.PROCESSING})
# A cancel answers 202 from these: a repeat on a job its cancel already ended only moves
# cancellation_requested_at (the spec: repeating the request is idempotent).
CANCEL_ANSWERED = CANCELLABLE | {JobStatus.CANCELLED}
ENDED_EARLY = frozenset({JobStatus.FAILED, JobStatus.CANCELLED})  # may have chunks nothing processed
STUCK_AFTER = timedelta(minutes=5)  # the default of settings.stuck_import_minutes (Limits.stuck_import_after)
# Rows per chunk (item i is in chunk i // rows): a chunk's results stay well inside one DynamoDB item
# (a bulk request keeps every row's result, a file import its problem rows). 500 rather than 250 a
# bulk chunk: half the saves, mirror parts and guard requests a row (bench/RESULTS.md, issue 30).
BULK_CHUNK_ROWS = 500
# A bulk request created when chunks were 250 rows (its item has no `bulk_chunk_rows`) keeps them: its
# done chunks, begin marks and stored results all count in those, across an upgrade too.
LEGACY_BULK_CHUNK_ROWS = 250
# A file import's chunk rows, fixed on the job when it is made (a job stored before has none: these).
FILE_CHUNK_ROWS = 500
# Chunks an execution has in flight: the next chunk's external_ids are claimed while this chunk's
# records are written (services/ingestion/chunk.py, `ChunkPipeline`). An execution begins chunk j
# only once it has saved chunk j - CHUNKS_IN_FLIGHT, so whoever counts chunk k is the first to reach
# chunk k + CHUNKS_IN_FLIGHT, and its save marks that one begun.
CHUNKS_IN_FLIGHT = 2
# The largest file an import takes (settings.max_import_bytes; Limits.max_import_bytes). Parsing
# holds the file and its rows in memory (about 17x a CSV's size): with the 3 GB that prepare gets,
# this leaves room. Larger files fail their import with a message, not run out of memory.
MAX_IMPORT_BYTES = 100 * 1024 * 1024


def bulk_request_status(status: JobStatus) -> JobStatus:
    """A bulk request's own view knows pending, processing, completed, failed and cancelled:
    `replicating` (records written, being published) is a file-import status and reads as processing."""
    return JobStatus.PROCESSING if status is JobStatus.REPLICATING else status


class JobSource(str, Enum):
    BULK_API = "bulk_api"
    CSV = "csv"
    NACHA = "nacha"
    BAI2 = "bai2"
    CAMT053 = "camt053"
    MT940 = "mt940"

    @property
    def is_statement(self) -> bool:
        """A bank statement format: its accounts route it to `bank_feed` streams."""
        return self in (JobSource.BAI2, JobSource.CAMT053, JobSource.MT940)


class OnConflict(str, Enum):
    SKIP = "skip"
    ERROR = "error"


class ItemStatus(str, Enum):
    SUCCESSFUL = "successful"
    FAILED = "failed"
    SKIPPED = "skipped"


@dataclass(frozen=True)
class ItemResult:
    index: int
    status: ItemStatus
    external_id: str | None = None
    record_id: int | None = None
    error: str | None = None
    line: int | None = None  # files: the line the row starts on

    @classmethod
    def written(cls, index: int, record: Record, line: int | None = None) -> ItemResult:
        """The result of a row whose record is in the table: it succeeded, whichever execution
        wrote it, and the record says what it is (its item may no longer be readable)."""
        return cls(index, ItemStatus.SUCCESSFUL, record.external_id, record.id, None, line)


@dataclass(frozen=True)
class ChunkRow:
    """One row of a chunk: its position in the job (record id = first_record_id + index), the
    raw item, and for files the line it came from, or the parse error that fails it as is."""
    index: int
    item: Any
    line: int | None = None
    error: str | None = None


@dataclass(frozen=True)
class ChunkOutcome:
    """What one processed chunk adds to its job's counters."""
    index: int
    results: tuple[ItemResult, ...]
    created_per_stream: dict[str, int]

    def count(self, status: ItemStatus) -> int:
        return sum(1 for r in self.results if r.status is status)


def records_per_stream(records: Iterable[Record]) -> dict[str, int]:
    """What a chunk adds to `created_per_stream`: its records in the table, by stream."""
    counts: dict[str, int] = {}
    for record in records:
        counts[record.data_stream_key] = counts.get(record.data_stream_key, 0) + 1
    return counts


@dataclass(frozen=True)
class StreamTotals:
    """Totals of the records an import wrote, read back from the analytics mirror once it is published."""
    count: int = 0
    credits: int = 0
    debits: int = 0
    date_min: str | None = None
    date_max: str | None = None
    currencies: tuple[str, ...] = ()


@dataclass(frozen=True)
class ImportTotals:
    """A job's totals; a bulk request that fed several streams keeps each stream's part too, since
    each stream's list of imports shows only what went into it."""
    total: StreamTotals
    per_stream: dict[str, StreamTotals] = field(default_factory=dict)  # empty when one stream was fed


MAX_IGNORED_UPLOADS = 20  # kept on an import; later ones are only logged


@dataclass(frozen=True)
class IgnoredUpload:
    """A file PUT to an import's upload URL once the import had started (or ended): S3 took it,
    but it was not imported. Kept on the import, since the PUT itself answered 200."""
    etag: str
    byte_size: int | None
    received_at: datetime
    message: str

    @classmethod
    def after(cls, status: JobStatus, etag: str, byte_size: int | None, received_at: datetime) -> IgnoredUpload:
        return cls(etag, byte_size, received_at,
                   f"a file was uploaded after the import was {status.value}: it was not imported (an upload "
                   "URL takes one file); create a new import for it")


@dataclass(frozen=True)
class IngestionJob:
    environment: str
    id: int
    source: JobSource
    status: JobStatus
    total_items: int
    on_conflict: OnConflict
    created_at: datetime
    payload_key: str | None = None
    filename: str | None = None
    body_hash: str | None = None
    idempotency_key: str | None = None
    processed_items: int = 0
    successful_items: int = 0
    failed_items: int = 0
    skipped_items: int = 0
    expected_records_count: int | None = None
    decimal_places: int | None = None
    data_stream_ids: tuple[int, ...] = ()
    started_at: datetime | None = None
    records_written_at: datetime | None = None
    completed_at: datetime | None = None
    last_progress_at: datetime | None = None
    cancellation_requested_at: datetime | None = None
    error_message: str | None = None
    error_details: dict[str, Any] | None = None
    first_record_id: int | None = None
    done_chunks: frozenset[int] = frozenset()
    # The highest chunk an execution began, marked before that chunk writes anything (chunks begin
    # in order; a save marks one CHUNKS_IN_FLIGHT ahead): a chunk up to it that is not done may hold
    # records already.
    chunks_begun: int | None = None
    # The chunks an execution began while another had begun them already (a retry, or a second
    # execution of the job beside the first): a chunk in it may have records another execution
    # wrote, which a run may have claimed since, so none of its writers puts a record over one.
    chunks_begun_again: frozenset[int] = frozenset()
    created_per_stream: dict[str, int] = field(default_factory=dict)
    counts_rolled_up: bool = False
    # Files only: where the upload lands, the stream it feeds, how to read it, and how many
    # chunks `prepare` split it into (None until the file is parsed).
    file_key: str | None = None
    data_stream_key: str | None = None
    options: dict[str, Any] = field(default_factory=dict)
    chunk_count: int | None = None
    restarts: int = 0  # by the stuck-job sweeper (each names its execution)
    # The sweeper's restarts since the job last moved, and how far it had got at the last one: a
    # job that moves between restarts is slow, not stuck, and is restarted until it ends.
    idle_restarts: int = 0
    processed_at_restart: int = 0
    aggregates: ImportTotals | None = None  # totals of the records written, set when the job ends
    # The early end (cancelled or failed) the job is being brought to, and the fields that end sets
    # (error_message, error_details); None while nothing ends it (see the module's docstring).
    ending: JobStatus | None = None
    ending_fields: dict[str, Any] = field(default_factory=dict)
    # Files only: the etag of the upload the import takes (the last one while it was pending, else
    # the first seen; the file it read, once it read one written before its start), and the files
    # whose events came after it started (`not_imported_uploads`: those it did not take).
    upload_etag: str | None = None
    ignored_uploads: tuple[IgnoredUpload, ...] = ()
    # Bulk requests only: the rows of a chunk, fixed when the job is made (None: LEGACY_BULK_CHUNK_ROWS).
    bulk_chunk_rows: int | None = None
    # File imports only: the rows of a chunk, fixed when the job is made (None: FILE_CHUNK_ROWS), so that a
    # prepare run again after the default changed cuts the same chunks as the first.
    file_chunk_rows: int | None = None

    @property
    def progress(self) -> int:
        if self.total_items == 0:
            return 100 if self.finished else 0
        return min(100, self.processed_items * 100 // self.total_items)

    @property
    def finished(self) -> bool:
        return self.status in JOB_STATUSES.finished

    @property
    def not_imported_uploads(self) -> tuple[IgnoredUpload, ...]:
        """The files PUT to its upload URL that it did not import: a PUT made before the start whose
        event came after it is listed too, until the import reads it as its file."""
        taken = (self.upload_etag or "").strip('"')
        return tuple(u for u in self.ignored_uploads if u.etag.strip('"') != taken)

    @property
    def writes_no_more(self) -> bool:
        """Whether an execution must write no more of its rows: the job ended, is being ended, a cancel
        was asked for, or its rows are all written (replicating: a cancel is too late there)."""
        return (self.finished or self.ending is not None or self.cancellation_requested_at is not None
                or self.status is JobStatus.REPLICATING)

    @property
    def settled(self) -> bool:
        """Whether nothing of the job writes any more, records, mirror parts or a statement's days: it
        completed, or ended early before a chunk began or with its end settled (`counts_rolled_up`)."""
        return self.status is JobStatus.COMPLETED or (
            self.status in ENDED_EARLY and (self.chunks_begun is None or self.counts_rolled_up))

    @property
    def is_file(self) -> bool:
        return self.source is not JobSource.BULK_API

    @property
    def bulk_payload_key(self) -> str:
        """Where a bulk request's items are kept: every bulk request is created with one."""
        if self.payload_key is None:
            raise BrokenInvariant(f"ingestion job {self.id} has no payload_key: it is not a bulk request")
        return self.payload_key

    @property
    def import_file_key(self) -> str:
        """Where a file import's file is (or is to be uploaded): every file import is created with one."""
        if self.file_key is None:
            raise BrokenInvariant(f"ingestion job {self.id} has no file_key: it is not a file import")
        return self.file_key

    @property
    def import_stream_key(self) -> str:
        """The data stream a file import feeds: every file import is created with one."""
        if self.data_stream_key is None:
            raise BrokenInvariant(f"ingestion job {self.id} has no data_stream_key: it is not a file import")
        return self.data_stream_key

    def record_id(self, index: int) -> int:
        """The id of the record item `index` becomes, `first_record_id + index`: known once the
        job has reserved its block of record ids, which it does before it writes any item."""
        if self.first_record_id is None:
            raise BrokenInvariant(f"ingestion job {self.id} has reserved no record ids yet")
        return self.first_record_id + index

    @property
    def record_ids(self) -> range | None:
        """The block of ids the job reserved for its records (one at least), once it has."""
        if self.first_record_id is None:
            return None
        return range(self.first_record_id, self.first_record_id + max(self.total_items, 1))

    def may_have_written(self, chunk: int) -> bool:
        """Whether some of the chunk's records may be in the table already (it was begun before)."""
        return self.chunks_begun is not None and chunk <= self.chunks_begun

    @property
    def chunk_rows(self) -> int:
        if self.is_file:
            return self.file_chunk_rows or FILE_CHUNK_ROWS
        return self.bulk_chunk_rows or LEGACY_BULK_CHUNK_ROWS

    def chunk_range(self, chunk: int) -> range:
        """The item indexes of a chunk."""
        return range(chunk * self.chunk_rows, min((chunk + 1) * self.chunk_rows, self.total_items))

    @property
    def chunk_numbers(self) -> range:
        return range(-(-self.total_items // self.chunk_rows))

    @property
    def parsing(self) -> bool:
        """True until rows start landing; a file's totals are unknown while it is parsed."""
        return self.is_file and self.status in (JobStatus.PENDING, JobStatus.PROCESSING) and not self.done_chunks

    @property
    def heartbeat(self) -> datetime:
        """When the job last showed it was alive."""
        return self.last_progress_at or self.started_at or self.created_at

    def stuck(self, now: datetime) -> bool:
        return self.status is JobStatus.PROCESSING and now - self.heartbeat > STUCK_AFTER

    def idle_restarts_after_next(self) -> int:
        """What `idle_restarts` becomes with one more restart: one more, unless rows were processed
        since the last restart (then it starts again at 1)."""
        return self.idle_restarts + 1 if self.processed_items == self.processed_at_restart else 1

    def totals_in_stream(self, stream_key: str) -> StreamTotals:
        """What the job wrote into one stream (known once it ended): a bulk request, and a bank
        statement routed by account, may have fed several; any other file feeds one."""
        totals = self.aggregates
        if totals is None:
            return StreamTotals()
        if totals.per_stream:
            return totals.per_stream.get(stream_key, StreamTotals())
        if self.is_file:
            return totals.total
        return totals.total if set(self.created_per_stream) == {stream_key} else StreamTotals()


@dataclass(frozen=True)
class StoredFile:
    """A file to import as one read found it: its bytes, its ETag (unquoted, as S3's events give it)
    and when it was written."""
    body: bytes
    etag: str
    last_modified: datetime


def chunk_ranges(total: int, size: int) -> list[range]:
    return [range(start, min(start + size, total)) for start in range(0, total, size)]
