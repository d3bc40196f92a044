"""POST /exports, GET /exports, GET /exports/{id}: each kind in each format over HTTP, the file read
back (CSV with the csv module, Parquet with polars, XLSX as the zip of XML it is), roles, filters
checked as their list routes check them, idempotency, the audit entry and the event."""
from __future__ import annotations

import csv
import io
import re
import zipfile
from datetime import timedelta
from urllib.parse import unquote, urlparse

import polars as pl
import pytest

from chalicelib.domain.clock import utc_now
from chalicelib.domain.exports import COLUMNS, ExportKind
from chalicelib.domain.users import Role
from tests.integration.conftest import record
from tests.support.people import add_user
from tests.support.worlds import world_of_api

FORMULA = "=HYPERLINK(\"http://evil.example\",\"x\")"


def build_world(api, worker):
    """Two streams, a reconciliation matching on amount; bank: 3 records (one matched, one with a
    formula for a description, one in JPY), ledger: 1 record (matched)."""
    for key in ("bank", "ledger"):
        assert api.post("/v1/data_streams", {"key": key, "name": key.title()}).status_code == 201
    reconciliation = api.post("/v1/reconciliations", {"name": "Bank to ledger", "side_a_stream_keys": ["bank"],
                                                      "side_b_stream_keys": ["ledger"]}).json_body
    api.post(f"/v1/reconciliations/{reconciliation['id']}/rules", {
        "name": "amount", "conditions": [{"field": "amount", "operator": "equals"}]})
    bulk = api.post("/v1/records/bulk", {"records": [
        record("bank", 1, 12345, description=FORMULA), record("bank", 2, 500, day="2026-10-01", currency="JPY"),
        record("bank", 3, 7, description="-12.50 fee", direction="debit"),
        record("ledger", 1, 7, direction="debit")]}).json_body
    worker.drain()
    api.post(f"/v1/reconciliations/{reconciliation['id']}/runs")
    worker.drain()
    # November signed off, bank 123.45 still open in it (docs/period-close.md).
    close = api.post(f"/v1/reconciliations/{reconciliation['id']}/period_closes", {
        "period_start": "2026-11-01", "period_end": "2026-11-30", "note": "November signed off"}).json_body
    worker.drain()
    return {"reconciliation_id": reconciliation["id"], "bulk_request_id": bulk["id"], "period_close_id": close["id"]}


@pytest.fixture
def world(api, worker):
    return world_of_api("test_exports_api.world", api, lambda: build_world(api, worker))


def export_of(api, worker, services, kind, fmt="csv", filters=None, **kw):
    created = api.post("/v1/exports", {"kind": kind, "format": fmt, "filters": filters or {}}, **kw)
    assert created.status_code == 202, created.json_body
    assert created.json_body["status"] == "pending" and created.json_body["download_url"] is None
    worker.drain()
    done = api.get(f"/v1/exports/{created.json_body['id']}").json_body
    assert done["status"] == "completed", done
    return done, downloaded(services, done)


def downloaded(services, export) -> bytes:
    """The file the download URL names (in-process moto: read through S3 at the URL's key)."""
    url = urlparse(export["download_url"])
    assert "X-Amz-Expires=300" in url.query and "response-content-disposition" in url.query
    key = unquote(url.path).split(f"/{services.settings.bucket_name}/", 1)[-1].lstrip("/")
    assert key.endswith(export["filename"])
    return services.aws.s3.get_object(Bucket=services.settings.bucket_name, Key=key)["Body"].read()


def csv_rows(data: bytes) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(data.decode("utf-8"), newline="")))


def xlsx_cells(data: bytes) -> tuple[list[str], list[str]]:
    """The text cells, in order, and every cell's XML of an XLSX file's first sheet (a zip of XML
    parts; constant-memory mode writes text inline in the sheet, not in shared strings)."""
    with zipfile.ZipFile(io.BytesIO(data)) as book:
        assert {"[Content_Types].xml", "xl/workbook.xml", "xl/worksheets/sheet1.xml"} <= set(book.namelist())
        sheet = book.read("xl/worksheets/sheet1.xml").decode()
    strings = [unescape(s) for s in re.findall(r"<t[^>]*>(.*?)</t>", sheet, re.S)]
    return strings, re.findall(r"<c [^>]*>.*?</c>", sheet, re.S)


