"""The ports of exports (adapters/dynamodb/exports.py, adapters/export_files.py), beside the
service's `Ports`: the container builds them (`Container.export_ports`), tests build them of fakes."""
from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from chalicelib.domain.exports import Column, Export, ExportFormat, ExportStatus, Part
from chalicelib.services.ports import Ports, Queue


class Exports(Protocol):
    def add(self, export: Export) -> None: ...
    def claim_idempotency_key(self, environment: str, key: str, export_id: int, body_hash: str) -> tuple[int, str]: ...
    def get(self, environment: str, export_id: int) -> Export: ...
    def find(self, environment: str, export_id: int) -> Export | None: ...
    def list_page(self, environment: str, limit: int, cursor: str | None) -> tuple[list[Export], str | None]: ...
    def move(self, entity: Export, /, target: ExportStatus, **fields: object) -> Export: ...
    def checkpoint(self, export: Export, upload_id: str, parts: tuple[Part, ...], source_cursor: str | None,
                   rows: int) -> Export: ...
    def progress(self, export: Export, rows_written: int) -> None: ...
    def count_slice(self, export: Export) -> Export: ...
    def claim_part_number(self, export: Export) -> int: ...
    def active(self) -> list[Export]: ...
    def count_restart(self, export: Export, counted: bool = True) -> bool: ...
    def note_upload(self, export: Export, upload_id: str) -> Export: ...


class ExportFiles(Protocol):
    def start_upload(self, key: str, content_type: str) -> str: ...
    def upload_part(self, key: str, upload_id: str, number: int, data: bytes) -> Part: ...
    def complete_upload(self, key: str, upload_id: str, parts: Sequence[Part]) -> int: ...
    def abort_upload(self, key: str, upload_id: str) -> None: ...
    def download_url(self, key: str, filename: str, expires_seconds: int) -> str: ...
    def write_spooled(self, key: str, fmt: ExportFormat, columns: Sequence[Column],
                      pages: Iterable[list[tuple[Any, ...]]], stopped: Callable[[], bool], max_bytes: int,
                      uploading: Callable[[str], None]) -> int:
        """Spool every page to a file under /tmp (SpoolFull past `max_bytes` of it), then upload it
        in parts, telling `uploading` the multipart upload's id first; the file's size."""
        ...


@dataclass(frozen=True)
class ExportLimits:
    part_bytes: int = 8 * 1024 * 1024  # a CSV part (S3: 5 MiB at least, but the last)
    slice_seconds: float = 600.0  # a worker continues a CSV export in a new message after this (Lambda: 900 s)
    progress_seconds: float = 2.0  # rows_written is saved at most this often
    download_url_seconds: int = 300  # the life of a download URL
    page_rows: int = 500  # rows read from the source per page (records: BatchGetItem of 100 at a time)
    # XLSX and Parquet are spooled to /tmp within one invocation: rows for at most this long (the file's
    # close and upload follow, inside Lambda's 900 s), in at most this much of /tmp (Lambda's default is
    # 512 MB; Chalice 1.34 cannot raise it; XlsxWriter's working XML is ~700 bytes a record row and the
    # finished file is written beside it). Past either, the export fails at once, naming CSV.
    spool_seconds: float = 660.0
    spool_bytes: int = 400 * 2 ** 20


@dataclass(frozen=True)
class ExportPorts:
    ports: Ports
    exports: Exports
    files: ExportFiles
    queue: Queue  # the worker's queue: the bulk queue (its worker tells an export's message apart)
    limits: ExportLimits = ExportLimits()
