"""Bank statements through the file-import path on moto: an import into a bank_feed stream takes
only that stream's account; one with no stream (POST /file_imports, or a drop at the
environment's root) routes each account to the bank_feed stream that holds it; balances are kept
per statement day, with gaps flagged; a statement imported again is skipped record by record."""
from __future__ import annotations

from dataclasses import replace
from datetime import date, timedelta
from pathlib import Path

import pytest
import requests

from chalicelib.adapters.dynamodb import keys
from chalicelib.domain.parsers import FileRejected
from chalicelib.domain.parsers.bai2 import parse_bai2
from chalicelib.domain.parsers.camt053 import parse_camt053
from chalicelib.domain.parsers.mt940 import parse_mt940
from chalicelib.services.api_keys import create_key
from chalicelib.services.ingestion import files
from tests.integration.test_file_imports import upload
from tests.support.camt_files import Detail, Entry, write_camt053
from tests.support.camt_files import Statement as CamtStatement
from tests.support.mt940_files import Line, Statement, free_text, write_file
from tests.support.statement_files import Bai2Account, Bai2Detail, Bai2Group, bai2_file

CORPUS = Path(__file__).resolve().parents[1] / "data" / "statements"
PARSERS = {"bai2": parse_bai2, "camt053": parse_camt053, "mt940": parse_mt940}
FILENAMES = {"bai2": "morning.bai2", "camt053": "statement.xml", "mt940": "statement.sta"}
# error_details of a statement the parser refused, whatever its format (docs/bank_statements.md)
DETAIL_KEYS = {"line", "element", "statement_id", "account", "expected", "found"}

# A BAI2 file of two accounts (the second with no transaction), control totals as the spec adds them:
# each 49 sums its account's 03 and 16 amounts and counts its records (03 to 49).
BAI2 = """01,BANKID,ACME,261123,0800,1,,,2/
02,ACME,BANKID,1,261122,,USD,2/
03,000123456,USD,010,100000,,,015,112500,,/
16,195,15000,Z,REF001,CUST01,Incoming wire from Acme Corp/
88,invoice INV-4411/
16,475,2500,Z,REF002,,Check paid/
49,230000,5/
03,0999888,USD,010,5000,,,015,5000,,/
49,10000,2/
98,240000,2,9/
99,240000,1,11/
"""


def next_day(opening: int, closing: int) -> str:
    """The next day's statement of account 123456 (one credit of closing - opening)."""
    credit = closing - opening
    total = opening + closing + credit
    return (f"01,BANKID,ACME,261124,0800,2,,,2/\n02,ACME,BANKID,1,261123,,USD,2/\n"
            f"03,123456,USD,010,{opening},,,015,{closing},,/\n16,195,{credit},Z,REF003,,Card settlement/\n"
            f"49,{total},3/\n98,{total},1,5/\n99,{total},1,7/\n")


@pytest.fixture
def runtime(services):
    from app import app
    from chalicelib.local.runtime import LocalRuntime

    return LocalRuntime(app, services.aws.sqs, "us-east-1", log=print, redelivery_seconds=0)


def stream(api, key, account):
    body = {"key": key, "name": key.title(), "type": "bank_feed", "bank_account_id": account}
    assert api.post("/v1/data_streams", body).status_code == 201


def statement_into(api, services, runtime, path, data, **body):
    created = api.post(path, {"filename": "morning.bai2", "format": "bai2", **body})
    assert created.status_code == 201, created.json_body
    upload(services, runtime, created.json_body, data if isinstance(data, bytes) else data.encode())
    return api.get(f"/v1/file_imports/{created.json_body['id']}").json_body


