"""Export files in S3: written by multipart upload in bounded memory, fetched by a presigned GET.

CSV is written part by part by the service (each part at least 5 MiB, its checkpoint between
two); XLSX and Parquet are spooled to a temporary file first, a page of rows at a time (XlsxWriter
in constant-memory mode; polars writing each batch of rows to a compressed Arrow IPC file, then
streaming them into one Parquet file, a row group per batch), and the file is uploaded in parts.
Memory holds one page of rows and one part, never the whole export; /tmp holds the file.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from chalicelib.domain.csv_cells import runs_as_formula
from chalicelib.domain.exports import (
    PARQUET_ROWS_PER_GROUP,
    XLSX_ROWS_PER_SHEET,
    Column,
    ExportFormat,
    Part,
    SpoolFull,
    spreadsheet_cell,
)

UPLOAD_PART_BYTES = 8 * 1024 * 1024


class ExportFiles:
    def __init__(self, s3, bucket: str) -> None:
        self._s3 = s3
        self.bucket = bucket

    # Multipart upload ------------------------------------------------------------------------------

    def start_upload(self, key: str, content_type: str) -> str:
        answer = self._s3.create_multipart_upload(Bucket=self.bucket, Key=key, ContentType=content_type)
        return str(answer["UploadId"])

    def upload_part(self, key: str, upload_id: str, number: int, data: bytes) -> Part:
        answer = self._s3.upload_part(Bucket=self.bucket, Key=key, UploadId=upload_id, PartNumber=number, Body=data)
        return Part(number, str(answer["ETag"]))

    def complete_upload(self, key: str, upload_id: str, parts: Sequence[Part]) -> int:
        """Join the parts into the object; its size in bytes. A repeat after success (a retried
        worker) finds the upload gone and the object there: its size."""
        try:
            self._s3.complete_multipart_upload(
                Bucket=self.bucket, Key=key, UploadId=upload_id,
                MultipartUpload={"Parts": [{"PartNumber": p.number, "ETag": p.etag} for p in parts]})
        except self._s3.exceptions.NoSuchUpload:
            pass
        return int(self._s3.head_object(Bucket=self.bucket, Key=key)["ContentLength"])

    def abort_upload(self, key: str, upload_id: str) -> None:
        try:
            self._s3.abort_multipart_upload(Bucket=self.bucket, Key=key, UploadId=upload_id)
        except Exception:  # gone already; the bucket's lifecycle rule removes what is left anyway
            pass

    def download_url(self, key: str, filename: str, expires_seconds: int) -> str:
        return str(self._s3.generate_presigned_url(
            "get_object", ExpiresIn=expires_seconds,
            Params={"Bucket": self.bucket, "Key": key,
                    "ResponseContentDisposition": f'attachment; filename="{filename}"'}))

    # Spooled formats -------------------------------------------------------------------------------

    def write_spooled(self, key: str, fmt: ExportFormat, columns: Sequence[Column],
                      pages: Iterable[list[tuple[Any, ...]]], stopped: Callable[[], bool], max_bytes: int,
                      uploading: Callable[[str], None]) -> int:
        """Write every page's rows into one XLSX or Parquet file under /tmp, then upload it; its size.
        The directory's files (the file and its working files) are measured after each page: past
        `max_bytes` (with room for the finished file beside them), SpoolFull."""
        directory = tempfile.mkdtemp(prefix="export-")
        try:
            path = os.path.join(directory, f"export.{fmt.value}")
            bounded = _bounded(pages, directory, max_bytes)
            if fmt is ExportFormat.XLSX:
                _write_xlsx(path, columns, bounded)
            elif fmt is ExportFormat.PARQUET:
                _write_parquet(path, directory, columns, bounded)
            else:
                raise ValueError(f"{fmt.value} is not spooled")
            return self._upload_file(key, path, fmt.content_type, stopped, uploading)
        finally:
            shutil.rmtree(directory, ignore_errors=True)

    def _upload_file(self, key: str, path: str, content_type: str, stopped: Callable[[], bool],
                     uploading: Callable[[str], None]) -> int:
        upload_id = self.start_upload(key, content_type)
        uploading(upload_id)
        parts: list[Part] = []
        try:
            with open(path, "rb") as spooled:
                while chunk := spooled.read(UPLOAD_PART_BYTES):
                    if stopped():
                        raise InterruptedError("stopping: the export is written again at the next start")
                    parts.append(self.upload_part(key, upload_id, len(parts) + 1, chunk))
            if not parts:  # an empty file still is one part
                parts.append(self.upload_part(key, upload_id, 1, b""))
            return self.complete_upload(key, upload_id, parts)
        except BaseException:
            self.abort_upload(key, upload_id)
            raise


def spooled_bytes(directory: str) -> int:
    """The size of the files in a spool directory (XlsxWriter's working files are kept there too)."""
    with os.scandir(directory) as entries:
        return sum(e.stat().st_size for e in entries if e.is_file())


def _bounded(pages: Iterable[list[tuple[Any, ...]]], directory: str, max_bytes: int
             ) -> Iterator[list[tuple[Any, ...]]]:
    for page in pages:
        if spooled_bytes(directory) > max_bytes:
            raise SpoolFull(f"the spooled file passed {max_bytes} bytes")
        yield page


def _write_xlsx(path: str, columns: Sequence[Column], pages: Iterable[list[tuple[Any, ...]]]) -> None:
    """constant_memory: XlsxWriter flushes each row to a temporary file once the next begins, so
    memory holds one row; a sheet takes XLSX_ROWS_PER_SHEET rows, then the next sheet begins."""
    import xlsxwriter

    workbook = xlsxwriter.Workbook(path, {"constant_memory": True, "tmpdir": os.path.dirname(path),
                                          "strings_to_formulas": False, "strings_to_numbers": False,
                                          "strings_to_urls": False})
    bold = workbook.add_format({"bold": True})
    quoted = workbook.add_format({"quote_prefix": True})  # Excel's hidden leading ': the cell stays text
    sheet, row_number, sheets = None, 0, 0

    def new_sheet():
        nonlocal sheets
        sheets += 1
        added = workbook.add_worksheet("export" if sheets == 1 else f"export {sheets}")
        added.write_row(0, 0, [c.name for c in columns], bold)
        return added

    sheet = new_sheet()
    for page in pages:
        for row in page:
            if row_number == XLSX_ROWS_PER_SHEET:
                sheet, row_number = new_sheet(), 0
            row_number += 1
            for index, (value, column) in enumerate(zip(row, columns, strict=True)):
                cell = spreadsheet_cell(value, column)
                if cell is None:
                    continue
                if isinstance(cell, int):
                    sheet.write_number(row_number, index, cell)
                else:
                    sheet.write_string(row_number, index, cell, quoted if runs_as_formula(cell) else None)
    workbook.close()


def _write_parquet(path: str, directory: str, columns: Sequence[Column], pages: Iterable[list[tuple[Any, ...]]]
                   ) -> None:
    """Batches of PARQUET_ROWS_PER_GROUP rows, each a zstd Arrow IPC file, then streamed (polars'
    streaming engine) into one Parquet file, a row group per batch."""
    import polars as pl

    schema = {c.name: (pl.Int64 if c.type == "int" else pl.String) for c in columns}
    batches: list[str] = []
    held: list[tuple[Any, ...]] = []

    def spill() -> None:
        frame = pl.DataFrame(held, schema=schema, orient="row")
        batch = os.path.join(directory, f"batch-{len(batches):06d}.arrow")
        frame.write_ipc(batch, compression="zstd")
        batches.append(batch)
        held.clear()

    for page in pages:
        held.extend(page)
        if len(held) >= PARQUET_ROWS_PER_GROUP:
            spill()
    if held or not batches:
        spill()
    pl.scan_ipc(batches).sink_parquet(path, row_group_size=PARQUET_ROWS_PER_GROUP, compression="zstd")
