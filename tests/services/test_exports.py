"""The export service on the fakes: a CSV export streamed in parts, continued over several slices
(as a long one continues over several Lambda invocations) into one file with one header; a worker
run again after it ended changes nothing; a failure ends it failed, its upload aborted."""
from __future__ import annotations

import csv
import hashlib
import io
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import pytest

from chalicelib.domain.clock import utc_now
from chalicelib.domain.errors import NotFound, TransitionRefused
from chalicelib.domain.exports import (
    EXPORT_STATUSES,
    Column,
    Export,
    ExportFormat,
    ExportKind,
    ExportStatus,
    Part,
    SpoolFull,
    Superseded,
)
from chalicelib.services import exports
from chalicelib.services.export_ports import ExportLimits, ExportPorts
from tests.fakes import FakeWorkQueue
from tests.services.conftest import ENV, record, streams


class FakeExports:
    def __init__(self) -> None:
        self.items: dict[tuple[str, int], Export] = {}
        self.keys: dict[tuple[str, str], tuple[int, str]] = {}
        self.next_parts: dict[tuple[str, int], int] = {}

    def add(self, export: Export) -> None:
        self.items.setdefault((export.environment, export.id), export)

    def claim_idempotency_key(self, environment: str, key: str, export_id: int, body_hash: str) -> tuple[int, str]:
        return self.keys.setdefault((environment, key), (export_id, body_hash))

    def get(self, environment: str, export_id: int) -> Export:
        found = self.find(environment, export_id)
        if found is None:
            raise NotFound(f"export {export_id} not found")
        return found

    def find(self, environment: str, export_id: int) -> Export | None:
        return self.items.get((environment, export_id))

    def list_page(self, environment: str, limit: int, cursor: str | None) -> tuple[list[Export], str | None]:
        found = sorted((e for (env, _), e in self.items.items() if env == environment), key=lambda e: -e.id)
        return found[:limit], None

    def move(self, entity: Export, /, target: ExportStatus, **fields: object) -> Export:
        stored = self.get(entity.environment, entity.id)
        if not EXPORT_STATUSES.can_move(stored.status, target):
            raise TransitionRefused(f"export {entity.id} cannot move to {target.value}")
        moved = replace(stored, status=target, **fields)  # type: ignore[arg-type]
        self.items[(entity.environment, entity.id)] = moved
        return moved

    def checkpoint(self, export: Export, upload_id: str, parts: tuple[Part, ...], source_cursor: str | None,
                   rows: int) -> Export:
        current = self.get(export.environment, export.id)  # the adapter's condition: one worker moves it on
        if (current.status is not ExportStatus.PROCESSING or current.upload_id not in (None, upload_id)
                or len(current.parts) != max(len(parts) - 1, 0)):
            raise Superseded(f"export {export.id} moved on without this worker")
        stored = replace(current, upload_id=upload_id, parts=parts,
                         source_cursor=source_cursor, checkpoint_rows=rows, rows_written=rows)
        self.items[(export.environment, export.id)] = stored
        return stored

    def progress(self, export: Export, rows_written: int) -> None:
        stored = self.get(export.environment, export.id)
        self.items[(export.environment, export.id)] = replace(stored, rows_written=rows_written)

    def claim_part_number(self, export: Export) -> int:
        key = (export.environment, export.id)
        self.next_parts[key] = self.next_parts.get(key, export.parts[-1].number if export.parts else 0) + 1
        return self.next_parts[key]

    def count_slice(self, export: Export) -> Export:
        stored = self.get(export.environment, export.id)
        self.items[(export.environment, export.id)] = replace(stored, slices=stored.slices + 1)
        return self.items[(export.environment, export.id)]

    def active(self) -> list[Export]:
        return [e for e in self.items.values() if not e.finished]

    def count_restart(self, export: Export, counted: bool = True) -> bool:
        stored = self.get(export.environment, export.id)
        if stored.finished or (stored.restarts, stored.last_progress_at) != (export.restarts, export.last_progress_at):
            return False
        self.items[(export.environment, export.id)] = replace(
            stored, restarts=stored.restarts + (1 if counted else 0), last_progress_at=utc_now())
        return True

    def note_upload(self, export: Export, upload_id: str) -> Export:
        self.items[(export.environment, export.id)] = replace(self.get(export.environment, export.id),
                                                              upload_id=upload_id)
        return self.items[(export.environment, export.id)]