def unescape(text: str) -> str:
    return text.replace("&quot;", '"').replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


def test_records_as_csv_amounts_twice_and_formulas_neutralised(api, worker, services, world):
    export, data = export_of(api, worker, services, "records", filters={"data_stream_key": "bank"})
    rows = csv_rows(data)
    assert list(rows[0]) == [c.name for c in COLUMNS[ExportKind.RECORDS]] == export["columns"]
    assert export["rows_written"] == 3 and export["byte_size"] == len(data)
    by_id = {r["external_id"]: r for r in rows}
    assert (by_id["bank-1"]["amount_minor"], by_id["bank-1"]["amount"], by_id["bank-1"]["currency"]) == (
        "12345", "123.45", "USD")
    assert by_id["bank-1"]["description"] == "'" + FORMULA
    assert (by_id["bank-2"]["amount"], by_id["bank-2"]["currency"], by_id["bank-2"]["date"]) == ("500", "JPY",
                                                                                                 "2026-10-01")
    assert by_id["bank-3"]["description"] == "'-12.50 fee" and by_id["bank-3"]["amount"] == "0.07"
    assert data.startswith(b"id,data_stream_key,") and b"\r\n" in data


def test_unmatched_records_leave_the_matched_ones_out(api, worker, services, world):
    _, data = export_of(api, worker, services, "unmatched_records")
    assert sorted(r["external_id"] for r in csv_rows(data)) == ["bank-1", "bank-2"]
    _, data = export_of(api, worker, services, "unmatched_records", filters={"date_from": "2026-11-01"})
    assert [r["external_id"] for r in csv_rows(data)] == ["bank-1"]


def test_unmatched_records_hold_what_the_records_route_shows_of_each(api, worker, services, world):
    # Their columns come from the analytics mirror (services/export_unreconciled.py), not the table
    _, data = export_of(api, worker, services, "unmatched_records", filters={"data_stream_key": "bank"})
    listed = api.get("/v1/records?status=unreconciled&data_stream_key=bank").json_body
    assert [int(r["id"]) for r in csv_rows(data)] == [r["id"] for r in listed["data"]]
    for row, shown in zip(csv_rows(data), listed["data"], strict=True):
        assert (row["created_at"], row["date"], row["currency"], row["external_id"], row["status"]) == (
            shown["created_at"], shown["date"], shown["currency"], shown["external_id"], "unreconciled")


def test_matches_and_their_records(api, worker, services, world):
    export, data = export_of(api, worker, services, "matches", filters={"reconciliation_id": world["reconciliation_id"]})
    [match] = csv_rows(data)
    assert match["record_count"] == "2" and match["status"] == "confirmed"
    _, data = export_of(api, worker, services, "match_records",
                        filters={"reconciliation_id": world["reconciliation_id"], "status": "confirmed"})
    rows = csv_rows(data)
    assert [(r["side"], r["external_id"], r["amount"], r["match_id"]) for r in rows] == [
        ("a", "bank-3", "0.07", match["id"]), ("b", "ledger-1", "0.07", match["id"])]


def test_exceptions_with_their_totals(api, worker, services, world):
    _, data = export_of(api, worker, services, "exceptions", filters={"data_stream_key": "bank"})
    rows = csv_rows(data)
    queue = api.get("/v1/reconciliation_exceptions?data_stream_key=bank").json_body["data"]
    assert [int(r["id"]) for r in rows] == [e["id"] for e in queue]
    for row, shown in zip(rows, queue, strict=True):
        assert int(row["total_amount_minor"]) == shown["aggregates"]["total_amount"]
        assert int(row["record_count"]) == shown["aggregates"]["record_count"]


