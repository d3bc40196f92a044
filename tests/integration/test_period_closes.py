"""Period close over HTTP (moto, the workers in-process): an approver closes September of a
reconciliation, listing what is still open there with its explanations; nothing dated in September
is then matched, unmatched, deleted or imported (bulk and file imports fail those rows alone), a run
leaves those records open, until an admin reopens the period with a reason; the close report export;
the roles, the audit entries and the events."""
from __future__ import annotations

import pytest
import requests

from chalicelib.domain.users import Role
from tests.integration.conftest import record
from tests.integration.test_events import BusListener
from tests.integration.test_exports_api import csv_rows, export_of
from tests.support.people import add_user

SEPTEMBER = {"period_start": "2026-09-01", "period_end": "2026-09-30"}
CLOSED = "inside the closed period 2026-09-01..2026-09-30"


@pytest.fixture
def world(api, services, worker, ingest, reconciliation):
    """Bank to ledger, matched on equal amounts by a batch run. September: bank 10.00 and ledger
    10.00 (matched by the run), bank 25.00 and ledger 40.00 alone, bank 6.00 against ledger 2.50 +
    3.50 (no rule matches three). October: bank 7.00 against ledger 3.00 + 4.00, and bank 0.50.
    After the run, an open exception per stream holds each stream's unmatched records."""
    rid = reconciliation["id"]
    assert api.post(f"/v1/reconciliations/{rid}/rules", {
        "name": "amount", "conditions": [{"field": "amount", "operator": "equals"}]}).status_code == 201
    bank = ingest(record("bank", 1, 1000, "2026-09-10"), record("bank", 2, 2500, "2026-09-12"),
                  record("bank", 3, 600, "2026-09-25"), record("bank", 4, 700, "2026-10-05"),
                  record("bank", 5, 50, "2026-10-09"))
    ledger = ingest(record("ledger", 1, 1000, "2026-09-11"), record("ledger", 2, 4000, "2026-09-20"),
                    record("ledger", 3, 250, "2026-09-26"), record("ledger", 4, 350, "2026-09-26"),
                    record("ledger", 5, 300, "2026-10-06"), record("ledger", 6, 400, "2026-10-07"))
    run(api, worker, rid)
    [match] = api.get(f"/v1/reconciliation_matches?reconciliation_id={rid}").json_body["data"]
    exceptions = {e["data_stream_key"]: e["id"]
                  for e in api.get(f"/v1/reconciliation_exceptions?reconciliation_id={rid}").json_body["data"]}
    assert set(exceptions) == {"bank", "ledger"}
    people = {role: add_user(services.users, "acme", f"close-{role.value}", role) for role in Role}
    return {"id": rid, "bank": bank, "ledger": ledger, "match_id": match["id"], "exceptions": exceptions,
            "tokens": {role.value: services.identity.token_for(user.idp_user_id) for role, user in people.items()}}


def run(api, worker, rid) -> dict:
    started = api.post(f"/v1/reconciliations/{rid}/runs")
    assert started.status_code == 202, started.json_body
    worker.drain()
    done = api.get(f"/v1/reconciliations/{rid}/runs/{started.json_body['id']}").json_body
    assert done["status"] == "completed", done
    return done


def as_role(world, role: str) -> dict:
    return {"key": None, "headers": {"Authorization": f"Bearer {world['tokens'][role]}"}}


def close(api, world, body=None, **kw):
    return api.post(f"/v1/reconciliations/{world['id']}/period_closes", body or {**SEPTEMBER, "note": "Signed off"},
                    **kw)


def closed_september(api, world) -> dict:
    response = close(api, world, {**SEPTEMBER, "note": "September signed off; the rest is timing", "explanations": [
        {"exception_id": world["exceptions"]["bank"], "explanation": "bank 25.00 is a card refund due in October"}]},
        **as_role(world, "approver"))
    assert response.status_code == 201, response.json_body
    return response.json_body


def manual(api, world, record_ids):
    return api.post("/v1/reconciliation_matches", {"reconciliation_id": world["id"], "record_ids": record_ids})