class FakeFiles:
    def __init__(self) -> None:
        self.uploads: dict[str, dict[int, bytes]] = {}
        self.objects: dict[str, bytes] = {}
        self.aborted: list[str] = []

    def start_upload(self, key: str, content_type: str) -> str:
        upload_id = f"u{len(self.uploads) + 1}"
        self.uploads[upload_id] = {}
        return upload_id

    def upload_part(self, key: str, upload_id: str, number: int, data: bytes) -> Part:
        self.uploads[upload_id][number] = data  # S3's too: the same number again replaces the part
        return Part(number, f"etag-{number}-{hashlib.md5(data).hexdigest()}")

    def complete_upload(self, key: str, upload_id: str, parts: Sequence[Part]) -> int:
        """As S3: each part named by its number and ETag (InvalidPart otherwise), numbers ascending."""
        for part in parts:
            data = self.uploads[upload_id].get(part.number)
            if data is None or part.etag != f"etag-{part.number}-{hashlib.md5(data).hexdigest()}":
                raise ValueError(f"InvalidPart: part {part.number} is not the one uploaded")
        assert [p.number for p in parts] == sorted({p.number for p in parts}), "InvalidPartOrder"
        self.objects[key] = b"".join(self.uploads[upload_id][p.number] for p in parts)
        return len(self.objects[key])

    def abort_upload(self, key: str, upload_id: str) -> None:
        self.aborted.append(upload_id)

    def download_url(self, key: str, filename: str, expires_seconds: int) -> str:
        return f"https://bucket/{key}?expires={expires_seconds}"

    def write_spooled(self, key: str, fmt: ExportFormat, columns: Sequence[Column],
                      pages: Iterable[list[tuple[Any, ...]]], stopped: Callable[[], bool], max_bytes: int,
                      uploading: Callable[[str], None]) -> int:
        rows = [row for page in pages for row in page]
        if len(repr(rows)) > max_bytes:
            raise SpoolFull(f"the spooled file passed {max_bytes} bytes")
        uploading(self.start_upload(key, fmt.content_type))
        self.objects[key] = repr(rows).encode()
        return len(self.objects[key])


@pytest.fixture
def xp(ports) -> ExportPorts:
    return ExportPorts(ports=ports, exports=FakeExports(), files=FakeFiles(), queue=FakeWorkQueue(),
                       limits=ExportLimits(part_bytes=2_000, slice_seconds=0, progress_seconds=0, page_rows=40))


def drain(xp: ExportPorts) -> int:
    """Deliver the queue's messages until none is left; how many were delivered."""
    queue = xp.queue
    assert isinstance(queue, FakeWorkQueue)
    delivered = 0
    while queue.messages:
        message = queue.messages.pop(0)
        exports.run(xp, message["environment"], message["export_id"])
        delivered += 1
    return delivered


