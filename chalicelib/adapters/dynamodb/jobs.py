"""Ingestion jobs in DynamoDB: the job item, its per-chunk results, and idempotency keys.

Every status change is a conditional update whose allowed "from" statuses come from
`domain.ingestion.JOB_STATUSES`; every counter change is claimed per chunk, so a chunk that
is processed twice (SQS redelivery, a crashed Lambda) is counted once.
"""
from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

from chalicelib.adapters.dynamodb import keys
from chalicelib.adapters.dynamodb.table import (
    Condition,
    ConditionFailed,
    DynamoTable,
    StatusMoves,
    decode_cursor,
    deserialize,
    encode_key,
    serialize,
    status_in,
)
from chalicelib.domain.clock import iso, parse_iso, parse_optional_iso, utc_now
from chalicelib.domain.errors import BadRequest, NotFound, TransitionRefused
from chalicelib.domain.ingestion import (
    CHUNKS_IN_FLIGHT,
    JOB_STATUSES,
    MAX_IGNORED_UPLOADS,
    ChunkOutcome,
    IgnoredUpload,
    ImportTotals,
    IngestionJob,
    ItemResult,
    ItemStatus,
    JobSource,
    JobStatus,
    OnConflict,
    StreamTotals,
)

# DynamoDB keeps idempotency keys at least this long (TTL deletes them some time after).
IDEMPOTENCY_KEY_LIFETIME = timedelta(hours=48)


def _result_row(result: ItemResult) -> list[Any]:
    return [result.index, result.status.value, result.external_id, result.record_id, result.error, result.line]


# A bulk request's results item keeps its rows as one JSON text (`[[index, status, external_id,
# record_id, error, line], ...]`, trailing empty fields left out) rather than a list of lists: written
# and read whole, one text is a single attribute for the client to encode and the table to store,
# where 500 rows of six values each were walked value by value (bench/RESULTS.md, issue 30, fifth
# pass). About as many bytes as the list (no more write units); a text that would grow the item past
# RESULTS_TEXT_LIMIT (quotes and control characters escaped) keeps the list. Both read back the same.
RESULTS_TEXT_LIMIT = 330_000


def _results_attribute(results: tuple[ItemResult, ...]) -> str | list[list[Any]]:
    rows = [_result_row(r) for r in results]
    for row in rows:
        while row[-1] is None:
            row.pop()
    text = json.dumps(rows, ensure_ascii=False, separators=(",", ":"))
    return text if len(text.encode()) <= RESULTS_TEXT_LIMIT else [_result_row(r) for r in results]


def result_rows(item: dict[str, Any], attribute: str) -> list[list[Any]]:
    """A results item's rows of `attribute` ("results" or "problems"): a list, or JSON text of one."""
    value = item.get(attribute)
    if isinstance(value, str):
        return json.loads(value)
    return value or []


def _problem_rows(item: dict[str, Any]) -> list[list[Any]]:
    """A results item's rows that failed or were skipped: kept apart for a file import; a bulk
    request's are among its results (kept apart too by chunks stored before 500-row chunks)."""
    if "problems" in item or "results" not in item:
        return result_rows(item, "problems")
    return [row for row in result_rows(item, "results") if row[1] != ItemStatus.SUCCESSFUL.value]


def _result_of(row: list[Any]) -> ItemResult:
    row = [*row, None, None, None, None][:6] if len(row) < 6 else row
    return ItemResult(index=row[0], status=ItemStatus(row[1]), external_id=row[2], record_id=row[3], error=row[4],
                      line=row[5])



def _results_listing(job: IngestionJob, listing: str) -> str:
    return f"{keys.ingestion_job(job.environment, job.id)['pk']}#{keys.RESULTS_PREFIX}{listing}"