def test_a_close_lists_what_is_still_open_in_the_period_with_its_explanations(api, world):
    made = closed_september(api, world)

    assert (made["status"], made["period_start"], made["period_end"]) == ("closed", "2026-09-01", "2026-09-30")
    assert made["url"] == f"/v1/reconciliations/{world['id']}/period_closes/{made['id']}"
    assert made["closed_by"].startswith("user:") and made["reopened_at"] is None
    # September's unmatched: bank 25.00 and 6.00; ledger 40.00, 2.50 and 3.50 (October's are not counted).
    [usd] = made["unmatched"]
    assert (usd["currency"], usd["count"], usd["credits"], usd["debits"], usd["decimal_places"]) == (
        "USD", 5, 2500 + 600 + 4000 + 250 + 350, 0, 2)
    by_stream = {e["data_stream_key"]: e for e in made["open_exceptions"]}
    assert by_stream["bank"]["id"] == world["exceptions"]["bank"] and by_stream["bank"]["record_count"] == 2
    assert (by_stream["bank"]["explanation"], by_stream["bank"]["explained_by"]) == (
        "bank 25.00 is a card refund due in October", "exception")
    assert (by_stream["ledger"]["explanation"], by_stream["ledger"]["explained_by"]) == (
        "September signed off; the rest is timing", "note")
    assert by_stream["ledger"]["record_count"] == 3 and by_stream["ledger"]["money"][0]["credits"] == 4600
    assert api.get(made["url"]).json_body == made
    assert [c["id"] for c in api.get(f"/v1/reconciliations/{world['id']}/period_closes").json_body["data"]] == [
        made["id"]]
    [entry] = api.get(f"/v1/audit_events?resource_type=period_close&resource_id={made['id']}").json_body["data"]
    assert entry["action"] == "period_close.created" and entry["summary"]["period_start"] == "2026-09-01"
    assert entry["summary"]["open_exceptions"] == 2 and entry["summary"]["reconciliation_id"] == str(world["id"])


@pytest.mark.parametrize("period", [("2026-09-30", "2026-10-15"), ("2026-08-01", "2026-09-01"),
                                    ("2026-09-10", "2026-09-11"), ("2026-08-01", "2026-12-31")])
def test_a_period_overlapping_a_closed_one_is_a_conflict(api, world, period):
    first = closed_september(api, world)

    refused = close(api, world, {"period_start": period[0], "period_end": period[1], "note": "again"})

    assert refused.status_code == 409
    assert f"overlaps the closed period 2026-09-01..2026-09-30 of reconciliation {world['id']} (period close " \
           f"{first['id']})" in refused.json_body["message"]
    assert close(api, world, {"period_start": "2026-10-01", "period_end": "2026-10-01", "note": "a day"}
                 ).status_code == 201  # adjacent is fine


@pytest.mark.parametrize(("body", "field"), [
    ({"period_start": "2026-09-30", "period_end": "2026-09-01", "note": "x"}, "period_end"),
    ({"period_start": "2026-09-01", "period_end": "2026-09-31", "note": "x"}, "period_end"),
    ({"period_start": "2026-09-01", "period_end": "2026-09-30"}, "note"),
    ({"period_start": "2026-09-01", "period_end": "2026-09-30", "note": "  "}, "note"),
    ({"period_start": "2025-01-01", "period_end": "2026-09-30", "note": "x"}, "period_end"),  # over a year
    ({"period_start": "2026-09-01", "period_end": "2026-09-30", "note": "x", "explanations": [
        {"exception_id": 1, "explanation": "a"}, {"exception_id": 1, "explanation": "b"}]}, "explanations[1].exception_id"),
])
def test_a_bad_close_is_422_naming_the_field(api, world, body, field):
    refused = close(api, world, body)
    assert refused.status_code == 422, refused.json_body
    assert [e["field"] for e in refused.json_body["errors"]] == [field]
    assert api.get(f"/v1/reconciliations/{world['id']}/period_closes").json_body["data"] == []