def test_file_import_results_and_audit_events(api, worker, services, world):
    _, data = export_of(api, worker, services, "file_import_results",
                        filters={"file_import_id": world["bulk_request_id"], "status": "successful"})
    rows = csv_rows(data)
    assert [r["index"] for r in rows] == ["0", "1", "2", "3"] and {r["status"] for r in rows} == {"successful"}
    _, data = export_of(api, worker, services, "audit_events", filters={"resource_type": "data_stream"})
    rows = csv_rows(data)
    assert sorted(r["resource_id"] for r in rows) == ["bank", "ledger"]
    assert all(r["action"] == "data_stream.created" and r["summary"].startswith("{") for r in rows)


@pytest.mark.parametrize("kind", [k.value for k in ExportKind])
def test_every_kind_as_parquet_and_xlsx(api, worker, services, world, kind):
    filters = {"records": {"data_stream_key": "bank"}, "matches": {"reconciliation_id": world["reconciliation_id"]},
               "match_records": {"reconciliation_id": world["reconciliation_id"]},
               "file_import_results": {"file_import_id": world["bulk_request_id"]},
               "audit_events": {"resource_type": "data_stream"},
               "period_close_report": {"reconciliation_id": world["reconciliation_id"],
                                       "period_close_id": world["period_close_id"]}}.get(kind, {})
    csv_export, csv_data = export_of(api, worker, services, kind, "csv", filters)
    expected = csv_rows(csv_data)
    export, data = export_of(api, worker, services, kind, "parquet", filters)
    frame = pl.read_parquet(io.BytesIO(data))
    assert frame.columns == csv_export["columns"] and frame.height == len(expected) == export["rows_written"]
    types = {c.name: c.type for c in COLUMNS[ExportKind(kind)]}
    assert all((frame.schema[name] == pl.Int64) == (types[name] == "int") for name in frame.columns)
    export, data = export_of(api, worker, services, kind, "xlsx", filters)
    strings, cells = xlsx_cells(data)
    assert export["filename"].endswith(".xlsx") and export["rows_written"] == len(expected)
    assert strings[:len(csv_export["columns"])] == csv_export["columns"]
    if kind == "records":
        # Text as it is, in a string cell (never a formula), with Excel's quote-prefix style: no ' in the value
        assert FORMULA in strings and "'" + FORMULA not in strings
        assert not any("<f>" in c for c in cells)  # no cell is a formula
        with zipfile.ZipFile(io.BytesIO(data)) as book:
            styles = book.read("xl/styles.xml").decode()
        xfs = re.findall(r"<xf [^>]*?(?:/>|>.*?</xf>)", styles.split("<cellXfs", 1)[1], re.S)
        quoted = {str(n) for n, xf in enumerate(xfs) if 'quotePrefix="1"' in xf}
        formula_cell = next(c for c in cells if "HYPERLINK" in c)
        assert re.search(r' s="(\d+)"', formula_cell).group(1) in quoted
        plain_cell = next(c for c in cells if ">bank<" in c)
        assert (re.search(r' s="(\d+)"', plain_cell) or [None, None])[1] not in quoted
        amounts = frame.filter(pl.col("external_id") == "bank-1").select("amount_minor", "amount").row(0)
        assert amounts == (12345, "123.45")


def test_an_export_is_listed_audited_and_announced(api, worker, services, world):
    export, _ = export_of(api, worker, services, "records", filters={"external_id": "bank-1"})
    assert export["id"] in [e["id"] for e in api.get("/v1/exports").json_body["data"]]
    entries = api.get(f"/v1/audit_events?resource_type=export&resource_id={export['id']}").json_body["data"]
    assert {e["action"] for e in entries} == {"export.created", "export.completed"}
    created = next(e for e in entries if e["action"] == "export.created")
    assert created["summary"]["kind"] == "records" and created["summary"]["format"] == "csv"
    completed = next(e for e in entries if e["action"] == "export.completed")
    assert completed["summary"]["rows_written"] == 1 and completed["actor"] == f"system:export:{export['id']}"


def test_the_same_idempotency_key_gives_the_same_export(api, worker, services, world):
    body = {"kind": "records", "filters": {"data_stream_key": "bank"}}
    first = api.post("/v1/exports", body, headers={"Idempotency-Key": "exp-1"}).json_body
    again = api.post("/v1/exports", body, headers={"Idempotency-Key": "exp-1"}).json_body
    assert again["id"] == first["id"]
    other = api.post("/v1/exports", {**body, "format": "xlsx"}, headers={"Idempotency-Key": "exp-1"})
    assert other.status_code == 409
    worker.drain()