class IngestionJobRepository(StatusMoves[IngestionJob, JobStatus]):
    statuses, noun, key = JOB_STATUSES, "ingestion job", staticmethod(keys.ingestion_job)

    def __init__(self, table: DynamoTable) -> None:
        self._table = table

    # Creating ------------------------------------------------------------------------------

    def add(self, job: IngestionJob) -> None:
        """Write a new job; writing the same job again (a retried request) changes nothing."""
        try:
            self._table.put_new(self._to_item(job))
        except ConditionFailed:
            pass

    def claim_idempotency_key(self, environment: str, key: str, job_id: int, body_hash: str) -> tuple[int, str]:
        """Bind `key` to `job_id` unless it is bound already; return the (job id, body hash) it is bound to."""
        now = utc_now()
        item = {**keys.idempotency_key(environment, key), "entity": "idempotency_key", "job_id": job_id,
                "body_hash": body_hash, "created_at": iso(now),
                "expires_at": int((now + IDEMPOTENCY_KEY_LIFETIME).timestamp())}
        try:
            # An expired key that TTL has not removed yet may be bound again.
            self._table.put(item, condition="attribute_not_exists(pk) OR expires_at < :now",
                            values={":now": int(now.timestamp())})
            return job_id, body_hash
        except ConditionFailed:
            existing = self._table.get(keys.idempotency_key(environment, key))
            if existing is None:  # expired and removed in between: try once more
                return self.claim_idempotency_key(environment, key, job_id, body_hash)
            return existing["job_id"], existing["body_hash"]

    # Reading -------------------------------------------------------------------------------

    def get(self, environment: str, job_id: int) -> IngestionJob:
        item = self._table.get(keys.ingestion_job(environment, job_id))
        if item is None:
            raise NotFound(f"file import {job_id} not found")  # a bulk request is one too
        return self._from_item(item)

    def find(self, environment: str, job_id: int) -> IngestionJob | None:
        item = self._table.get(keys.ingestion_job(environment, job_id))
        return self._from_item(item) if item else None

    def results(self, environment: str, job_id: int, problems_only: bool = False) -> list[ItemResult]:
        """Every item's result in submission order (bulk requests), or only those that failed or
        were skipped (all a file import keeps)."""
        items = self._table.query_all(keys.BASE_TABLE, keys.ingestion_job(environment, job_id)["pk"],
                                      sort_prefix=keys.RESULTS_PREFIX,
                                      projection=("results", "problems") if problems_only else "results")
        rows = (row for item in items
                for row in (_problem_rows(item) if problems_only else result_rows(item, "results")))
        return sorted(map(_result_of, rows), key=lambda r: r.index)

    @staticmethod
    def results_cursor(job: IngestionJob, listing: str, after: int) -> str:
        """An opaque cursor of a job's results listing (`listing` names its filter), resuming after an index."""
        return encode_key(serialize({"listing": _results_listing(job, listing), "after": str(after)}))

    @staticmethod
    def results_after(job: IngestionJob, listing: str, cursor: str) -> int:
        key = deserialize(decode_cursor(cursor, "listing", _results_listing(job, listing), ("listing", "after")))
        after = key["after"]
        if not (after.isascii() and after.isdigit() and len(after) <= 12 and int(after) < max(job.total_items, 1)):
            raise BadRequest("cursor does not belong to this list; pass the next_cursor of a previous page unchanged")
        return int(after)

    def result_chunks(self, job: IngestionJob, from_chunk: int, page_size: int = 4
                      ) -> Iterator[tuple[int, list[ItemResult]]]:
        """The stored results of each chunk from `from_chunk` on, in chunk order, read a few chunks at
        a time: every row's (bulk requests) or the problem rows' only (file imports)."""
        attribute = "problems" if job.is_file else "results"
        listing = keys.ingestion_job(job.environment, job.id)["pk"]
        first = keys.job_results(job.environment, job.id, from_chunk)["sk"]
        for item in self._table.query_between(keys.BASE_TABLE, listing, first, keys.LAST_RESULTS_SK,
                                              page_size=page_size, projection=("sk", attribute)):
            yield (int(item["sk"].removeprefix(keys.RESULTS_PREFIX)),
                   [_result_of(r) for r in result_rows(item, attribute)])

    # Moving (`move` is StatusMoves') ---------------------------------------------------------

    def reserve_record_ids(self, job: IngestionJob, first_id: int) -> IngestionJob:
        """Fix the job's block of record ids once; a retry keeps the first block it got."""
        try:
            item = self._table.update(keys.ingestion_job(job.environment, job.id), "SET first_record_id = :f",
                                      condition="attribute_not_exists(first_record_id)",
                                      values={":f": first_id}, return_new=True)
            return self._from_item(item)
        except ConditionFailed:
            return self.get(job.environment, job.id)

    def begin_chunk(self, job: IngestionJob, chunk: int, through: int | None = None) -> bool | None:
        """Mark a chunk begun (and those after it up to `through`, which the caller begins next),
        before it writes anything; whether an execution may have begun it before (and written some
        of its records). Chunks begin in order, so the mark is the highest chunk begun: one small
        conditional update, which a first pass wins. A chunk begun again is added to
        `chunks_begun_again` (a second write, on a retry only), which tells an execution that began it
        first, and still writes, that it is not alone.

        None when the job no longer runs (ended, being ended, or gone): nothing of the chunk may be
        written. Both marks land only while it is processing with no end marked, so an end, which
        marks itself first, either sees the chunk begun (and notes its records' blocks) or refuses the
        begin: an execution that read the job before the end cannot write rows nobody looks for."""
        key = keys.ingestion_job(job.environment, job.id)
        running, values = status_in((JobStatus.PROCESSING,))
        running += " AND attribute_not_exists(#ending)"
        names = {"#status": "status", "#ending": "ending"}
        try:
            self._table.update(key, "SET chunks_begun = :through",
                               condition=f"{running} AND (attribute_not_exists(chunks_begun) OR chunks_begun < :n)",
                               names=names, values={**values, ":n": chunk, ":through": max(chunk, through or chunk)})
            return False
        except ConditionFailed:
            pass
        try:
            self._table.update(key, "ADD chunks_begun_again :chunk", condition=running,
                               names=names, values={**values, ":chunk": {chunk}})
        except ConditionFailed:
            return None
        return True

    def chunks_begun_again(self, environment: str, job_id: int) -> frozenset[int] | None:
        """The job's `chunks_begun_again` alone (the item also holds every chunk done: a projected
        read, consistent); None when the job is gone."""
        found = self._table.get_many([keys.ingestion_job(environment, job_id)], projection=("pk", "chunks_begun_again"))
        return frozenset(int(n) for n in found[0].get("chunks_begun_again") or ()) if found else None

    def save_chunk(self, job: IngestionJob, outcome: ChunkOutcome, unprocessed: bool = False) -> IngestionJob:
        return self._save_chunk(job, outcome, unprocessed, begin_ahead=False)[0]

    def save_chunk_and_begin_ahead(self, job: IngestionJob, outcome: ChunkOutcome) -> tuple[IngestionJob, bool]:
        """`save_chunk`, marking chunk `outcome.index + CHUNKS_IN_FLIGHT` begun in the same update
        (one write less per chunk than `begin_chunk`); and whether this call counted the chunk, so
        marked that one: the caller alone may then take it as never begun before."""
        return self._save_chunk(job, outcome, False, begin_ahead=True)

    def _save_chunk(self, job: IngestionJob, outcome: ChunkOutcome, unprocessed: bool,
                    begin_ahead: bool) -> tuple[IngestionJob, bool]:
        """Store a chunk's results, then count it once: the count is claimed with the chunk's
        number, so a chunk processed again is not counted again. `unprocessed`: the results of a
        chunk that a job which ended early never finished (its rows with a record succeeded, the
        others failed), counted once it ended.

        A late execution and the end of the job may both reach a chunk: whichever stores its
        results first wins, and what is counted is what is stored, so results and totals agree."""
        # The end of a job never overwrites results a late execution stored; a late execution
        # never overwrites the "not processed" results the end of the job stored.
        if unprocessed:
            outcome, _ = self.keep_unprocessed_results(job, outcome)
        else:
            try:
                self._table.put(self._results_item(job, outcome, False), condition="attribute_not_exists(#u)",
                                names={"#u": "unprocessed"})
            except ConditionFailed:
                return self.get(job.environment, job.id), False
        return self._count_chunk(job, outcome, unprocessed, begin_ahead)

    def keep_unprocessed_results(self, job: IngestionJob, outcome: ChunkOutcome) -> tuple[ChunkOutcome, bool]:
        """The results that stand for a chunk the job's end found unfinished: these, stored now
        (True), or those stored before (False: by a late execution, which wrote its records first,
        or by an earlier try of the end), with the outcome's records per stream (the caller's to
        count again from the results that stand)."""
        try:
            self._table.put(self._results_item(job, outcome, True), condition="attribute_not_exists(pk)")
        except ConditionFailed:
            return self._stored_outcome(job, outcome.index, outcome.created_per_stream), False
        return outcome, True

    @staticmethod
    def _results_item(job: IngestionJob, outcome: ChunkOutcome, unprocessed: bool) -> dict[str, Any]:
        return {
            **keys.job_results(job.environment, job.id, outcome.index), "entity": "job_results",
            # Every row's result is shown by a bulk request only; a file import shows its problems,
            # and a result per row would cost about 40 bytes, a write unit per 25 rows, for nobody.
            "results": _results_attribute(outcome.results) if job.source is JobSource.BULK_API else None,
            # A file import's rows that failed or were skipped: read alone, they keep its status cheap
            # to poll (a million-row import has a thousand result items). A bulk request's are among
            # its results, and not kept twice, which keeps a chunk of 500 inside one item.
            "problems": [_result_row(r) for r in outcome.results if r.status is not ItemStatus.SUCCESSFUL] or None
            if job.is_file else None,
            "unprocessed": True if unprocessed else None,
        }

    def _count_chunk(self, job: IngestionJob, outcome: ChunkOutcome, unprocessed: bool,
                     begin_ahead: bool) -> tuple[IngestionJob, bool]:
        names = {"#done": "done_chunks", "#status": "status", "#ending": "ending"}
        # A worker counts only while nothing ends the job; the end counts the chunks it never reached
        # before the status turns (see domain/ingestion.py).
        allowed, statuses = status_in(_UNFINISHED if unprocessed else (JobStatus.PROCESSING,))
        allowed += " AND attribute_exists(#ending)" if unprocessed else " AND attribute_not_exists(#ending)"
        values: dict[str, Any] = {
            **statuses,
            ":chunk": {outcome.index}, ":chunk_number": outcome.index, ":now": iso(utc_now()),
            ":processed": len(outcome.results), ":successful": outcome.count(ItemStatus.SUCCESSFUL),
            ":failed": outcome.count(ItemStatus.FAILED), ":skipped": outcome.count(ItemStatus.SKIPPED),
        }
        adds = ["#done :chunk", "processed_items :processed", "successful_items :successful",
                "failed_items :failed", "skipped_items :skipped"]
        sets = ["last_progress_at = :now"]
        if begin_ahead:  # whoever counts this chunk is the first to reach the one CHUNKS_IN_FLIGHT ahead
            sets.append("chunks_begun = :ahead")
            values[":ahead"] = outcome.index + CHUNKS_IN_FLIGHT
        # ADD works on top-level attributes only; per-stream counts sit in a map, so SET them.
        for i, (stream_key, created) in enumerate(sorted(outcome.created_per_stream.items())):
            names[f"#s{i}"] = stream_key
            values[f":c{i}"] = created
            sets.append(f"#created.#s{i} = if_not_exists(#created.#s{i}, :zero) + :c{i}")
        if outcome.created_per_stream:
            names["#created"] = "created_per_stream"
            values[":zero"] = 0
        try:
            item = self._table.update(
                keys.ingestion_job(job.environment, job.id),
                f"SET {', '.join(sets)} ADD {', '.join(adds)}",
                # Counted once; and never after the job ended (a late, zombie execution), so that
                # what the end of the job counted and replicated stays the whole truth.
                condition=f"NOT contains(#done, :chunk_number) AND {allowed}",
                names=names, values=values, return_new=True,
            )
        except ConditionFailed:  # counted by an earlier delivery, or the job ended
            return self.get(job.environment, job.id), False
        return self._from_item(item), True

    def _stored_outcome(self, job: IngestionJob, chunk: int, created: dict[str, int]) -> ChunkOutcome:
        """A chunk's outcome as its stored results tell it (a file import keeps its problem rows
        only: the chunk's other rows succeeded), with the records per stream the caller found in
        the table (the results do not say their streams)."""
        stored = self._table.get(keys.job_results(job.environment, job.id, chunk)) or {}
        if job.source is JobSource.BULK_API:
            return ChunkOutcome(chunk, tuple(_result_of(r) for r in result_rows(stored, "results")), created)
        problems = {r.index: r for r in map(_result_of, result_rows(stored, "problems"))}
        results = tuple(problems.get(i) or ItemResult(i, ItemStatus.SUCCESSFUL, None, None, None, None)
                        for i in job.chunk_range(chunk))
        return ChunkOutcome(chunk, results, created)

    def record_preparation(self, job: IngestionJob, chunk_count: int, expected: int, first_id: int,
                           decimal_places: int | None = None) -> IngestionJob:
        """A parsed file: how many chunks and rows it has, its block of record ids and the decimal
        places of its amounts (set once)."""
        try:
            item = self._table.update(
                keys.ingestion_job(job.environment, job.id),
                "SET chunk_count = :chunks, expected_records_count = :expected, total_items = :expected, "
                "first_record_id = :first, last_progress_at = :now, decimal_places = :places",
                # A job being ended has its rows counted already: its total no longer moves.
                condition="attribute_not_exists(chunk_count) AND attribute_not_exists(ending)",
                values={":chunks": chunk_count, ":expected": expected, ":first": first_id, ":now": iso(utc_now()),
                        ":places": decimal_places},
                return_new=True, keep_nulls=True,
            )
        except ConditionFailed:
            return self.get(job.environment, job.id)  # an earlier delivery prepared it
        return self._from_item(item)

    def list_of_stream(self, environment: str, stream_key: str, limit: int,
                       cursor: str | None) -> tuple[list[IngestionJob], str | None]:
        """The stream's file imports and the bulk requests that fed it (through their links), newest first."""
        page = self._table.query_page(keys.GSI1, keys.jobs_of_stream_pk(environment, stream_key), limit=limit,
                                      cursor=cursor)
        linked = {(i["pk"], "JOB") for i in page.items if i.get("entity") == "job_stream_link"}
        jobs = {(i["pk"], i["sk"]): i for i in self._table.get_many({"pk": pk, "sk": sk} for pk, sk in linked)}
        items = [jobs.get((i["pk"], "JOB")) if i.get("entity") == "job_stream_link" else i for i in page.items]
        return [self._from_item(i) for i in items if i is not None], page.cursor

    def link_to_streams(self, job: IngestionJob, stream_keys: list[str]) -> None:
        """List a bulk request among the imports of each stream it feeds (once per stream). The
        links made already are read first: a failed conditional put would cost a write unit, and
        each delivery of the job links again (a stream may have been created since the request)."""
        links = {k: keys.job_stream_link(job.environment, job.id, k) for k in stream_keys}
        made = {item["sk"] for item in self._table.get_many(({"pk": link["pk"], "sk": link["sk"]}
                                                             for link in links.values()), projection=("pk", "sk"))}
        for stream_key in stream_keys:
            if links[stream_key]["sk"] in made:
                continue
            try:
                self._table.put_new({**keys.job_stream_link(job.environment, job.id, stream_key),
                                     "entity": "job_stream_link"})
            except ConditionFailed:
                pass  # linked by an earlier delivery

    def linked_streams(self, job: IngestionJob) -> list[str]:
        """The streams `link_to_streams` listed the job among the imports of (one consistent Query)."""
        pk = keys.ingestion_job(job.environment, job.id)["pk"]
        links = self._table.query_all(keys.BASE_TABLE, pk, sort_prefix="DS#", projection=("sk",), consistent=True)
        return sorted(str(item["sk"]).removeprefix("DS#") for item in links)

    def active(self) -> list[IngestionJob]:
        """Jobs of every environment that are pending or processing (for the stuck-job sweeper)."""
        items = self._table.index_items(keys.GSI2, keys.ACTIVE_JOBS_PK)
        return [self._from_item(i) for i in items]

    def active_in(self, environment: str) -> list[IngestionJob]:
        """The environment's pending and processing jobs, oldest first (the overview's imports in progress)."""
        entries = list(self._table.query_all(keys.GSI2, keys.ACTIVE_JOBS_PK, sort_prefix=f"{environment}#"))
        found = {(i["pk"], i["sk"]): i for i in self._table.get_many({"pk": e["pk"], "sk": e["sk"]} for e in entries)}
        items = (found.get((e["pk"], e["sk"])) for e in entries)
        return [self._from_item(i) for i in items if i is not None and i.get("gsi2pk") == keys.ACTIVE_JOBS_PK]

    def count_restart(self, job: IngestionJob, counted: bool = True) -> bool:
        """Claim one restart of a stuck job: False when its heartbeat or restarts moved meanwhile
        (it came back, or another sweeper restarted it). Not `counted`: its restarts stay.
        Counted: how far it had got, and its restarts since it last moved (the condition holds its
        counts as `job` has them: every chunk counted beats the heartbeat)."""
        return self._claim_restart(job, job.restarts, job.last_progress_at, counted, counted_fields={
            "idle_restarts": job.idle_restarts_after_next(), "processed_at_restart": job.processed_items})

    def move(self, job: IngestionJob, /, target: JobStatus, **fields: object) -> IngestionJob:
        """StatusMoves' move; the job's totals, when it ends with them, stored as `set_aggregates` keeps them."""
        totals = fields.get("aggregates")
        if isinstance(totals, ImportTotals):
            fields["aggregates"] = _totals_attribute(totals)
        return super().move(job, target, **fields)

    def _move_condition(self, target: JobStatus) -> Condition:
        """A job being ended moves only to its ending; a finished status needs its counts final."""
        names = {"#ending": "ending", "#es": "status"}
        if target not in JOB_STATUSES.finished:
            return Condition("attribute_not_exists(#ending)", {"#ending": "ending"})
        return Condition("(attribute_not_exists(#ending) OR #ending.#es = :ending) AND processed_items = total_items",
                         names, {":ending": target.value})

    def begin_ending(self, job: IngestionJob, target: JobStatus, fields: dict[str, Any]) -> IngestionJob:
        """Mark the early end (cancelled, failed) the job is brought to, with the fields it sets,
        once, while its status allows that end; the job as stored (marked by whoever came first)."""
        allowed, values = status_in(JOB_STATUSES.sources_of(target))
        try:
            item = self._table.update(
                keys.ingestion_job(job.environment, job.id), "SET #ending = :ending",
                condition=f"{allowed} AND attribute_not_exists(#ending)",
                names={"#status": "status", "#ending": "ending"},
                values={":ending": {"status": target.value, "fields": _storable_fields(fields)}, **values},
                return_new=True, keep_nulls=True,
            )
        except ConditionFailed:
            return self.get(job.environment, job.id)
        return self._from_item(item)

    def accept_upload(self, job: IngestionJob, etag: str) -> IngestionJob:
        """Record the etag of the upload the import takes: any while it is pending (the last one is
        the file it reads), else only the first seen (a file the service put there itself)."""
        try:
            item = self._table.update(
                keys.ingestion_job(job.environment, job.id), "SET upload_etag = :etag",
                condition="attribute_exists(pk) AND (#status = :pending OR attribute_not_exists(upload_etag))",
                names={"#status": "status"}, values={":etag": etag, ":pending": JobStatus.PENDING.value},
                return_new=True)
        except ConditionFailed:
            return self.get(job.environment, job.id)
        return self._from_item(item)

    def take_upload_read(self, job: IngestionJob, etag: str) -> IngestionJob:
        """The file a started import read is this one (a PUT before its start whose event came late):
        its etag replaces the one the job held as read (`job`), never another written since."""
        try:
            item = self._table.update(
                keys.ingestion_job(job.environment, job.id), "SET upload_etag = :etag",
                condition="attribute_exists(pk) AND upload_etag = :seen",
                values={":etag": etag, ":seen": job.upload_etag}, return_new=True)
        except ConditionFailed:
            return self.get(job.environment, job.id)
        return self._from_item(item)

    def note_ignored_upload(self, job: IngestionJob, upload: IgnoredUpload) -> IngestionJob:
        """Keep a file that came after the import started, once per file (its etag: an event
        delivered again adds nothing), at most MAX_IGNORED_UPLOADS of them."""
        entry = {"etag": upload.etag, "byte_size": upload.byte_size, "received_at": iso(upload.received_at),
                 "message": upload.message}
        try:
            item = self._table.update(
                keys.ingestion_job(job.environment, job.id),
                "SET ignored_uploads = list_append(if_not_exists(ignored_uploads, :none), :one) "
                "ADD ignored_upload_etags :etag",
                condition="attribute_exists(pk) AND (attribute_not_exists(ignored_upload_etags) OR "
                          "(NOT contains(ignored_upload_etags, :etag_value) AND size(ignored_uploads) < :cap))",
                values={":none": [], ":one": [entry], ":etag": {upload.etag or "-"}, ":etag_value": upload.etag or "-",
                        ":cap": MAX_IGNORED_UPLOADS},
                return_new=True, keep_nulls=True,
            )
        except ConditionFailed:
            return self.get(job.environment, job.id)
        return self._from_item(item)

    def set_aggregates(self, job: IngestionJob, aggregates: ImportTotals) -> None:
        self._table.update(keys.ingestion_job(job.environment, job.id), "SET aggregates = :a",
                           values={":a": _totals_attribute(aggregates)}, keep_nulls=True)

    def mark_counts_rolled_up(self, job: IngestionJob) -> None:
        self._table.update(keys.ingestion_job(job.environment, job.id), "SET counts_rolled_up = :t",
                           values={":t": True})

    def request_cancellation(self, job: IngestionJob, cancellable: tuple[JobStatus, ...]) -> IngestionJob:
        allowed, values = status_in(cancellable)
        try:
            item = self._table.update(
                keys.ingestion_job(job.environment, job.id), "SET cancellation_requested_at = :now",
                condition=allowed, names={"#status": "status"},
                values={":now": iso(utc_now()), **values}, return_new=True,
            )
        except ConditionFailed:
            current = self.get(job.environment, job.id)
            raise TransitionRefused(f"ingestion job {job.id} is {current.status.value}; only pending or "
                                    "processing jobs can be cancelled") from None
        return self._from_item(item)

    # Items ---------------------------------------------------------------------------------

    @staticmethod
    def _to_item(job: IngestionJob) -> dict[str, Any]:
        return {
            **keys.ingestion_job(job.environment, job.id), "entity": "ingestion_job",
            "environment": job.environment, "id": job.id, "source": job.source.value,
            "status": job.status.value, "total_items": job.total_items, "on_conflict": job.on_conflict.value,
            "created_at": iso(job.created_at), "payload_key": job.payload_key, "filename": job.filename,
            "body_hash": job.body_hash, "idempotency_key": job.idempotency_key,
            "processed_items": 0, "successful_items": 0, "failed_items": 0, "skipped_items": 0,
            "expected_records_count": job.expected_records_count, "decimal_places": job.decimal_places,
            "data_stream_ids": list(job.data_stream_ids), "created_per_stream": {},
            "file_key": job.file_key, "data_stream_key": job.data_stream_key, "options": job.options or None,
            "bulk_chunk_rows": job.bulk_chunk_rows, "file_chunk_rows": job.file_chunk_rows,
            **(keys.job_of_stream_index(job.environment, job.data_stream_key, job.id) if job.data_stream_key else {}),
            **keys.active_job_index(job.environment, job.id),
        }

    @staticmethod
    def _from_item(item: dict[str, Any]) -> IngestionJob:
        return IngestionJob(
            environment=item["environment"], id=item["id"], source=JobSource(item["source"]),
            status=JobStatus(item["status"]), total_items=item["total_items"],
            on_conflict=OnConflict(item["on_conflict"]), created_at=parse_iso(item["created_at"]),
            payload_key=item.get("payload_key"), filename=item.get("filename"), body_hash=item.get("body_hash"),
            idempotency_key=item.get("idempotency_key"), processed_items=item.get("processed_items", 0),
            successful_items=item.get("successful_items", 0), failed_items=item.get("failed_items", 0),
            skipped_items=item.get("skipped_items", 0), expected_records_count=item.get("expected_records_count"),
            decimal_places=item.get("decimal_places"), data_stream_ids=tuple(item.get("data_stream_ids") or ()),
            started_at=parse_optional_iso(item.get("started_at")),
            records_written_at=parse_optional_iso(item.get("records_written_at")),
            completed_at=parse_optional_iso(item.get("completed_at")),
            last_progress_at=parse_optional_iso(item.get("last_progress_at")),
            cancellation_requested_at=parse_optional_iso(item.get("cancellation_requested_at")),
            error_message=item.get("error_message"), error_details=item.get("error_details"),
            first_record_id=item.get("first_record_id"), done_chunks=frozenset(item.get("done_chunks") or ()),
            chunks_begun=item.get("chunks_begun"),
            chunks_begun_again=frozenset(int(n) for n in item.get("chunks_begun_again") or ()),
            created_per_stream=dict(item.get("created_per_stream") or {}),
            counts_rolled_up=bool(item.get("counts_rolled_up")), file_key=item.get("file_key"),
            data_stream_key=item.get("data_stream_key"), options=item.get("options") or {},
            chunk_count=item.get("chunk_count"), restarts=item.get("restarts", 0),
            # A job restarted before these were kept: each restart counts as idle.
            idle_restarts=item.get("idle_restarts", item.get("restarts", 0)),
            processed_at_restart=item.get("processed_at_restart", item.get("processed_items", 0)),
            aggregates=_totals_of(item["aggregates"]) if item.get("aggregates") else None,
            ending=JobStatus(item["ending"]["status"]) if item.get("ending") else None,
            ending_fields=dict((item.get("ending") or {}).get("fields") or {}),
            upload_etag=item.get("upload_etag"), bulk_chunk_rows=item.get("bulk_chunk_rows"),
            file_chunk_rows=item.get("file_chunk_rows"),
            ignored_uploads=tuple(IgnoredUpload(u["etag"], u.get("byte_size"), parse_iso(u["received_at"]),
                                                u["message"]) for u in item.get("ignored_uploads") or ()),
        )