def test_an_explanation_must_name_an_exception_open_in_the_period(api, world):
    unknown = close(api, world, {**SEPTEMBER, "note": "x", "explanations": [
        {"exception_id": 999999, "explanation": "?"}]})
    assert unknown.status_code == 404 and unknown.json_body["message"] == "reconciliation exception 999999 not found"
    august = close(api, world, {"period_start": "2026-08-01", "period_end": "2026-08-31", "note": "x",
                                "explanations": [{"exception_id": world["exceptions"]["bank"], "explanation": "?"}]})
    assert august.status_code == 409
    assert august.json_body["message"].startswith(f"exception {world['exceptions']['bank']} is not open with records "
                                                  "dated in 2026-08-01..2026-08-31")
    assert api.get(f"/v1/reconciliations/{world['id']}/period_closes").json_body["data"] == []


def test_unknown_reconciliations_and_closes_are_not_found(api, world):
    assert close(api, {"id": 999999}).status_code == 404
    assert api.get(f"/v1/reconciliations/{world['id']}/period_closes/999999").status_code == 404
    assert api.post(f"/v1/reconciliations/{world['id']}/period_closes/999999/reopen",
                    {"reason": "x"}).status_code == 404


def test_nothing_dated_inside_changes_until_an_admin_reopens_it_then_everything_does(api, world, worker):
    bank, ledger = world["bank"], world["ledger"]
    pair = api.post("/v1/records/bulk", {"records": [record("bank", 6, 800, "2026-09-27"),
                                                     record("ledger", 7, 800, "2026-09-28")]}).json_body
    worker.drain()
    b6, l7 = [r["record_id"] for r in api.get(pair["url"]).json_body["results"]]
    made = closed_september(api, world)

    # Inside: refused, naming the closed period.
    unmatch = api.delete(f"/v1/reconciliation_matches/{world['match_id']}")
    assert unmatch.status_code == 409 and CLOSED in unmatch.json_body["message"]
    assert f"period close {made['id']}" in unmatch.json_body["message"]
    by_hand = manual(api, world, [bank[2], ledger[2], ledger[3]])
    assert by_hand.status_code == 409 and f"record {bank[2]} is dated 2026-09-25, {CLOSED}" in by_hand.json_body[
        "message"]
    delete = api.delete(f"/v1/records/{bank[1]}")
    assert delete.status_code == 409 and CLOSED in delete.json_body["message"]
    assert api.get(f"/v1/records/{bank[1]}").status_code == 200
    bulk = api.post("/v1/records/bulk", {"records": [record("bank", 20, 111, "2026-09-15"),
                                                     record("bank", 21, 222, "2026-10-15")]}).json_body
    worker.drain()
    inside, outside = api.get(bulk["url"]).json_body["results"]
    assert inside["status"] == "failed" and CLOSED in inside["error"] and inside["error"].startswith("date: ")
    assert outside["status"] == "successful"
    assert run(api, worker, world["id"])["matched_records"] == 0  # bank and ledger 8.00 stay open
    assert api.get(f"/v1/records/{b6}").json_body["status"] == "unreconciled"

    # Outside: as ever.
    assert manual(api, world, [bank[3], ledger[4], ledger[5]]).status_code == 201
    assert api.delete(f"/v1/records/{bank[4]}").status_code == 204

    # A reopen needs an admin and a reason; then September changes again.
    refused = api.post(f"{made['url']}/reopen", {"reason": "late fee"}, **as_role(world, "approver"))
    assert refused.status_code == 403 and "admin" in refused.json_body["message"]
    assert api.post(f"{made['url']}/reopen", {}, **as_role(world, "admin")).status_code == 422
    reopened = api.post(f"{made['url']}/reopen", {"reason": "the bank's late fee arrived"}, **as_role(world, "admin"))
    assert reopened.status_code == 200, reopened.json_body
    assert (reopened.json_body["status"], reopened.json_body["reopen_reason"]) == (
        "reopened", "the bank's late fee arrived")
    assert reopened.json_body["reopened_by"].startswith("user:") and reopened.json_body["reopened_at"]
    again = api.post(f"{made['url']}/reopen", {"reason": "twice"}, **as_role(world, "admin"))
    assert again.status_code == 409 and "reopened already" in again.json_body["message"]

    assert api.delete(f"/v1/reconciliation_matches/{world['match_id']}").status_code == 204
    assert manual(api, world, [bank[2], ledger[2], ledger[3]]).status_code == 201
    assert api.delete(f"/v1/records/{bank[1]}").status_code == 204
    assert run(api, worker, world["id"])["matched_records"] == 4  # 10.00 again, and 8.00
    assert api.get(f"/v1/records/{l7}").json_body["status"] == "reconciled"
    entries = api.get(f"/v1/audit_events?resource_type=period_close&resource_id={made['id']}").json_body["data"]
    [reopen_entry] = [e for e in entries if e["action"] == "period_close.reopened"]
    assert reopen_entry["summary"]["reason"] == "the bank's late fee arrived"
    assert reopen_entry["summary"]["after"] == {"status": "reopened"}
    # The period may be closed again: the reopened close is listed beside the new one.
    again_closed = close(api, world)
    assert again_closed.status_code == 201
    assert [(c["id"], c["status"]) for c in api.get(f"/v1/reconciliations/{world['id']}/period_closes").json_body[
        "data"]] == [(again_closed.json_body["id"], "closed"), (made["id"], "reopened")]