def test_an_import_into_a_bank_feed_stream_takes_its_own_account_and_lists_the_others(api, services, runtime):
    stream(api, "operating", "123456")  # the file writes it 000123456: leading zeros do not count

    job = statement_into(api, services, runtime, "/v1/data_streams/operating/file_imports", BAI2)

    assert job["status"] == "completed", job
    assert job["successful_items"] == 2
    assert job["error_details"]["accounts_not_imported"] == ["0999888"]
    records = api.get("/v1/records?data_stream_key=operating").json_body["data"]
    wire = next(r for r in records if r["external_id"] == "REF001")
    assert (wire["amount"], wire["direction"], wire["date"], wire["currency"]) == (15000, "credit", "2026-11-22", "USD")
    assert wire["description"] == "Incoming wire from Acme Corp invoice INV-4411"
    assert wire["metadata"]["type_code"] == "195" and wire["metadata"]["customer_reference"] == "CUST01"
    check = next(r for r in records if r["external_id"] == "REF002")
    assert (check["amount"], check["direction"]) == (2500, "debit")
    [day] = api.get("/v1/data_streams/operating/balances").json_body["data"]
    assert (day["date"], day["opening_booked"], day["closing_booked"], day["file_import_id"], day["gap"]) == (
        "2026-11-22", 100000, 112500, job["id"], False)
    assert api.get("/v1/data_streams/operating").json_body["latest_balance"]["closing_booked"] == 112500


def test_a_statement_with_no_stream_is_routed_by_account_to_every_bank_feed_stream_that_holds_one(
        api, services, runtime):
    stream(api, "operating", "123456")
    stream(api, "reserve", "999 888")

    job = statement_into(api, services, runtime, "/v1/file_imports", BAI2)

    assert job["status"] == "completed" and job["successful_items"] == 2, job
    operating = api.get("/v1/data_streams/operating").json_body
    reserve = api.get("/v1/data_streams/reserve").json_body
    assert sorted(job["data_stream_ids"]) == sorted([operating["id"]])  # the reserve account had no transaction
    assert reserve["latest_balance"]["closing_booked"] == 5000  # but its balance is kept
    listed = api.get("/v1/data_streams/operating/file_imports").json_body["data"]
    assert [j["id"] for j in listed] == [job["id"]]


def test_a_statement_no_stream_holds_fails_naming_its_accounts_and_writes_nothing(api, services, runtime):
    stream(api, "other", "555")
    job = statement_into(api, services, runtime, "/v1/file_imports", BAI2)
    assert job["status"] == "failed"
    assert "000123456" in job["error_message"] and "0999888" in job["error_message"]
    assert api.get("/v1/data_streams/other/balances").json_body["data"] == []


def test_a_statement_imported_again_skips_what_is_there_and_a_missing_day_shows_as_a_gap(api, services, runtime):
    stream(api, "operating", "123456")
    statement_into(api, services, runtime, "/v1/file_imports", BAI2)
    again = statement_into(api, services, runtime, "/v1/file_imports", BAI2)
    assert (again["status"], again["successful_items"], again["skipped_items"]) == ("completed", 0, 2), again

    statement_into(api, services, runtime, "/v1/file_imports", next_day(113000, 120000))  # opened at 1,130.00

    days = api.get("/v1/data_streams/operating/balances").json_body["data"]
    assert [(d["date"], d["gap"]) for d in days] == [("2026-11-23", True), ("2026-11-22", False)]
    assert [d["date"] for d in api.get("/v1/data_streams/operating/balances?date_from=2026-11-23").json_body[
        "data"]] == ["2026-11-23"]


def test_a_strict_import_refuses_a_wrong_control_total_and_a_lenient_one_warns(api, services, runtime):
    stream(api, "operating", "123456")
    broken = BAI2.replace("49,230000,5/", "49,230001,5/")
    refused = statement_into(api, services, runtime, "/v1/file_imports", broken)
    assert refused["status"] == "failed" and "230001" in refused["error_message"], refused
    warned = statement_into(api, services, runtime, "/v1/file_imports", broken, control_mismatch="warn")
    assert warned["status"] == "completed", warned
    assert any("230001" in w for w in warned["error_details"]["warnings"])


def test_a_statement_dropped_at_the_environments_root_is_routed(api, services, runtime):
    stream(api, "operating", "123456")
    key = "drops/acme/morning.bai2"
    services.aws.s3.put_object(Bucket=services.settings.bucket_name, Key=key, Body=BAI2.encode())
    head = services.aws.s3.head_object(Bucket=services.settings.bucket_name, Key=key)
    runtime.deliver_s3_event(services.settings.bucket_name, key, head["ETag"].strip('"'), len(BAI2))
    [job] = api.get("/v1/data_streams/operating/file_imports").json_body["data"]
    assert job["status"] == "completed" and job["source"] == "bai2", job