def test_a_csv_export_continues_over_slices_into_one_file(xp, ingest):
    streams(xp.ports, "bank")
    ingest(*[record("bank", n, 100 + n, description="=cmd" if n == 7 else None) for n in range(300)])
    export = exports.create(xp, ENV, ExportKind.RECORDS, ExportFormat.CSV, {"data_stream_key": "bank"}, "user:1", None)
    assert export.status is ExportStatus.PENDING
    slices = drain(xp)
    done = xp.exports.get(ENV, export.id)
    assert done.status is ExportStatus.COMPLETED and done.rows_written == 300
    assert slices > 3 and done.slices == slices  # a slice of 0 s: each part ends one, the next message goes on
    data = xp.files.objects[done.file_key]
    rows = list(csv.DictReader(io.StringIO(data.decode(), newline="")))
    assert len(rows) == 300 and data.count(b"id,data_stream_key") == 1
    assert [int(r["id"]) for r in rows] == sorted((int(r["id"]) for r in rows), reverse=True)  # newest first, once
    assert {r["external_id"] for r in rows} == {f"bank-{n}" for n in range(300)}
    assert next(r for r in rows if r["external_id"] == "bank-7")["description"] == "'=cmd"
    assert all(len(part) >= 2_000 for part in list(xp.files.uploads["u1"].values())[:-1])
    assert [e.type for _, e in xp.ports.events.published if e.type.startswith("export")] == ["export.completed"]
    assert exports.download_url(xp, done) == f"https://bucket/{done.file_key}?expires=300"


def test_a_worker_run_again_after_the_end_changes_nothing(xp, ingest):
    streams(xp.ports, "bank")
    ingest(record("bank", 1, 5))
    export = exports.create(xp, ENV, ExportKind.UNMATCHED_RECORDS, ExportFormat.PARQUET, {}, None, None)
    drain(xp)
    done = xp.exports.get(ENV, export.id)
    assert done.status is ExportStatus.COMPLETED and done.rows_written == 1
    assert exports.run(xp, ENV, export.id) == done
    assert len([e for _, e in xp.ports.events.published if e.type.startswith("export")]) == 1  # announced once


def test_a_failure_on_the_last_delivery_ends_it_failed(xp, ingest):
    streams(xp.ports, "bank")
    ingest(record("bank", 1, 5))
    export = exports.create(xp, ENV, ExportKind.RECORDS, ExportFormat.CSV, {"data_stream_key": "bank"}, None, None)
    xp.exports.checkpoint(xp.exports.move(export, ExportStatus.PROCESSING), "u9", (), None, 0)
    exports.fail(xp, ENV, export.id, RuntimeError("the bucket is gone"))
    failed = xp.exports.get(ENV, export.id)
    assert failed.status is ExportStatus.FAILED and failed.error_message == "RuntimeError: the bucket is gone"
    assert xp.files.aborted == ["u9"] and exports.download_url(xp, failed) is None
    [event] = [e for _, e in xp.ports.events.published if e.type.startswith("export")]
    assert (event.type, event.data["status"]) == ("export.completed", "failed")


def test_the_same_key_and_body_give_the_same_export_and_another_body_is_refused(xp):
    streams(xp.ports, "bank")
    first = exports.create(xp, ENV, ExportKind.RECORDS, ExportFormat.CSV, {"data_stream_key": "bank"}, None, "k")
    again = exports.create(xp, ENV, ExportKind.RECORDS, ExportFormat.CSV, {"data_stream_key": "bank"}, None, "k")
    assert again.id == first.id
    from chalicelib.domain.errors import Conflict
    with pytest.raises(Conflict):
        exports.create(xp, ENV, ExportKind.RECORDS, ExportFormat.XLSX, {"data_stream_key": "bank"}, None, "k")


# The sweeper ---------------------------------------------------------------------------------------

def later(minutes: float) -> datetime:
    return utc_now() + timedelta(minutes=minutes)


def test_an_export_whose_first_message_was_lost_is_sent_again_then_worked(xp, ingest):
    streams(xp.ports, "bank")
    ingest(record("bank", 1, 5))
    export = exports.create(xp, ENV, ExportKind.RECORDS, ExportFormat.CSV, {"data_stream_key": "bank"}, None, None)
    xp.queue.messages.clear()  # the first send got lost
    assert exports.sweep(xp, later(4))["started"] == 0  # young: it may still come
    assert exports.sweep(xp, later(6))["started"] == 1
    assert xp.queue.messages == [exports.message(export)]
    claimed = xp.exports.get(ENV, export.id)
    assert claimed.restarts == 1 and claimed.last_progress_at is not None
    assert not xp.exports.count_restart(export)  # a second sweeper, from the same read: not claimed again
    drain(xp)
    assert xp.exports.get(ENV, export.id).status is ExportStatus.COMPLETED
    assert exports.sweep(xp, later(60)) == {"restarted": 0, "started": 0, "failed": 0, "errors": 0}