def test_confirming_or_rejecting_a_proposed_match_inside_is_refused_one_by_one_in_bulk(api, world, worker):
    rid = world["id"]
    rule = api.get(f"/v1/reconciliations/{rid}/rules").json_body["data"][0]
    assert api.patch(f"/v1/reconciliation_rules/{rule['id']}", {"auto_confirm": False}).status_code == 200
    api.post("/v1/records/bulk", {"records": [record("bank", 30, 900, "2026-09-05"),
                                              record("ledger", 30, 900, "2026-09-05"),
                                              record("bank", 31, 901, "2026-10-05"),
                                              record("ledger", 31, 901, "2026-10-05")]})
    worker.drain()
    run(api, worker, rid)
    proposed = _proposed_by_month(api, rid)
    closed_september(api, world)

    refused = api.post(f"/v1/reconciliation_matches/{proposed['2026-09']}/confirm")
    assert refused.status_code == 409 and CLOSED in refused.json_body["message"]
    bulk = api.post("/v1/reconciliation_matches/bulk", {"action": "confirm", "ids": [proposed["2026-09"],
                                                                                      proposed["2026-10"]]})
    assert bulk.status_code == 202, bulk.json_body
    worker.drain()
    results = {r["id"]: r for r in api.get(bulk.json_body["url"]).json_body["results"]}
    assert results[proposed["2026-09"]]["status"] == "failed" and CLOSED in results[proposed["2026-09"]]["error"]
    assert results[proposed["2026-10"]]["status"] == "succeeded"


def _proposed_by_month(api, rid) -> dict[str, int]:
    found = {}
    for match in api.get(f"/v1/reconciliation_matches?reconciliation_id={rid}&status=proposed").json_body["data"]:
        records = api.get(f"/v1/records?reconciliation_match_id={match['id']}").json_body["data"]
        found[records[0]["date"][:7]] = match["id"]
    return found


def test_a_file_import_fails_the_rows_dated_inside_a_closed_period_and_writes_the_others(api, services, world):
    from app import app
    from chalicelib.local.runtime import LocalRuntime

    closed_september(api, world)
    created = api.post("/v1/data_streams/bank/file_imports", {"filename": "sep.csv", "format": "csv"}).json_body
    data = b"date,amount,external_id\n2026-09-29,1.00,f-1\n2026-10-29,2.00,f-2\n2026-09-01,3.00,f-3\n"
    assert requests.put(created["upload_url"], data=data, timeout=10).status_code == 200
    key = f"uploads/acme/{created['id']}/{created['filename']}"
    head = services.aws.s3.head_object(Bucket=services.settings.bucket_name, Key=key)
    LocalRuntime(app, services.aws.sqs, "us-east-1", log=print, redelivery_seconds=0).deliver_s3_event(
        services.settings.bucket_name, key, head["ETag"].strip('"'), len(data))

    done = api.get(created["url"]).json_body
    assert done["status"] == "completed", done
    assert (done["total_items"], done["successful_items"], done["failed_items"]) == (3, 1, 2)
    assert sorted(r["line"] for r in done["results"]) == [2, 4]
    assert all(CLOSED in r["error"] for r in done["results"])
    [written] = api.get(f"/v1/file_imports/{created['id']}/records").json_body["data"]
    assert written["date"] == "2026-10-29"