@pytest.mark.parametrize(("body", "status", "field"), [
    ({"kind": "records"}, 422, "filters.data_stream_key"),
    ({"kind": "records", "filters": {"data_stream_key": "bank", "limit": 5}}, 422, "filters.limit"),
    ({"kind": "records", "filters": {"data_stream_key": "bank", "date_from": "yesterday"}}, 422, "filters.date_from"),
    ({"kind": "unmatched_records", "filters": {"status": "reconciled"}}, 422, "filters.status"),
    ({"kind": "matches"}, 422, "filters.reconciliation_id"),
    ({"kind": "matches", "filters": {"reconciliation_id": 999999}}, 404, None),
    ({"kind": "exceptions", "filters": {"amount_min": 5, "amount_max": 1}}, 422, "amount_min"),
    ({"kind": "file_import_results", "filters": {"file_import_id": 999999}}, 404, None),
    ({"kind": "audit_events", "filters": {"resource_id": "x"}}, 422, "resource_id"),
    ({"kind": "ledgers"}, 422, "kind"),
    ({"kind": "records", "format": "pdf", "filters": {"data_stream_key": "bank"}}, 422, "format"),
])
def test_filters_are_checked_as_their_list_route_checks_them(api, world, body, status, field):
    response = api.post("/v1/exports", body)
    assert response.status_code == status, response.json_body
    if field is not None:
        assert response.json_body["errors"][0]["field"] == field
    assert api.get("/v1/exports").json_body["data"] == [] or all(
        e["kind"] != body["kind"] or e["filters"] != body.get("filters") for e in api.get("/v1/exports").json_body["data"])


def test_an_unknown_export_is_404(api):
    assert api.get("/v1/exports/424242").status_code == 404
    assert api.get("/v1/exports/nope").status_code == 404


def test_a_viewer_exports_lists_but_only_an_admin_the_audit_trail(api, services, worker, world):
    tokens = {role: services.identity.token_for(add_user(services.users, "acme", f"exp-{role.value}", role).idp_user_id)
              for role in (Role.VIEWER, Role.APPROVER, Role.ADMIN)}

    def post(role, kind, filters):
        return api.post("/v1/exports", {"kind": kind, "filters": filters}, key=None,
                        headers={"Authorization": f"Bearer {tokens[role]}"})
    assert post(Role.VIEWER, "unmatched_records", {}).status_code == 202
    refused = post(Role.APPROVER, "audit_events", {})
    assert refused.status_code == 403
    assert refused.json_body["message"] == "an export of audit_events needs the admin role or above; yours is approver"
    accepted = post(Role.ADMIN, "audit_events", {})
    assert accepted.status_code == 202
    worker.drain()
    # The admin's file is listed to a viewer, but without the URL that would fetch it.
    as_viewer = {"Authorization": f"Bearer {tokens[Role.VIEWER]}"}
    as_admin = {"Authorization": f"Bearer {tokens[Role.ADMIN]}"}
    path = f"/v1/exports/{accepted.json_body['id']}"
    assert api.get(path, key=None, headers=as_admin).json_body["download_url"]
    assert api.get(path, key=None, headers=as_viewer).json_body["download_url"] is None
    listed = [e for e in api.get("/v1/exports", key=None, headers=as_viewer).json_body["data"]
              if e["kind"] == "audit_events"]
    assert listed and all(e["download_url"] is None for e in listed)


def lose_queued_messages(services) -> None:
    """The bulk queue's messages, gone (lost, or delivered for the last time to a worker that was killed)."""
    sqs = services.aws.sqs
    url = sqs.get_queue_url(QueueName=services.settings.bulk_queue_name)["QueueUrl"]
    while messages := sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", []):
        for message in messages:
            sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])


