"""Bank statements through the file-import path on moto: an import into a bank_feed stream takes
only that stream's account; one with no stream (POST /file_imports, or a drop at the
environment's root) routes each account to the bank_feed stream that holds it; balances are kept
per statement day, with gaps flagged; a statement imported again is skipped record by record."""
from __future__ import annotations

from datetime import date

import pytest
import requests

from chalicelib.services.api_keys import create_key
from tests.integration.test_file_imports import upload
from tests.support.camt_files import Detail, Entry, write_camt053
from tests.support.camt_files import Statement as CamtStatement
from tests.support.mt940_files import Line, Statement, free_text, write_file

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
    upload(services, runtime, created.json_body, data.encode())
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