def test_closing_needs_an_approver_and_reopening_an_admin(api, world):
    for role in ("viewer", "preparer"):
        refused = close(api, world, **as_role(world, role))
        assert refused.status_code == 403 and "approver" in refused.json_body["message"]
    assert api.get(f"/v1/reconciliations/{world['id']}/period_closes", **as_role(world, "viewer")).status_code == 200
    made = closed_september(api, world)
    for role in ("viewer", "preparer", "approver"):
        assert api.post(f"{made['url']}/reopen", {"reason": "x"}, **as_role(world, role)).status_code == 403
    assert api.get(made["url"], **as_role(world, "viewer")).json_body["status"] == "closed"


def test_close_and_reopen_tell_the_bus(api, services, world):
    bus = BusListener(services)
    made = closed_september(api, world)
    api.post(f"{made['url']}/reopen", {"reason": "late fee"}, **as_role(world, "admin"))

    [closed] = bus.events("period.closed")
    [reopened] = bus.events("period.reopened")
    assert closed["data"]["id"] == reopened["data"]["id"] == made["id"]
    assert closed["data"]["url"] == made["url"] and closed["data"]["open_exceptions"] == 2
    assert closed["data"]["actor"] == made["closed_by"]
    assert (reopened["data"]["status"], reopened["data"]["reopen_reason"]) == ("reopened", "late fee")


def test_the_close_report_export_lists_what_was_open_at_close_with_its_explanations(api, services, worker, world):
    made = closed_september(api, world)

    export, data = export_of(api, worker, services, "period_close_report",
                             filters={"reconciliation_id": world["id"], "period_close_id": made["id"]})

    rows = csv_rows(data)
    assert [(r["line"], r["data_stream_key"], r["record_count"]) for r in rows] == [
        ("exception", "bank", "2"), ("exception", "ledger", "3"), ("unmatched", "", "5")]
    assert rows[0]["explanation"] == "bank 25.00 is a card refund due in October"
    assert (rows[0]["credits_minor"], rows[0]["credits"]) == ("3100", "31.00")
    assert rows[2]["credits"] == "77.00" and {r["note"] for r in rows} == {made["note"]}
    assert export["rows_written"] == 3
    unknown = api.post("/v1/exports", {"kind": "period_close_report",
                                       "filters": {"reconciliation_id": world["id"], "period_close_id": 999999}})
    assert unknown.status_code == 404
    missing = api.post("/v1/exports", {"kind": "period_close_report", "filters": {"reconciliation_id": world["id"]}})
    assert missing.status_code == 422 and missing.json_body["errors"][0]["field"] == "filters.period_close_id"


def test_a_stream_is_not_taken_out_of_nor_the_reconciliation_deleted_while_it_has_a_closed_period(api, world):
    rid = world["id"]
    made = closed_september(api, world)
    assert api.post("/v1/data_streams", {"key": "fees", "name": "Fees"}).status_code == 201
    why = f"it has the closed period 2026-09-01..2026-09-30 (period close {made['id']}); an admin must reopen it"

    # Taking ledger out would leave its September records (and the stream) unguarded: refused.
    dropped = api.patch(f"/v1/reconciliations/{rid}", {"side_b_stream_keys": ["fees"]})
    assert dropped.status_code == 409 and why in dropped.json_body["message"], dropped.json_body
    assert "data stream 'ledger'" in dropped.json_body["message"]
    assert [s["key"] for s in api.get(f"/v1/reconciliations/{rid}").json_body["side_b_streams"]] == ["ledger"]
    assert api.delete("/v1/data_streams/ledger").status_code == 409  # still used
    assert api.get(f"/v1/records/{world['ledger'][1]}").status_code == 200
    deleted = api.delete(f"/v1/reconciliations/{rid}")
    assert deleted.status_code == 409 and why in deleted.json_body["message"], deleted.json_body
    assert api.get(f"/v1/reconciliations/{rid}").status_code == 200
    assert api.get(f"/v1/reconciliation_matches/{world['match_id']}").status_code == 200  # not unmatched
    # Adding a stream, or a rename, changes nothing dated inside: allowed.
    added = api.patch(f"/v1/reconciliations/{rid}", {"side_b_stream_keys": ["ledger", "fees"], "name": "Renamed"})
    assert added.status_code == 200, added.json_body

    # Once an admin reopens the period, both are allowed again.
    assert api.post(f"{made['url']}/reopen", {"reason": "ledger moves out"}, **as_role(world, "admin")).status_code \
        == 200
    assert api.patch(f"/v1/reconciliations/{rid}", {"side_b_stream_keys": ["fees"]}).status_code == 200
    assert api.delete("/v1/data_streams/ledger").status_code == 204
    assert api.delete(f"/v1/reconciliations/{rid}").status_code == 204