def test_a_statement_of_another_environment_is_routed_among_its_own_streams_only(api, services, runtime):
    stream(api, "operating", "123456")
    other = create_key(services.api_keys, "globex")[1]
    created = api.request("POST", "/v1/file_imports", {"filename": "morning.bai2", "format": "bai2"}, key=other)
    assert created.status_code == 201
    assert requests.put(created.json_body["upload_url"], data=BAI2.encode(), timeout=10).status_code == 200
    key = f"uploads/globex/{created.json_body['id']}/morning.bai2"
    head = services.aws.s3.head_object(Bucket=services.settings.bucket_name, Key=key)
    runtime.deliver_s3_event(services.settings.bucket_name, key, head["ETag"].strip('"'), len(BAI2))

    job = api.request("GET", f"/v1/file_imports/{created.json_body['id']}", None, key=other).json_body
    assert job["status"] == "failed" and "any bank_feed stream" in job["error_message"]
    assert api.get("/v1/records?data_stream_key=operating").json_body["data"] == []
    assert api.get("/v1/data_streams/operating/balances").json_body["data"] == []


def test_an_mt940_statement_dropped_into_a_streams_folder_is_sniffed_and_imported(api, services, runtime):
    stream(api, "eur", "DE89 3704 0044 0532 0130 00")
    data = write_file([Statement("DE89370400440532013000", [
        Line(250_00, "C", bank_reference="BR-1", information=free_text("Invoice 17")),
        Line(40_00, "RC", bank_reference="BR-2", information=free_text("Returned credit"))],
        opening=1_000_00)], envelope=True, line_ending="\r\n")
    key = "drops/acme/eur/statement.txt"  # the extension says nothing: its first bytes do
    services.aws.s3.put_object(Bucket=services.settings.bucket_name, Key=key, Body=data)
    head = services.aws.s3.head_object(Bucket=services.settings.bucket_name, Key=key)
    runtime.deliver_s3_event(services.settings.bucket_name, key, head["ETag"].strip('"'), len(data))

    [job] = api.get("/v1/data_streams/eur/file_imports").json_body["data"]
    assert (job["status"], job["source"], job["successful_items"]) == ("completed", "mt940", 2), job
    records = {r["external_id"]: r for r in api.get("/v1/records?data_stream_key=eur").json_body["data"]}
    assert (records["BR-1"]["amount"], records["BR-1"]["direction"], records["BR-1"]["currency"]) == (
        25000, "credit", "EUR")
    assert records["BR-2"]["direction"] == "debit" and records["BR-2"]["metadata"]["reversal"] is True
    [day] = api.get("/v1/data_streams/eur/balances").json_body["data"]
    assert (day["opening_booked"], day["closing_booked"]) == (100000, 121000)