def test_an_export_whose_message_was_lost_is_sent_again_by_the_sweeper(api, world, worker, services):
    from chalicelib.services import exports

    created = api.post("/v1/exports", {"kind": "records", "format": "csv",
                                       "filters": {"data_stream_key": "bank"}}).json_body
    lose_queued_messages(services)
    worker.drain()
    assert api.get(f"/v1/exports/{created['id']}").json_body["status"] == "pending"
    assert exports.sweep(services.export_ports, utc_now() + timedelta(minutes=6))["started"] == 1
    worker.drain()
    done = api.get(f"/v1/exports/{created['id']}").json_body
    assert done["status"] == "completed" and done["rows_written"] == 3
    assert exports.sweep(services.export_ports, utc_now() + timedelta(hours=2))["started"] == 0


def test_an_export_whose_worker_died_on_its_last_delivery_fails_saying_why_its_upload_aborted(
        api, world, worker, services):
    from chalicelib.domain.exports import ExportStatus
    from chalicelib.services import exports

    xp = services.export_ports
    created = api.post("/v1/exports", {"kind": "records", "format": "csv",
                                       "filters": {"data_stream_key": "bank"}}).json_body
    lose_queued_messages(services)
    export = xp.exports.get("acme", created["id"])
    running = xp.exports.move(export, ExportStatus.PROCESSING, started_at=utc_now(), last_progress_at=utc_now())
    upload_id = xp.files.start_upload(running.file_key, "text/csv")  # then Lambda killed the worker
    xp.exports.checkpoint(running, upload_id, (), None, 0)
    bucket = services.settings.bucket_name
    assert [u["UploadId"] for u in services.aws.s3.list_multipart_uploads(Bucket=bucket, Prefix=running.file_key)
            .get("Uploads", [])] == [upload_id]
    when = utc_now()
    for _ in range(3):
        when += timedelta(minutes=17)
        assert exports.sweep(xp, when)["restarted"] == 1
        lose_queued_messages(services)  # each re-sent message lost too
    assert exports.sweep(xp, when + timedelta(minutes=17))["failed"] == 1
    failed = api.get(f"/v1/exports/{created['id']}").json_body
    assert failed["status"] == "failed" and "3 restarts did not help" in failed["error_message"]
    assert services.aws.s3.list_multipart_uploads(Bucket=bucket, Prefix=running.file_key).get("Uploads", []) == []
    entries = api.get(f"/v1/audit_events?resource_type=export&resource_id={created['id']}").json_body["data"]
    assert [e["summary"]["status"] for e in entries if e["action"] == "export.completed"] == ["failed"]


def test_a_csv_checkpoint_is_written_only_over_the_one_its_worker_started_from(api, world, worker, services):
    """Two workers on one export (a redelivery beside the sweeper's restart): the one whose checkpoint
    is behind stops (Superseded) instead of overwriting the other's parts."""
    from chalicelib.domain.exports import ExportStatus, Part, Superseded

    xp = services.export_ports
    created = api.post("/v1/exports", {"kind": "records", "format": "csv",
                                       "filters": {"data_stream_key": "bank"}}).json_body
    lose_queued_messages(services)
    export = xp.exports.move(xp.exports.get("acme", created["id"]), ExportStatus.PROCESSING,
                             last_progress_at=utc_now())
    first = xp.exports.checkpoint(export, "u-1", (), None, 0)
    one = xp.exports.checkpoint(first, "u-1", (Part(1, "e1"),), "c1", 10)
    assert (one.parts, one.source_cursor, one.rows_written) == ((Part(1, "e1"),), "c1", 10)
    with pytest.raises(Superseded):  # behind: it started from no parts, one is stored
        xp.exports.checkpoint(first, "u-1", (Part(1, "other"),), "c1", 10)
    with pytest.raises(Superseded):  # another upload than the one stored
        xp.exports.checkpoint(one, "u-2", (Part(1, "e1"), Part(2, "e2")), "c2", 20)
    two = xp.exports.checkpoint(one, "u-1", (Part(1, "e1"), Part(2, "e2")), "c2", 20)
    assert two.parts == (Part(1, "e1"), Part(2, "e2")) and two.checkpoint_rows == 20