def test_an_export_whose_worker_died_on_its_last_delivery_restarts_then_fails_saying_why(xp, ingest):
    streams(xp.ports, "bank")
    ingest(*[record("bank", n, 100 + n) for n in range(30)])
    export = exports.create(xp, ENV, ExportKind.RECORDS, ExportFormat.CSV, {"data_stream_key": "bank"}, None, None)
    xp.queue.messages.clear()
    running = xp.exports.checkpoint(xp.exports.move(export, ExportStatus.PROCESSING, last_progress_at=utc_now()),
                                    "u7", (), None, 0)  # a worker began its upload, then Lambda killed it
    assert exports.sweep(xp, later(10))["restarted"] == 0  # a live worker notes progress within seconds
    minutes = 17
    for restart in range(1, 4):
        assert exports.sweep(xp, later(minutes))["restarted"] == 1
        assert xp.exports.get(ENV, export.id).restarts == restart and len(xp.queue.messages) == restart
        minutes += 17  # each re-sent message dies too
    assert exports.sweep(xp, later(minutes))["failed"] == 1
    failed = xp.exports.get(ENV, export.id)
    assert failed.status is ExportStatus.FAILED and "3 restarts did not help" in failed.error_message
    assert xp.files.aborted == [running.upload_id]  # its multipart upload goes with it
    [event] = [e for _, e in xp.ports.events.published if e.type == "export.completed"]
    assert event.data["status"] == "failed"
    assert [e.action for e in xp.ports.audit.entries.values() if e.action == "export.completed"] == [
        "export.completed"]


# XLSX and Parquet: within one invocation, or failed at once naming CSV ---------------------------------

@pytest.mark.parametrize("limits, why", [
    (ExportLimits(spool_seconds=0, page_rows=40), "too large to finish in time"),
    (ExportLimits(spool_bytes=100, page_rows=40), "too large for the worker's disk"),
])
def test_a_spooled_export_past_its_bounds_fails_at_once_naming_csv(xp, ingest, limits, why):
    xp = replace(xp, limits=limits)
    streams(xp.ports, "bank")
    ingest(*[record("bank", n, 100 + n) for n in range(50)])
    export = exports.create(xp, ENV, ExportKind.RECORDS, ExportFormat.XLSX, {"data_stream_key": "bank"}, None, None)
    assert drain(xp) == 1  # failed on its first delivery: no retry would do better
    failed = xp.exports.get(ENV, export.id)
    assert failed.status is ExportStatus.FAILED and failed.error_message.startswith(why)
    assert "ask for this export as CSV, which has no size or time limit" in failed.error_message
    assert [e.data["status"] for _, e in xp.ports.events.published if e.type == "export.completed"] == ["failed"]


def test_a_spooled_export_restarted_aborts_the_upload_its_dead_worker_began(xp, ingest):
    streams(xp.ports, "bank")
    ingest(record("bank", 1, 5))
    export = exports.create(xp, ENV, ExportKind.RECORDS, ExportFormat.PARQUET, {"data_stream_key": "bank"}, None,
                            None)
    xp.exports.note_upload(xp.exports.move(export, ExportStatus.PROCESSING), "u-dead")
    drain(xp)
    assert xp.exports.get(ENV, export.id).status is ExportStatus.COMPLETED and xp.files.aborted == ["u-dead"]


# exceptions: the ids fixed when the export starts ---------------------------------------------------