def test_a_camt053_file_of_two_accounts_is_routed_with_its_batched_entry_split_by_detail(api, services, runtime):
    stream(api, "eur", "DE89 3704 0044 0532 0130 00")
    stream(api, "jpy", "JP-000777")
    day = date(2026, 11, 20)
    batch = Entry(300_00, "CRDT", day, account_servicer_ref="AS-BATCH", details=[
        Detail(100_00, account_servicer_ref="AS-B1", end_to_end_id="E2E-1", remittance=["INV 1"]),
        Detail(200_00, account_servicer_ref="AS-B2", end_to_end_id="E2E-2", remittance=["INV 2"])])
    data = write_camt053([
        CamtStatement("STMT-EUR", "DE89370400440532013000", "EUR", 1_000_00, day, [
            batch, Entry(50_00, "DBIT", day, account_servicer_ref="AS-FEE", additional_info="Fee")]),
        CamtStatement("STMT-JPY", "JP000777", "JPY", 5000, day, [Entry(1200, "CRDT", day, account_servicer_ref="AS-Y")],
                      other_account=True)])

    job = statement_into(api, services, runtime, "/v1/file_imports", data.decode(), format="camt053",
                         filename="statement.xml")

    assert (job["status"], job["successful_items"]) == ("completed", 4), job
    eur = {r["external_id"]: r for r in api.get("/v1/records?data_stream_key=eur").json_body["data"]}
    assert {k: (r["amount"], r["direction"]) for k, r in eur.items()} == {
        "AS-B1": (10000, "credit"), "AS-B2": (20000, "credit"), "AS-FEE": (5000, "debit")}
    assert eur["AS-B1"]["metadata"]["end_to_end_id"] == "E2E-1"
    [yen] = api.get("/v1/records?data_stream_key=jpy").json_body["data"]
    assert (yen["amount"], yen["currency"]) == (1200, "JPY")
    [day_eur] = api.get("/v1/data_streams/eur/balances").json_body["data"]
    assert (day_eur["opening_booked"], day_eur["closing_booked"]) == (100000, 125000)
    # Each stream's list of imports shows what this one file wrote into it, not the file's whole.
    [into_eur] = api.get("/v1/data_streams/eur/file_imports").json_body["data"]
    [into_jpy] = api.get("/v1/data_streams/jpy/file_imports").json_body["data"]
    assert (into_eur["record_count"], into_eur["net_amount"], into_eur["currency"]) == (3, 250_00, "EUR")
    assert (into_jpy["record_count"], into_jpy["net_amount"], into_jpy["currency"]) == (1, 1200, "JPY")


# Bad input through the import path -----------------------------------------------------------------

def assert_nothing_written(api, *streams):
    for key in streams:
        assert api.get(f"/v1/records?data_stream_key={key}").json_body["data"] == []
        assert api.get(f"/v1/data_streams/{key}/balances").json_body["data"] == []
        assert api.get(f"/v1/data_streams/{key}").json_body.get("latest_balance") is None


@pytest.mark.parametrize("path", [
    "bai2/broken_truncated.bai2", "bai2/broken_garbage.bai2", "camt053/broken_truncated.xml",
    "camt053/broken_garbage.xml", "mt940/broken_truncated.sta", "mt940/broken_garbage.sta"])
def test_a_truncated_or_garbage_statement_fails_its_import_with_the_parsers_message_and_writes_nothing(
        api, services, runtime, path):
    stream(api, "operating", "123456")
    stream(api, "eur", "DE89 3704 0044 0532 0130 00")
    format_ = path.split("/")[0]
    data = (CORPUS / path).read_bytes()
    with pytest.raises(FileRejected) as parsed:
        PARSERS[format_](data)

    job = statement_into(api, services, runtime, "/v1/file_imports", data, format=format_,
                         filename=FILENAMES[format_])

    assert (job["status"], job["stuck"], job["successful_items"]) == ("failed", False, 0), job
    assert job["error_message"] == parsed.value.message
    assert DETAIL_KEYS <= set(job["error_details"]), job["error_details"]
    assert job["data_stream_ids"] == []
    assert_nothing_written(api, "operating", "eur")


def test_a_statement_over_the_import_limit_fails_with_the_limit_a_client_meets_and_is_not_stuck(
        api, services, runtime):
    # settings.max_import_bytes
    services.ports = replace(services.ports, limits=replace(services.ports.limits, max_import_bytes=len(BAI2) - 1))
    stream(api, "operating", "123456")

    job = statement_into(api, services, runtime, "/v1/file_imports", BAI2)

    assert (job["status"], job["stuck"]) == ("failed", False), job
    assert job["error_message"] == (f"file is {len(BAI2)} bytes; imports accept up to {len(BAI2) - 1} bytes: "
                                    "split it")
    assert job["error_details"] == {"bytes": len(BAI2), "limit": len(BAI2) - 1}
    assert_nothing_written(api, "operating")


def mt940_off_by_one():
    return write_file([Statement("DE89370400440532013000", [Line(250_00, "C", bank_reference="BR-1")],
                                 reference="STMT-9", opening=1_000_00, closing=1_250_01)])


def camt_off_by_one():
    day = date(2026, 11, 20)
    return write_camt053([CamtStatement("STMT-9", "DE89370400440532013000", "EUR", 1_000_00, day,
                                        [Entry(250_00, "CRDT", day, account_servicer_ref="AS-1")],
                                        closing=1_250_01)])


