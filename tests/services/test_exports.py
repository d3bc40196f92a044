"""The export service on the fakes: a CSV export streamed in parts, continued over several slices
(as a long one continues over several Lambda invocations) into one file with one header; a worker
run again after it ended changes nothing; a failure ends it failed, its upload aborted."""
from __future__ import annotations

import csv
import io
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import Any

import pytest

from chalicelib.domain.errors import NotFound, TransitionRefused
from chalicelib.domain.exports import (
    EXPORT_STATUSES,
    Column,
    Export,
    ExportFormat,
    ExportKind,
    ExportStatus,
    Part,
)
from chalicelib.services import exports
from chalicelib.services.export_ports import ExportLimits, ExportPorts
from tests.fakes import FakeWorkQueue
from tests.services.conftest import ENV, record, streams


class FakeExports:
    def __init__(self) -> None:
        self.items: dict[tuple[str, int], Export] = {}
        self.keys: dict[tuple[str, str], tuple[int, str]] = {}

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
        stored = replace(self.get(export.environment, export.id), upload_id=upload_id, parts=parts,
                         source_cursor=source_cursor, checkpoint_rows=rows, rows_written=rows)
        self.items[(export.environment, export.id)] = stored
        return stored

    def progress(self, export: Export, rows_written: int) -> None:
        stored = self.get(export.environment, export.id)
        self.items[(export.environment, export.id)] = replace(stored, rows_written=rows_written)

    def count_slice(self, export: Export) -> Export:
        stored = self.get(export.environment, export.id)
        self.items[(export.environment, export.id)] = replace(stored, slices=stored.slices + 1)
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
        self.uploads[upload_id][number] = data
        return Part(number, f"etag-{number}")

    def complete_upload(self, key: str, upload_id: str, parts: Sequence[Part]) -> int:
        self.objects[key] = b"".join(self.uploads[upload_id][p.number] for p in parts)
        return len(self.objects[key])

    def abort_upload(self, key: str, upload_id: str) -> None:
        self.aborted.append(upload_id)

    def download_url(self, key: str, filename: str, expires_seconds: int) -> str:
        return f"https://bucket/{key}?expires={expires_seconds}"

    def write_spooled(self, key: str, fmt: ExportFormat, columns: Sequence[Column],
                      pages: Iterable[list[tuple[Any, ...]]], stopped: Callable[[], bool]) -> int:
        self.objects[key] = repr([row for page in pages for row in page]).encode()
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