@pytest.fixture
def runtime(services):
    from app import app
    from chalicelib.local.runtime import LocalRuntime

    return LocalRuntime(app, services.aws.sqs, "us-east-1", log=print, redelivery_seconds=0)


def test_a_statement_keeps_no_balance_day_inside_a_closed_period_and_warns_of_it(api, services, runtime, world):
    from tests.integration.test_statement_imports import BAI2, next_day, statement_into, stream

    stream(api, "operating", "123456")
    created = api.post("/v1/reconciliations", {"name": "Operating", "run_type": "batch",
                                               "side_a_stream_keys": ["operating"], "side_b_stream_keys": ["ledger"]})
    assert created.status_code == 201, created.json_body
    path = "/v1/data_streams/operating/file_imports"
    assert statement_into(api, services, runtime, path, BAI2)["status"] == "completed"  # 2026-11-22: 1,125.00
    made = api.post(f"/v1/reconciliations/{created.json_body['id']}/period_closes",
                    {"period_start": "2026-11-01", "period_end": "2026-11-22", "note": "November to the 22nd"})
    assert made.status_code == 201, made.json_body

    # The bank sends 2026-11-22 again (balances alone), closing at 1,300.00: the day is not kept.
    reissued = ("01,BANKID,ACME,261124,0800,2,,,2/\n02,ACME,BANKID,1,261122,,USD,2/\n"
                "03,123456,USD,010,100000,,,015,130000,,/\n49,230000,2/\n98,230000,1,4/\n99,230000,1,6/\n")
    job = statement_into(api, services, runtime, path, reissued)
    assert job["status"] == "completed", job
    [warning] = [w for w in job["error_details"]["warnings"] if "2026-11-22" in w]
    assert warning.startswith("balance of account 123456: not kept: ")
    assert (f"is dated 2026-11-22, inside the closed period 2026-11-01..2026-11-22 of reconciliation "
            f"{created.json_body['id']} (period close {made.json_body['id']}); an admin must reopen it first") in warning
    assert job["error_details"]["warning_count"] == len(job["error_details"]["warnings"])
    [day] = api.get("/v1/data_streams/operating/balances").json_body["data"]
    assert (day["date"], day["closing_booked"]) == ("2026-11-22", 112500)

    # A day outside the period is kept as ever.
    assert statement_into(api, services, runtime, path, next_day(112500, 120000))["status"] == "completed"
    days = api.get("/v1/data_streams/operating/balances").json_body["data"]
    assert [(d["date"], d["closing_booked"]) for d in days] == [("2026-11-23", 120000), ("2026-11-22", 112500)]