@pytest.mark.parametrize("format_, write", [("mt940", mt940_off_by_one), ("camt053", camt_off_by_one)])
def test_a_statement_whose_balances_disagree_fails_naming_them_unless_imported_with_warn(
        api, services, runtime, format_, write):
    stream(api, "eur", "DE89 3704 0044 0532 0130 00")
    data = write().decode()

    refused = statement_into(api, services, runtime, "/v1/file_imports", data, format=format_,
                             filename=FILENAMES[format_])
    assert refused["status"] == "failed", refused
    details = refused["error_details"]
    assert details["statement_id"] in ("STMT-9", "STMT-9/1/1"), details  # MT940: :20: reference and :28C: number
    assert details["account"] == "DE89370400440532013000"
    assert "1250.00" in str(details["expected"]).replace(",", ".")
    assert "1250.01" in str(details["found"]).replace(",", ".")
    assert DETAIL_KEYS <= set(details)
    assert_nothing_written(api, "eur")

    warned = statement_into(api, services, runtime, "/v1/file_imports", data, format=format_,
                            filename=FILENAMES[format_], control_mismatch="warn")
    assert (warned["status"], warned["successful_items"]) == ("completed", 1), warned
    [warning] = warned["error_details"]["warnings"]
    assert "STMT-9" in warning and "DE89370400440532013000" in warning
    [day] = api.get("/v1/data_streams/eur/balances").json_body["data"]
    assert day["closing_booked"] == 1_250_01  # as the bank reported it


def test_a_bai2_control_total_that_disagrees_fails_in_the_one_shape_unless_imported_with_warn(api, services, runtime):
    stream(api, "operating", "123456")
    broken = BAI2.replace("49,230000,5/", "49,230001,5/")

    refused = statement_into(api, services, runtime, "/v1/file_imports", broken)

    details = refused["error_details"]
    assert {k: details[k] for k in DETAIL_KEYS} == {"line": 7, "element": "49", "statement_id": None,
                                                     "account": "000123456", "expected": 230000, "found": 230001}
    assert details["error_count"] == len(details["errors"]) >= 1
    assert {k: details["errors"][0][k] for k in DETAIL_KEYS} == {k: details[k] for k in DETAIL_KEYS}
    assert_nothing_written(api, "operating")
    warned = statement_into(api, services, runtime, "/v1/file_imports", broken, control_mismatch="warn")
    assert warned["status"] == "completed" and warned["successful_items"] == 2
    assert any("230001" in w and "000123456" in w for w in warned["error_details"]["warnings"])


@pytest.mark.parametrize("path, line, element", [
    ("bai2/broken_account_total.bai2", int, "49"),
    ("mt940/broken_balance.sta", int, None),
    ("camt053/broken_balance.xml", None, str),
    ("camt053/broken_truncated.xml", int, str)])
def test_a_refused_statements_error_details_have_one_shape_whatever_its_format(
        api, services, runtime, path, line, element):
    format_ = path.split("/")[0]
    job = statement_into(api, services, runtime, "/v1/file_imports", (CORPUS / path).read_bytes(), format=format_,
                         filename=FILENAMES[format_])
    details = job["error_details"]
    assert job["status"] == "failed" and DETAIL_KEYS <= set(details), job
    assert set(details) - DETAIL_KEYS <= {"errors", "error_count"}
    assert details["line"] is None if line is None else isinstance(details["line"], line)
    assert details["element"] == element if not isinstance(element, type) else isinstance(details["element"], str)
    assert details["expected"] is not None and details["found"] is not None


# Cancel ---------------------------------------------------------------------------------------------

ACCOUNTS = {"operating": "111", "reserve": "222", "payroll": "333"}
# 120 transactions in chunks of 50 (set on the import: 500 rows by default, the same chunks and ten times
# the writes): three chunks, the first spanning two streams.
PER_ACCOUNT, CHUNK = 40, 50


def three_accounts() -> bytes:
    return bai2_file([Bai2Group(date(2026, 11, 22), [
        Bai2Account(number, [Bai2Detail("195" if n % 2 else "475", 100 + n, bank_reference=f"{key}-{n}")
                             for n in range(PER_ACCOUNT)], summaries=[("010", 1_000_00), ("015", 2_000_00)])
        for key, number in ACCOUNTS.items()])])