def test_an_exceptions_export_writes_the_exceptions_it_started_with_whatever_moves_between_slices(
        xp, ingest, reconciliation, monkeypatch):
    from chalicelib.domain.reconciliation_exceptions import ExceptionStatus
    from chalicelib.services.reconciliation_exceptions import ExceptionQuery, list_exceptions, refresh, update

    ingest(record("bank", 1, 2500), record("ledger", 1, 4000))
    refresh(xp.ports, ENV, reconciliation.id)
    opened = sorted((e.id for e in list_exceptions(xp.ports, ENV, ExceptionQuery(), 0, 50)[0]), reverse=True)
    assert len(opened) >= 2
    monkeypatch.setattr(exports, "EXCEPTION_PAGE_ROWS", 1)
    xp = replace(xp, limits=ExportLimits(part_bytes=1, slice_seconds=0, progress_seconds=0))  # a slice a row
    export = exports.create(xp, ENV, ExportKind.EXCEPTIONS, ExportFormat.CSV, {"status": "open"}, None, None)
    queue = xp.queue
    exports.run(xp, ENV, queue.messages.pop(0)["export_id"])  # the first slice: the newest exception
    # Between slices, the newest leaves the filter: an offset into the queue as it is now would skip one
    update(xp.ports, ENV, opened[0], title=None, description=None, status=ExceptionStatus.INVESTIGATING)
    drain(xp)
    done = xp.exports.get(ENV, export.id)
    rows = list(csv.DictReader(io.StringIO(xp.files.objects[done.file_key].decode(), newline="")))
    assert [int(r["id"]) for r in rows] == opened and done.rows_written == len(opened)


def _exceptions_export_after_its_first_slice(xp, ingest, reconciliation, monkeypatch):
    """An `exceptions` export of the open exceptions, a row a slice, its first slice written; then
    the newest exception leaves the filter (an offset into a list taken now would skip one)."""
    from chalicelib.domain.reconciliation_exceptions import ExceptionStatus
    from chalicelib.services.reconciliation_exceptions import ExceptionQuery, list_exceptions, refresh, update

    ingest(record("bank", 1, 2500), record("ledger", 1, 4000))
    refresh(xp.ports, ENV, reconciliation.id)
    opened = sorted((e.id for e in list_exceptions(xp.ports, ENV, ExceptionQuery(), 0, 50)[0]), reverse=True)
    assert len(opened) >= 2
    monkeypatch.setattr(exports, "EXCEPTION_PAGE_ROWS", 1)
    xp = replace(xp, limits=ExportLimits(part_bytes=1, slice_seconds=0, progress_seconds=0))
    export = exports.create(xp, ENV, ExportKind.EXCEPTIONS, ExportFormat.CSV, {"status": "open"}, None, None)
    begun: list[Export] = []
    real_checkpoint = xp.exports.checkpoint

    def checkpoint(*args, **kwargs):
        begun.append(real_checkpoint(*args, **kwargs))
        return begun[-1]

    monkeypatch.setattr(xp.exports, "checkpoint", checkpoint)
    exports.run(xp, ENV, xp.queue.messages.pop(0)["export_id"])
    monkeypatch.setattr(xp.exports, "checkpoint", real_checkpoint)
    update(xp.ports, ENV, opened[0], title=None, description=None, status=ExceptionStatus.INVESTIGATING)
    return xp, export, opened, begun[0]  # begun[0]: the export as its upload began, before any part


def _written_ids(xp, export) -> list[int]:
    done = xp.exports.get(ENV, export.id)
    assert done.status is ExportStatus.COMPLETED
    rows = list(csv.DictReader(io.StringIO(xp.files.objects[done.file_key].decode(), newline="")))
    assert done.rows_written == len(rows)
    return [int(r["id"]) for r in rows]


