"""GET /v1/overview: each reconciliation's last run, its open exceptions (count and amount per
currency) and what changed in the last day, and the imports in progress (on moto, through the API)."""
from datetime import timedelta

from chalicelib.domain.clock import utc_now
from tests.integration.conftest import record

RULE = {"name": "Amount", "priority": 1, "conditions": [{"field": "amount", "operator": "equals"},
                                                        {"field": "date", "operator": "within", "days": 3}]}


def days_ago(n: int) -> str:
    return (utc_now().date() - timedelta(days=n)).isoformat()


def test_the_overview_counts_open_exceptions_their_amounts_and_the_last_day(api, ingest, reconciliation):
    rid = reconciliation["id"]
    assert api.post(f"/v1/reconciliations/{rid}/rules", RULE).status_code == 201
    ingest(record("bank", 1, 1000, days_ago(20)), record("bank", 2, 2500, days_ago(40)),
           record("bank", 3, 700, days_ago(100), direction="debit"), record("bank", 4, 500, days_ago(10)))
    ingest(record("ledger", 1, 500, days_ago(10)), record("ledger", 2, 4000, days_ago(8)))
    run = api.post(f"/v1/reconciliations/{rid}/runs").json_body

    answer = api.get("/v1/overview")
    assert answer.status_code == 200, answer.json_body
    body = answer.json_body
    [row] = [r for r in body["reconciliations"] if r["id"] == rid]
    assert row["name"] == "Bank to ledger" and row["last_run"]["id"] == run["id"]
    assert row["last_run"]["status"] == "completed" and row["last_run"]["matched_records"] == 2
    # Bank: |35.00 - 7.00| = 28.00; ledger: 40.00. Both exceptions opened by this run, today.
    assert row["open_exceptions"] == {"count": 2, "investigating": 0, "mixed_currency": 0,
                                      "amounts": [{"currency": "USD", "decimal_places": 2, "amount": 2800 + 4000}]}
    assert row["since"] == {"runs_completed": 1, "runs_failed": 0, "exceptions_opened": 2, "exceptions_closed": 0}
    assert row["run_before"] is None  # no run completed before yesterday
    assert body["more_reconciliations"] is False and body["imports_in_progress"] == []

    [bank] = [e for e in api.get(f"/v1/reconciliation_exceptions?reconciliation_id={rid}").json_body["data"]
              if e["data_stream_key"] == "bank"]
    assert api.patch(f"/v1/reconciliation_exceptions/{bank['id']}", {"status": "dismissed"}).status_code == 200
    [row] = [r for r in api.get("/v1/overview").json_body["reconciliations"] if r["id"] == rid]
    assert row["open_exceptions"]["count"] == 1 and row["open_exceptions"]["amounts"][0]["amount"] == 4000
    assert row["open_exceptions"]["investigating"] == 0
    assert row["since"]["exceptions_closed"] == 1

    [ledger] = [e for e in api.get(f"/v1/reconciliation_exceptions?reconciliation_id={rid}&status=open").json_body["data"]]
    assert api.patch(f"/v1/reconciliation_exceptions/{ledger['id']}", {"status": "investigating"}).status_code == 200
    [row] = [r for r in api.get("/v1/overview").json_body["reconciliations"] if r["id"] == rid]
    assert (row["open_exceptions"]["count"], row["open_exceptions"]["investigating"]) == (1, 1)


def test_a_file_import_waiting_for_its_file_is_in_progress(api, reconciliation):
    created = api.post("/v1/data_streams/bank/file_imports", {"filename": "june.csv", "format": "csv"})
    assert created.status_code == 201, created.json_body
    [job] = api.get("/v1/overview").json_body["imports_in_progress"]
    assert (job["id"], job["status"], job["filename"], job["data_stream_key"]) == (
        created.json_body["id"], "pending", "june.csv", "bank")


def test_another_environment_sees_none_of_it(api, services, reconciliation):
    from chalicelib.services.api_keys import create_key

    api.post("/v1/data_streams/bank/file_imports", {"filename": "june.csv", "format": "csv"})
    other = create_key(services.api_keys, "globex")[1]
    body = api.get("/v1/overview", key=other).json_body
    assert body["reconciliations"] == [] and body["imports_in_progress"] == []