def test_a_statement_import_that_ends_failed_keeps_no_balance(api, services, runtime, world):
    """Every transaction dated inside a closed period fails, so the import ends failed: its statement's
    balance day (after the period) is not kept either: balances come from a completed import only."""
    from datetime import date

    from tests.integration.test_statement_imports import statement_into, stream
    from tests.support.mt940_files import Line, Statement, write_file

    stream(api, "operating", "123456")
    created = api.post("/v1/reconciliations", {"name": "Operating", "run_type": "batch",
                                               "side_a_stream_keys": ["operating"], "side_b_stream_keys": ["ledger"]})
    assert created.status_code == 201, created.json_body
    made = api.post(f"/v1/reconciliations/{created.json_body['id']}/period_closes",
                    {"period_start": "2026-11-01", "period_end": "2026-11-05", "note": "To the 5th"})
    assert made.status_code == 201, made.json_body
    path = "/v1/data_streams/operating/file_imports"

    def statement(day: int, amount: int) -> bytes:
        return write_file([Statement("123456", [Line(amount, value_date=date(2026, 11, day))], currency="USD",
                                     opening_date=date(2026, 11, day), closing_date=date(2026, 11, 6))])

    failed = statement_into(api, services, runtime, path, statement(5, 1500), format="mt940",
                            filename="statement.sta")

    assert failed["status"] == "failed", failed
    assert api.get("/v1/data_streams/operating/balances").json_body["data"] == []
    assert api.get("/v1/data_streams/operating").json_body["latest_balance"] is None
    # The same day from an import that completes is kept
    done = statement_into(api, services, runtime, path, statement(6, 1700), format="mt940", filename="statement.sta")
    assert done["status"] == "completed", done
    [day] = api.get("/v1/data_streams/operating/balances").json_body["data"]
    assert (day["date"], day["closing_booked"], day["file_import_id"]) == ("2026-11-06", 1700, done["id"])


def test_a_close_waits_for_a_write_that_passed_the_guard_and_no_guard_passes_while_it_closes(
        api, services, ingest, reconciliation, monkeypatch):
    """The closing fence: a manual match that read the closed periods (registering as a writer in the
    same conditional write) is waited out by a close that lands meanwhile, so the close counts what the
    match left; a request reaching the guard while the fence is up is refused (409)."""
    import threading
    import time
    from concurrent.futures import ThreadPoolExecutor
    from datetime import date

    from chalicelib.adapters.dynamodb import keys
    from chalicelib.domain.period_closes import Period
    from chalicelib.services import audit
    from chalicelib.services import matches as match_service
    from chalicelib.services import period_closes as close_service
    rid = reconciliation["id"]
    paused = ingest(record("bank", 1, 700, "2026-11-02")) + ingest(record("ledger", 1, 700, "2026-11-02"))
    late = ingest(record("bank", 2, 800, "2026-11-03")) + ingest(record("ledger", 2, 800, "2026-11-03"))
    passed, release = threading.Event(), threading.Event()
    real_check = match_service.check_manual_match

    def pausing_check(*args, **kwargs):  # after the guard, before the write: the request is slow here
        if not passed.is_set():
            passed.set()
            assert release.wait(20)
        return real_check(*args, **kwargs)

    monkeypatch.setattr(match_service, "check_manual_match", pausing_check)

    def match():
        with close_service.fencing(services.ports), audit.acting_as("api_key:1"), audit.collecting_notes():
            return match_service.create_manual_match(services.ports, "acme", rid, paused, False, None)

    def close():
        return close_service.close(services.ports, "acme", rid, Period(date(2026, 11, 1), date(2026, 11, 30)),
                                   "November", {}, "user:1")

    with ThreadPoolExecutor(2) as pool:
        matching = pool.submit(match)
        assert passed.wait(20)
        closing = pool.submit(close)
        fence = keys.closed_periods("acme", rid)
        deadline = time.monotonic() + 20
        while "closing_since" not in (services.table.get(fence) or {}):
            assert time.monotonic() < deadline, "the close never put its fence up"
            time.sleep(0.02)
        # The fence is up and the close waits for the match: a request reaching the guard now is refused
        refused = api.post("/v1/reconciliation_matches", {"reconciliation_id": rid, "record_ids": late})
        assert refused.status_code == 409 and "being closed right now" in refused.json_body["message"]
        assert not closing.done()
        release.set()
        made, closed = matching.result(timeout=30), closing.result(timeout=30)

    assert made.status == "confirmed"
    # The close counted after the match landed: only the late pair is unmatched in the period
    assert sum(m.count for m in closed.unmatched) == 2
    assert "closing_since" not in services.table.get(fence)
    assert api.post("/v1/reconciliation_matches", {"reconciliation_id": rid, "record_ids": late}).status_code == 409
