"""The open exceptions of a deleted reconciliation stay on the queue (nothing closes them) but have no
service level any more: they leave routing (the loads), the overdue event, the aging counts, the
overview and the queue's service level filters (docs/service-levels.md)."""
from __future__ import annotations

from collections import Counter
from datetime import timedelta

from chalicelib.adapters.dynamodb import keys
from chalicelib.domain.clock import iso, utc_now
from chalicelib.domain.users import Role
from chalicelib.services import service_levels
from tests.integration.conftest import record
from tests.integration.test_service_levels_api import DUE, days_ago, recon, run_leaving_exceptions  # noqa: F401
from tests.support.people import add_user


def other_reconciliation(api) -> dict:
    for key in ("obank", "oledger"):
        assert api.post("/v1/data_streams", {"key": key, "name": key.title()}).status_code == 201
    created = api.post("/v1/reconciliations", {"name": "Other", "run_type": "batch",
                                               "side_a_stream_keys": ["obank"], "side_b_stream_keys": ["oledger"]})
    assert created.status_code == 201, created.json_body
    return created.json_body


def test_a_deleted_reconciliations_open_exceptions_leave_routing_aging_overview_and_sla_filters(
        api, ingest, worker, recon, services):  # noqa: F811
    team = [add_user(services.users, "acme", f"route{n}", Role.PREPARER) for n in range(2)]
    busy, idle = team
    services.identity.users.update({u.email: u.idp_user_id for u in team})  # the provider holds them
    gone = run_leaving_exceptions(api, ingest, worker, recon)
    for exception in gone.values():  # all six on one person, and long past due
        assert api.post(f"/v1/reconciliation_exceptions/{exception['id']}/assignees",
                        {"user_id": busy.id}).status_code == 201
        services.table.update(keys.reconciliation_exception("acme", exception["id"]), "SET opened_at = :o",
                              values={":o": iso(utc_now() - timedelta(days=30))})
    gone_ids = {e["id"] for e in gone.values()}
    assert gone_ids <= {e["id"] for e in api.get("/v1/reconciliation_exceptions?overdue=true&limit=100"
                                                 ).json_body["data"]}
    assert service_levels.aging_of(services.ports, "acme").count == 6

    other = other_reconciliation(api)
    assert api.post(f"/v1/reconciliations/{other['id']}/routing_rules", {
        "name": "Least loaded", "strategy": "least_loaded",
        "team": {"user_ids": [u.id for u in team]}}).status_code == 201
    assert api.delete(f"/v1/reconciliations/{recon['id']}").status_code == 204

    # Still on the queue, open, as they were
    left = api.get(f"/v1/reconciliation_exceptions?reconciliation_id={recon['id']}&limit=100").json_body["data"]
    assert {e["id"] for e in left} == gone_ids and {e["status"] for e in left} == {"open"}

    # Routing: the other reconciliation's two new exceptions go one to each: the six do not load `busy`
    ingest(record("obank", 1, 111, days_ago(40)), record("oledger", 1, 222, days_ago(40)))
    assert api.post(f"/v1/reconciliations/{other['id']}/runs").status_code == 202
    worker.drain()
    new = api.get(f"/v1/reconciliation_exceptions?reconciliation_id={other['id']}&limit=100").json_body["data"]
    assert len(new) == 2
    assert Counter(a["user_id"] for e in new for a in e["assignees"]) == Counter({busy.id: 1, idle.id: 1})

    # No overdue event for them; the aging counts, the overview and the filters leave them out
    assert service_levels.sweep(services.ports)["overdue"] == 0
    for exception_id in gone_ids:
        trail = api.get(f"/v1/audit_events?resource_type=reconciliation_exception&resource_id={exception_id}")
        assert "reconciliation_exception.overdue" not in {e["action"] for e in trail.json_body["data"]}
    assert service_levels.aging_of(services.ports, "acme").count == 2
    assert set(service_levels.agings(services.ports, "acme")) == {other["id"]}
    overview = api.get("/v1/overview").json_body["reconciliations"]
    assert [r["id"] for r in overview] == [other["id"]] and overview[0]["aging"]["count"] == 2
    for sla in ("overdue=true", "overdue=false", "severity=medium", "age_bucket=30d_plus"):
        page = api.get(f"/v1/reconciliation_exceptions?{sla}&limit=100").json_body
        assert not gone_ids & {e["id"] for e in page["data"]}, sla
        assert not api.get(f"/v1/reconciliation_exceptions?reconciliation_id={recon['id']}&{sla}").json_body["data"]

    # Deactivating `busy` hands on nothing of the deleted reconciliation's
    assert api.delete(f"/v1/users/{busy.id}").status_code == 200
    left = api.get(f"/v1/reconciliation_exceptions?reconciliation_id={recon['id']}&limit=100").json_body["data"]
    assert all([a["user_id"] for a in e["assignees"]] == [busy.id] for e in left)


def test_the_aging_counts_from_the_active_read_are_the_whole_index_counts(api, ingest, worker, recon,  # noqa: F811
                                                                        services):
    """The aging counts read the active exceptions' guards (not the queue's whole index): the same
    counts as the index gives, for the environment and for each reconciliation, with closed and
    investigating exceptions among them (bench/aging_reads.py compares them at size)."""
    from chalicelib.domain.reconciliation_exceptions import ACTIVE
    from chalicelib.domain.service_levels import aging

    base = f"/v1/reconciliations/{recon['id']}/service_levels"
    assert api.request("PUT", base, {"amount_thresholds": {"USD": {"high": 100_000}}, "age_thresholds": {"medium": 30},
                                     "due_in_hours": DUE}).status_code == 200
    made = run_leaving_exceptions(api, ingest, worker, recon)
    for key, status in (("bank1", "resolved"), ("bank2", "dismissed"), ("ledger1", "investigating")):
        changed = api.patch(f"/v1/reconciliation_exceptions/{made[key]['id']}", {"status": status})
        assert changed.status_code == 200, changed.json_body
    services.table.update(keys.reconciliation_exception("acme", made["ledger2"]["id"]), "SET opened_at = :o",
                          values={":o": iso(utc_now() - timedelta(days=30))})  # overdue
    other = other_reconciliation(api)
    ingest(record("obank", 1, 111, days_ago(40)))
    assert api.post(f"/v1/reconciliations/{other['id']}/runs").status_code == 202
    worker.drain()

    def from_the_index(reconciliation_id):
        now = utc_now()
        summaries = [s.summary for s in services.ports.service_levels.summaries("acme")
                     if s.summary.status in ACTIVE and s.summary.reconciliation_id == reconciliation_id]
        policy = service_levels.policy_of(services.ports, "acme", reconciliation_id)
        return aging([service_levels.of_summary(policy, s, now) for s in summaries], summaries)

    expected = {rid: from_the_index(rid) for rid in (recon["id"], other["id"])}
    assert expected[recon["id"]].count == 4 and expected[recon["id"]].overdue == 1
    assert expected[other["id"]].count == 1
    assert service_levels.agings(services.ports, "acme") == expected
    for rid, counted in expected.items():
        assert service_levels.aging_of(services.ports, "acme", rid) == counted
        assert api.get(f"/v1/reconciliations/{rid}/service_levels/aging").json_body["count"] == counted.count
    assert service_levels.aging_of(services.ports, "acme").count == 5