_UNFINISHED = tuple(s for s in JobStatus if s not in JOB_STATUSES.finished)


def _storable_fields(fields: dict[str, Any]) -> dict[str, Any]:
    """The fields an ending sets, as DynamoDB keeps them inside the ending's map (text, numbers, maps)."""
    return {name: iso(value) if isinstance(value, datetime) else value for name, value in fields.items()}


def _totals_attribute(totals: ImportTotals) -> dict[str, Any]:
    """An import's totals as the job item keeps them: the whole, and `streams` when several were fed."""
    kept = _stream_totals_attribute(totals.total)
    if totals.per_stream:
        kept["streams"] = {key: _stream_totals_attribute(part) for key, part in totals.per_stream.items()}
    return kept


def _stream_totals_attribute(totals: StreamTotals) -> dict[str, Any]:
    return {"count": totals.count, "credits": totals.credits, "debits": totals.debits, "date_min": totals.date_min,
            "date_max": totals.date_max, "currencies": list(totals.currencies)}


def _totals_of(attribute: dict[str, Any]) -> ImportTotals:
    return ImportTotals(_stream_totals_of(attribute),
                        {key: _stream_totals_of(part) for key, part in (attribute.get("streams") or {}).items()})


def _stream_totals_of(attribute: dict[str, Any]) -> StreamTotals:
    return StreamTotals(count=attribute.get("count", 0), credits=attribute.get("credits", 0),
                        debits=attribute.get("debits", 0), date_min=attribute.get("date_min"),
                        date_max=attribute.get("date_max"), currencies=tuple(attribute.get("currencies") or ()))