def test_a_routed_statement_cancelled_after_its_first_chunk_keeps_that_chunk_and_nothing_more(api, services):
    for key, number in ACCOUNTS.items():
        stream(api, key, number)
    created = api.post("/v1/file_imports", {"filename": "morning.bai2", "format": "bai2"}).json_body
    assert requests.put(created["upload_url"], data=three_accounts(), timeout=10).status_code == 200
    services.table.update(keys.ingestion_job("acme", created["id"]), "SET file_chunk_rows = :rows", {":rows": CHUNK})
    ports = services.ports  # the workflow's tasks, driven one at a time
    assert files.prepare(ports, "acme", created["id"]) == "chunk"
    assert files.write_chunks(ports, "acme", created["id"], budget=timedelta(0)) == "chunk"  # one chunk

    running = api.get(created["url"]).json_body
    assert (running["status"], running["processed_items"], running["total_items"]) == (
        "processing", CHUNK, 3 * PER_ACCOUNT)
    assert running["last_progress_at"] and running["stuck"] is False
    assert api.post(f"/v1/file_imports/{created['id']}/cancel").json_body["status"] == "processing"

    assert files.write_chunks(ports, "acme", created["id"]) == "stop"
    files.finish(ports, "acme", created["id"])  # a late task changes nothing

    done = api.get(created["url"]).json_body
    assert (done["status"], done["total_items"], done["processed_items"]) == ("cancelled", 120, 120)
    assert (done["successful_items"], done["failed_items"], done["skipped_items"]) == (CHUNK, 70, 0)
    written = {key: api.get(f"/v1/data_streams/{key}").json_body for key in ACCOUNTS}
    assert {k: s["records_count"] for k, s in written.items()} == {
        "operating": PER_ACCOUNT, "reserve": CHUNK - PER_ACCOUNT, "payroll": 0}
    for key in ACCOUNTS:  # routed when it was prepared: each stream lists it
        assert [j["id"] for j in api.get(f"/v1/data_streams/{key}/file_imports").json_body["data"]] == [created["id"]]
    for key in ACCOUNTS:  # the balances wait for the import to complete: a cancelled one keeps none
        assert api.get(f"/v1/data_streams/{key}/balances").json_body["data"] == []
        assert written[key]["latest_balance"] is None
    reserve = api.get("/v1/records?data_stream_key=reserve&limit=200").json_body["data"]
    assert sorted(r["external_id"] for r in reserve) == sorted(f"reserve-{n}" for n in range(CHUNK - PER_ACCOUNT))


# The latest balance of a page of streams ------------------------------------------------------------

def test_the_stream_list_shows_each_bank_feeds_latest_balance_read_at_once_and_none_for_other_kinds(
        api, services, runtime):
    stream(api, "operating", "123456")
    stream(api, "reserve", "999 888")
    stream(api, "empty", "424242")  # a bank_feed with no statement yet
    assert api.post("/v1/data_streams", {"key": "ledger", "name": "Ledger"}).status_code == 201
    statement_into(api, services, runtime, "/v1/file_imports", BAI2)
    statement_into(api, services, runtime, "/v1/file_imports", next_day(112500, 120000))
    statement_into(api, services, runtime, "/v1/file_imports", BAI2)  # an older day again: latest stays
    calls = []

    def note(params, **_):
        calls.append(params.get("KeyConditionExpression", "batch" if "RequestItems" in params else "get"))
    client = services.aws.dynamodb
    for operation in ("Query", "BatchGetItem", "GetItem"):
        client.meta.events.register(f"provide-client-params.dynamodb.{operation}", note)
    try:
        listed = {s["key"]: s for s in api.get("/v1/data_streams").json_body["data"]}
    finally:
        for operation in ("Query", "BatchGetItem", "GetItem"):
            client.meta.events.unregister(f"provide-client-params.dynamodb.{operation}", note)

    assert (listed["operating"]["latest_balance"]["date"], listed["operating"]["latest_balance"]["closing_booked"]) \
        == ("2026-11-23", 120000)
    assert listed["reserve"]["latest_balance"]["closing_booked"] == 5000
    assert listed["empty"]["latest_balance"] is None
    assert "latest_balance" not in listed["ledger"]
    assert calls.count("batch") == 1  # the page's bank_feeds at once, not a query each
    assert api.get("/v1/data_streams/operating").json_body["latest_balance"]["date"] == "2026-11-23"