def test_a_failed_read_of_the_exceptions_snapshot_fails_the_delivery_not_the_rows(
        xp, ingest, reconciliation, monkeypatch):
    """A transient S3 error reading the saved ids is no missing snapshot: the delivery fails (SQS
    delivers it again) rather than page a fresh list with the old list's offset."""
    xp, export, opened, _ = _exceptions_export_after_its_first_slice(xp, ingest, reconciliation, monkeypatch)
    real_get_json = xp.ports.payloads.get_json

    def unavailable(key):
        raise ConnectionError("S3 is slow down: try again")

    monkeypatch.setattr(xp.ports.payloads, "get_json", unavailable)
    message = xp.queue.messages.pop(0)
    with pytest.raises(ConnectionError):
        exports.run(xp, ENV, message["export_id"])
    monkeypatch.setattr(xp.ports.payloads, "get_json", real_get_json)
    xp.queue.messages.append(message)  # delivered again
    drain(xp)
    assert _written_ids(xp, export) == opened  # each exception it started with, once


def test_a_second_worker_starting_an_exceptions_export_keeps_the_first_workers_ids(
        xp, ingest, reconciliation, monkeypatch):
    """A redelivery beside a restart reads the export before the first worker's first part: it
    starts again at the beginning and takes its own list, which must not replace the one the first
    worker's checkpoint pages through (it is Superseded at its checkpoint)."""
    xp, export, opened, as_begun = _exceptions_export_after_its_first_slice(xp, ingest, reconciliation, monkeypatch)
    real_count_slice = xp.exports.count_slice
    monkeypatch.setattr(xp.exports, "count_slice", lambda e: as_begun)  # it read the export before the part
    second = exports.run(xp, ENV, export.id)
    monkeypatch.setattr(xp.exports, "count_slice", real_count_slice)
    assert second.source_cursor is not None and len(second.parts) == 1  # the first worker's checkpoint stands
    drain(xp)
    assert _written_ids(xp, export) == opened


def test_a_second_csv_worker_on_the_same_upload_never_replaces_a_part_of_the_first(xp, ingest, monkeypatch):
    """Two workers on one export (a redelivery beside a restart), both from its first checkpoint:
    each uploads its part before its checkpoint refuses the later one (Superseded). The loser's
    part has a number of its own, so the part the winner's checkpoint names is still in the upload
    and the file completes with the winner's rows."""
    streams(xp.ports, "bank")
    ingest(*[record("bank", n, 100 + n) for n in range(120)])
    export = exports.create(xp, ENV, ExportKind.RECORDS, ExportFormat.CSV, {"data_stream_key": "bank"}, None, None)
    begun: list[Export] = []
    real_checkpoint = xp.exports.checkpoint
    monkeypatch.setattr(xp.exports, "checkpoint", lambda *a, **k: begun.append(real_checkpoint(*a, **k)) or begun[-1])
    exports.run(xp, ENV, xp.queue.messages.pop(0)["export_id"])  # the first worker: its first part
    monkeypatch.setattr(xp.exports, "checkpoint", real_checkpoint)
    ingest(record("bank", 500, 999))  # the second worker's first page differs from the first's
    real_count_slice = xp.exports.count_slice
    monkeypatch.setattr(xp.exports, "count_slice", lambda e: begun[0])  # it read the export before that part
    second = exports.run(xp, ENV, export.id)
    monkeypatch.setattr(xp.exports, "count_slice", real_count_slice)
    assert len(second.parts) == 1 and second.parts == begun[1].parts  # the first worker's checkpoint stands

    drain(xp)

    done = xp.exports.get(ENV, export.id)
    assert done.status is ExportStatus.COMPLETED and done.rows_written == 120
    rows = list(csv.DictReader(io.StringIO(xp.files.objects[done.file_key].decode(), newline="")))
    assert sorted(r["external_id"] for r in rows) == sorted(f"bank-{n}" for n in range(120))
    assert [p.number for p in done.parts] == sorted(p.number for p in done.parts)
