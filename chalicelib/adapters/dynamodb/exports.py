"""Exports in DynamoDB: one item per export (its status, progress and a CSV export's checkpoint),
listed newest first in gsi1, and the Idempotency-Keys of POST /exports."""
from __future__ import annotations

from datetime import timedelta
from typing import Any

from chalicelib.adapters.dynamodb import keys
from chalicelib.adapters.dynamodb.table import ConditionFailed, DynamoTable, StatusMoves
from chalicelib.domain.clock import iso, parse_iso, parse_optional_iso, utc_now
from chalicelib.domain.errors import NotFound
from chalicelib.domain.exports import (
    EXPORT_STATUSES,
    Export,
    ExportFormat,
    ExportKind,
    ExportStatus,
    Part,
    Superseded,
)

IDEMPOTENCY_KEY_LIFETIME = timedelta(hours=48)


class ExportRepository(StatusMoves[Export, ExportStatus]):
    statuses, noun, key = EXPORT_STATUSES, "export", staticmethod(keys.export)

    def __init__(self, table: DynamoTable) -> None:
        self._table = table

    def add(self, export: Export) -> None:
        """Write a new export; the same one again (a retried request) changes nothing."""
        try:
            self._table.put_new(self._to_item(export))
        except ConditionFailed:
            pass

    def claim_idempotency_key(self, environment: str, key: str, export_id: int, body_hash: str) -> tuple[int, str]:
        """Bind `key` to `export_id` unless it is bound already; the (export id, body hash) it is bound to."""
        now = utc_now()
        item = {**keys.export_idempotency_key(environment, key), "entity": "export_idempotency_key",
                "export_id": export_id, "body_hash": body_hash, "created_at": iso(now),
                "expires_at": int((now + IDEMPOTENCY_KEY_LIFETIME).timestamp())}
        try:
            self._table.put(item, condition="attribute_not_exists(pk) OR expires_at < :now",
                            values={":now": int(now.timestamp())})
            return export_id, body_hash
        except ConditionFailed:
            existing = self._table.get(keys.export_idempotency_key(environment, key))
            if existing is None:  # expired and removed in between
                return self.claim_idempotency_key(environment, key, export_id, body_hash)
            return existing["export_id"], existing["body_hash"]

    def get(self, environment: str, export_id: int) -> Export:
        found = self.find(environment, export_id)
        if found is None:
            raise NotFound(f"export {export_id} not found")
        return found

    def find(self, environment: str, export_id: int) -> Export | None:
        item = self._table.get(keys.export(environment, export_id))
        return self._from_item(item) if item else None

    def list_page(self, environment: str, limit: int, cursor: str | None) -> tuple[list[Export], str | None]:
        page = self._table.query_page(keys.GSI1, keys.exports_index_pk(environment), limit=limit, cursor=cursor)
        return [self._from_item(i) for i in page.items], page.cursor

    def active(self) -> list[Export]:
        """Pending and processing exports of every environment (for the sweeper)."""
        return [self._from_item(i) for i in self._table.index_items(keys.GSI2, keys.ACTIVE_EXPORTS_PK)]

    def count_restart(self, export: Export, counted: bool = True) -> bool:
        """Claim one restart of a stuck export: False when it moved meanwhile (its last_progress_at)
        or another sweeper restarted it (its restarts)."""
        return self._claim_restart(export, export.restarts, export.last_progress_at, counted)

    def note_upload(self, export: Export, upload_id: str) -> Export:
        """A spooled export's multipart upload, kept so that whoever ends the export aborts it."""
        item = self._table.update(keys.export(export.environment, export.id), "SET upload_id = :u",
                                  condition="#status = :processing", names={"#status": "status"},
                                  values={":u": upload_id, ":processing": ExportStatus.PROCESSING.value},
                                  return_new=True)
        return self._from_item(item)

    def checkpoint(self, export: Export, upload_id: str, parts: tuple[Part, ...], source_cursor: str | None,
                   rows: int) -> Export:
        """Keep a CSV export's progress durable: its upload, the parts in it, where its source stands.
        Only over the checkpoint this worker started from (the same upload, one part fewer): a second
        worker on the same export (a redelivery beside a restart) is refused (Superseded)."""
        try:
            item = self._table.update(
                keys.export(export.environment, export.id),
                "SET upload_id = :u, parts = :p, source_cursor = :c, checkpoint_rows = :r, rows_written = :r, "
                "last_progress_at = :now",
                condition="#status = :processing AND (attribute_not_exists(upload_id) OR upload_id = :u) "
                          "AND (attribute_not_exists(parts) OR size(parts) = :before)",
                names={"#status": "status"},
                values={":u": upload_id, ":p": [[p.number, p.etag] for p in parts], ":c": source_cursor, ":r": rows,
                        ":now": iso(utc_now()), ":processing": ExportStatus.PROCESSING.value,
                        ":before": max(len(parts) - 1, 0)},
                return_new=True, keep_nulls=True)
        except ConditionFailed:
            raise Superseded(f"export {export.id} moved on without this worker") from None
        return self._from_item(item)

    def claim_part_number(self, export: Export) -> int:
        """A part number of the export's upload no worker was given before (one atomic counter,
        from the highest number in this worker's checkpoint for an export begun without it): two
        workers on one upload never write the same part, so the loser's upload cannot replace the
        part the winner's checkpoint names. Numbers only grow, so a checkpoint's parts ascend."""
        base = export.parts[-1].number if export.parts else 0
        item = self._table.update(keys.export(export.environment, export.id),
                                  "SET next_part = if_not_exists(next_part, :base) + :one",
                                  condition="attribute_exists(pk)", values={":base": base, ":one": 1},
                                  return_new=True)
        return int(item["next_part"])

    def progress(self, export: Export, rows_written: int) -> None:
        """Rows written so far (not yet durable in parts): what GET /exports/{id} shows meanwhile."""
        try:
            self._table.update(keys.export(export.environment, export.id),
                               "SET rows_written = :r, last_progress_at = :now",
                               condition="#status = :processing", names={"#status": "status"},
                               values={":r": rows_written, ":now": iso(utc_now()),
                                       ":processing": ExportStatus.PROCESSING.value})
        except ConditionFailed:
            pass  # ended meanwhile

    def count_slice(self, export: Export) -> Export:
        item = self._table.update(keys.export(export.environment, export.id), "ADD slices :one",
                                  values={":one": 1}, return_new=True)
        return self._from_item(item)

    @staticmethod
    def _to_item(export: Export) -> dict[str, Any]:
        return {
            **keys.export(export.environment, export.id), **keys.export_index(export.environment, export.id),
            "entity": "export", "environment": export.environment, "id": export.id, "kind": export.kind.value,
            "format": export.format.value, "filters": dict(export.filters), "status": export.status.value,
            "created_at": iso(export.created_at), "requested_by": export.requested_by,
            "idempotency_key": export.idempotency_key, "body_hash": export.body_hash, "rows_written": 0,
            "checkpoint_rows": 0, "file_key": export.file_key,
            **({} if export.finished else keys.active_export_index(export.environment, export.id)),
        }

    @staticmethod
    def _from_item(item: dict[str, Any]) -> Export:
        return Export(
            environment=item["environment"], id=int(item["id"]), kind=ExportKind(item["kind"]),
            format=ExportFormat(item["format"]), filters=dict(item.get("filters") or {}),
            status=ExportStatus(item["status"]), created_at=parse_iso(item["created_at"]),
            requested_by=item.get("requested_by"), idempotency_key=item.get("idempotency_key"),
            body_hash=item.get("body_hash"), started_at=parse_optional_iso(item.get("started_at")),
            completed_at=parse_optional_iso(item.get("completed_at")),
            last_progress_at=parse_optional_iso(item.get("last_progress_at")),
            rows_written=int(item.get("rows_written") or 0),
            byte_size=int(item["byte_size"]) if item.get("byte_size") is not None else None,
            file_key=item.get("file_key"), error_message=item.get("error_message"), upload_id=item.get("upload_id"),
            parts=tuple(Part(int(n), str(etag)) for n, etag in item.get("parts") or ()),
            source_cursor=item.get("source_cursor"), checkpoint_rows=int(item.get("checkpoint_rows") or 0),
            slices=int(item.get("slices") or 0), restarts=int(item.get("restarts") or 0),
        )