def test_a_deleted_bank_feed_leaves_no_latest_balance_behind(api, services, runtime):
    stream(api, "operating", "123456")
    statement_into(api, services, runtime, "/v1/file_imports", BAI2)
    assert api.delete("/v1/data_streams/operating").status_code == 204
    stream(api, "operating", "123456")
    assert api.get("/v1/data_streams/operating").json_body["latest_balance"] is None


def test_a_bai2_file_of_one_line_is_imported_as_the_same_file_with_line_breaks(api, services, runtime):
    stream(api, "operating", "123456")
    one_line = BAI2.replace("/\n", "/")

    job = statement_into(api, services, runtime, "/v1/file_imports", one_line)

    assert (job["status"], job["successful_items"]) == ("completed", 2), job
    [day] = api.get("/v1/data_streams/operating/balances").json_body["data"]
    assert (day["opening_booked"], day["closing_booked"]) == (100000, 112500)


def test_a_bai2_file_of_another_tool_with_twin_transactions_imports_whole_and_again_skips_every_one(
        api, services, runtime):
    # Given moov-io/bai2's sample1: twin transactions (same type, amount and day, no bank reference)
    # and one account reported twice in its group
    stream(api, "cad", "10200123456")
    data = (CORPUS / "bai2" / "moov_sample1.bai2").read_bytes()

    # When it is imported, and imported again
    first = statement_into(api, services, runtime, "/v1/data_streams/cad/file_imports", data)
    again = statement_into(api, services, runtime, "/v1/data_streams/cad/file_imports", data)

    # Then every transaction is a record of its own, and the second import skips each of them
    assert first["status"] == "completed", first
    assert (first["successful_items"], first["failed_items"]) == (17, 0)
    assert again["status"] == "completed" and (again["successful_items"], again["skipped_items"]) == (0, 17)
    assert len(api.get("/v1/records?data_stream_key=cad&limit=200").json_body["data"]) == 17
    # And both statement days of the account are kept
    assert len(api.get("/v1/data_streams/cad/balances").json_body["data"]) == 2


def test_an_mt940_account_written_with_its_bank_code_reaches_the_stream_that_holds_it_written_the_same_way(
        api, services, runtime):
    # Given a stream whose bank_account_id is the MT940 account as the bank writes it, bank code first
    stream(api, "giro", "50880050/0194774600888")
    data = (CORPUS / "mt940" / "plain_lf_several_statements.sta").read_bytes().replace(
        b"12345678/0001234567", b"50880050/0194774600888")

    # When the statement is imported routed by account
    job = statement_into(api, services, runtime, "/v1/file_imports", data, format="mt940", filename="day.sta")

    # Then its transactions reached that stream
    assert job["status"] == "completed" and job["successful_items"] == 3, (job["error_message"], job)
    assert job["data_stream_ids"] == [api.get("/v1/data_streams/giro").json_body["id"]]


def test_a_statements_balances_are_written_before_its_import_reads_completed(api, services, runtime, monkeypatch):
    # A client (the imports page) reloads the streams once it reads `completed`: the day must be there.
    from chalicelib.adapters.dynamodb.balances import BalanceRepository

    stream(api, "operating", "123456")
    seen_at_write: list[str] = []
    put_many = BalanceRepository.put_many

    def watched(self, days):
        days = list(days)
        if days:
            [job] = api.get("/v1/data_streams/operating/file_imports").json_body["data"]
            seen_at_write.append(job["status"])
        return put_many(self, days)

    monkeypatch.setattr(BalanceRepository, "put_many", watched)
    job = statement_into(api, services, runtime, "/v1/data_streams/operating/file_imports", BAI2)

    assert job["status"] == "completed"
    assert seen_at_write == ["replicating"]
