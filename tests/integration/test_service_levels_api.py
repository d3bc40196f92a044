"""Service levels and routing over HTTP (on moto, through the API): the policy, each exception's
severity, due time and overdue, the queue's filters and the aging counts, the overdue event once,
and routing rules assigning what a run opens, handing on a deactivated user's exceptions."""
import dataclasses
from collections import Counter
from datetime import timedelta

import pytest

from chalicelib.adapters.dynamodb import keys
from chalicelib.domain.clock import iso, parse_iso, utc_now
from chalicelib.domain.users import Role
from chalicelib.services import service_levels
from tests.integration.conftest import record
from tests.support.people import add_user

SIDES = (("bank1", "bank2", "bank3"), ("ledger1", "ledger2", "ledger3"))
RULE = {"name": "Amount", "priority": 1, "conditions": [{"field": "amount", "operator": "equals"}]}
DUE = {"low": 240, "medium": 72, "high": 24, "critical": 2}


def days_ago(n: int) -> str:
    return (utc_now().date() - timedelta(days=n)).isoformat()


@pytest.fixture
def recon(api):
    """Six streams (three a side) of one reconciliation: a run leaves an exception in each."""
    for key in SIDES[0] + SIDES[1]:
        assert api.post("/v1/data_streams", {"key": key, "name": key.title()}).status_code == 201
    created = api.post("/v1/reconciliations", {"name": "Six streams", "run_type": "batch",
                                               "side_a_stream_keys": list(SIDES[0]),
                                               "side_b_stream_keys": list(SIDES[1])})
    assert created.status_code == 201, created.json_body
    assert api.post(f"/v1/reconciliations/{created.json_body['id']}/rules", RULE).status_code == 201
    return created.json_body


def run_leaving_exceptions(api, ingest, worker, recon):
    """Per stream, one record 40 days old that nothing matches; USD, the first stream's 5,000.00."""
    ingest(*[record(key, 1, 500_000 if n == 0 else 100 + n, days_ago(40))
             for n, key in enumerate(SIDES[0] + SIDES[1])])
    run = api.post(f"/v1/reconciliations/{recon['id']}/runs")
    assert run.status_code == 202, run.json_body
    worker.drain()
    page = api.get(f"/v1/reconciliation_exceptions?reconciliation_id={recon['id']}&limit=100").json_body
    assert len(page["data"]) == 6
    return {e["data_stream_key"]: e for e in page["data"]}


def queue(api, recon, **filters):
    query = "&".join(f"{k}={v}" for k, v in filters.items())
    response = api.get(f"/v1/reconciliation_exceptions?reconciliation_id={recon['id']}&{query}")
    assert response.status_code == 200, response.json_body
    return response.json_body["data"]


def test_the_policy_is_read_replaced_audited_and_reset(api, recon):
    base = f"/v1/reconciliations/{recon['id']}/service_levels"
    default = api.get(base).json_body
    assert default["default"] is True and default["version"] == 0 and set(default["due_in_hours"]) == set(DUE)
    refused = api.request("PUT", base, {"due_in_hours": {**DUE, "low": 0}, "amount_thresholds": {"usd": {"high": 1}}})
    assert refused.status_code == 422
    assert {e["field"] for e in refused.json_body["errors"]} >= {"due_in_hours.low"}
    body = {"amount_thresholds": {"USD": {"medium": 10_000, "high": 100_000}, "*": {"high": 1}},
            "age_thresholds": {"critical": 365}, "due_in_hours": DUE, "expected_version": 0}
    saved = api.request("PUT", base, body)
    assert saved.status_code == 200, saved.json_body
    assert saved.json_body["version"] == 1 and saved.json_body["default"] is False
    assert saved.json_body["amount_thresholds"]["USD"] == {"medium": 10_000, "high": 100_000, "critical": None}
    assert api.get(base).json_body == saved.json_body
    assert api.request("PUT", base, body).status_code == 409  # expected_version 0 is no longer current
    trail = api.get(f"/v1/audit_events?resource_type=service_level_policy&resource_id={recon['id']}").json_body
    [entry] = [e for e in trail["data"] if e["action"] == "service_level_policy.updated"]
    assert entry["summary"]["after"]["due_in_hours"] == DUE and entry["summary"]["before"]["default"] is True
    reset = api.delete(base)
    assert reset.status_code == 200 and reset.json_body["default"] is True
    assert api.get("/v1/reconciliations/999999/service_levels").status_code == 404


def test_exceptions_carry_severity_due_and_overdue_and_the_queue_filters_on_them(api, ingest, worker, recon,
                                                                                  services):
    base = f"/v1/reconciliations/{recon['id']}/service_levels"
    assert api.request("PUT", base, {"amount_thresholds": {"USD": {"high": 100_000}}, "age_thresholds": {"medium": 30},
                          "due_in_hours": DUE}).status_code == 200
    exceptions = run_leaving_exceptions(api, ingest, worker, recon)
    big = exceptions["bank1"]
    assert big["severity"] == "high" and big["overdue"] is False and big["age_bucket"] == "30d_plus"
    assert parse_iso(big["due_at"]) == parse_iso(big["opened_at"]) + timedelta(hours=24)
    assert {e["severity"] for k, e in exceptions.items() if k != "bank1"} == {"medium"}  # 40 days old
    assert [e["id"] for e in queue(api, recon, severity="high")] == [big["id"]]
    assert len(queue(api, recon, age_bucket="30d_plus")) == 6 and queue(api, recon, age_bucket="0_1d") == []
    assert queue(api, recon, overdue="true") == []
    assert api.get("/v1/reconciliation_exceptions?severity=urgent").status_code == 422

    # The big one opened 25 hours ago (as if stored then): overdue now; its event goes once.
    opened = utc_now() - timedelta(hours=25)
    services.table.update(keys.reconciliation_exception("acme", big["id"]), "SET opened_at = :o",
                          values={":o": iso(opened)})
    assert [e["id"] for e in queue(api, recon, overdue="true")] == [big["id"]]
    assert api.get(f"/v1/reconciliation_exceptions/{big['id']}").json_body["overdue"] is True
    aging = api.get(f"{base}/aging").json_body
    counts = {k: v for k, v in aging.items() if k not in ("amounts_by_age_bucket", "unpriced")}
    assert counts == {"count": 6, "overdue": 1, "by_severity": {"low": 0, "medium": 5, "high": 1, "critical": 0},
                      "by_age_bucket": {"0_1d": 0, "1_3d": 0, "3_7d": 0, "7_30d": 0, "30d_plus": 6}}
    sizes = sum(abs(e["aggregates"]["total_amount"]) for e in exceptions.values())  # minor units, USD
    assert aging["unpriced"] == 0
    assert aging["amounts_by_age_bucket"] == {"0_1d": [], "1_3d": [], "3_7d": [], "7_30d": [], "30d_plus": [
        {"currency": "USD", "decimal_places": 2, "amount": sizes, "count": 6}]}
    [row] = [r for r in api.get("/v1/overview").json_body["reconciliations"] if r["id"] == recon["id"]]
    assert row["aging"] == aging  # the overview shows the same counts and amounts
    assert service_levels.sweep(services.ports)["overdue"] == 1
    assert service_levels.sweep(services.ports)["overdue"] == 0  # once: the mark holds
    assert service_levels.notify_overdue(services.ports, "acme") == 0
    trail = api.get(f"/v1/audit_events?resource_type=reconciliation_exception&resource_id={big['id']}").json_body
    told = [e for e in trail["data"] if e["action"] == "reconciliation_exception.overdue"]
    assert len(told) == 1 and told[0]["actor"] == f"system:service_levels:{recon['id']}"
    assert told[0]["summary"]["severity"] == "high"


def test_routing_rules_assign_what_a_run_opens_and_hand_on_a_deactivated_users(api, ingest, worker, recon,
                                                                                 services):
    team = [add_user(services.users, "acme", f"prep{n}", Role.PREPARER) for n in range(3)]
    add_user(services.users, "acme", "watcher", Role.VIEWER)  # not of the team
    services.identity.users.update({u.email: u.idp_user_id for u in team})  # the provider holds them
    rules = f"/v1/reconciliations/{recon['id']}/routing_rules"
    refused = api.post(rules, {"name": "x", "strategy": "round_robin", "team": {"user_ids": [999_999]},
                               "data_stream_key": "nope"})
    assert refused.status_code == 422
    assert {e["field"] for e in refused.json_body["errors"]} == {"data_stream_key", "team.user_ids[0]"}
    created = api.post(rules, {"name": "Preparers in turn", "strategy": "round_robin", "team": {"role": "preparer"}})
    assert created.status_code == 201, created.json_body
    rule = created.json_body
    assert api.get(f"{rules}/{rule['id']}").json_body == rule
    assert [r["id"] for r in api.get(rules).json_body["data"]] == [rule["id"]]

    exceptions = run_leaving_exceptions(api, ingest, worker, recon)
    holders = Counter(a["user_id"] for e in exceptions.values() for a in e["assignees"])
    assert holders == Counter({u.id: 2 for u in team})  # six exceptions, three people in turn
    first = team[0]
    assert api.get(f"/v1/audit_events?actor=system:routing_rule:{rule['id']}").json_body["data"]
    # A person's unassignment stands: the sweeper routes again only what was never routed.
    undone = exceptions["ledger3"]
    assert api.delete(f"/v1/reconciliation_exceptions/{undone['id']}/assignees/{undone['assignees'][0]['id']}"
                      ).status_code == 204
    assert service_levels.sweep(services.ports)["routed"] == 0
    assert api.get(f"/v1/reconciliation_exceptions/{undone['id']}").json_body["assignees"] == []
    assert api.post(f"/v1/reconciliation_exceptions/{undone['id']}/assignees",
                    {"user_id": undone["assignees"][0]["user_id"]}).status_code == 201

    # The least loaded from now on; deactivating the first hands their two on, one to each of the others.
    patched = api.patch(f"{rules}/{rule['id']}", {"strategy": "least_loaded"})
    assert patched.status_code == 200 and patched.json_body["version"] == 2
    assert api.delete(f"/v1/users/{first.id}").status_code == 200
    after = queue(api, recon, limit=100)
    holders = Counter(a["user_id"] for e in after for a in e["assignees"])
    assert holders == Counter({team[1].id: 3, team[2].id: 3}) and sum(len(e["assignees"]) for e in after) == 6
    assert queue(api, recon, assignee_user_id=first.id) == []

    trail = api.get(f"/v1/audit_events?resource_type=routing_rule&resource_id={rule['id']}").json_body["data"]
    assert {e["action"] for e in trail} == {"routing_rule.created", "routing_rule.updated"}
    assert api.delete(f"{rules}/{rule['id']}").status_code == 204
    assert api.get(f"{rules}/{rule['id']}").status_code == 404


class CountingStore:
    """The real service level store, counting the reads of the environments' exceptions (the active
    ones, and the queue's whole index)."""

    def __init__(self, real) -> None:
        self._real = real
        self.summaries_read = Counter[str]()
        self.whole_index_read = Counter[str]()

    def summaries(self, environment):
        self.whole_index_read[environment] += 1
        return self._real.summaries(environment)

    def active_summaries(self, environment):
        self.summaries_read[environment] += 1
        return self._real.active_summaries(environment)

    def __getattr__(self, name):
        return getattr(self._real, name)


def test_a_sweep_reads_each_environments_exceptions_once(api, ingest, worker, recon, services):
    """Routing six new exceptions least loaded, their overdue events and the deactivated users'
    check: one read of the environment's exceptions in all (not one per reconciliation, nor per pick)."""
    team = [add_user(services.users, "acme", f"load{n}", Role.PREPARER) for n in range(3)]
    services.identity.users.update({u.email: u.idp_user_id for u in team})
    exceptions = run_leaving_exceptions(api, ingest, worker, recon)  # no rule yet: nobody assigned
    base = f"/v1/reconciliations/{recon['id']}"
    assert api.post(f"{base}/routing_rules", {"name": "Least loaded", "strategy": "least_loaded",
                                              "team": {"role": "preparer"}}).status_code == 201
    later = iso(utc_now() + timedelta(seconds=1))  # as if opened after the rule
    for e in exceptions.values():
        services.table.update(keys.reconciliation_exception("acme", e["id"]), "SET created_at = :c",
                              values={":c": later})
    counting = CountingStore(services.ports.service_levels)
    ports = dataclasses.replace(services.ports, service_levels=counting)
    counts = service_levels.sweep(ports)
    assert counts["routed"] == 6 and counts["errors"] == 0, counts
    assert counting.summaries_read["acme"] == 1 and set(counting.summaries_read.values()) == {1}
    assert not counting.whole_index_read  # the active exceptions' sparse read, not the queue's index
    holders = Counter(a["user_id"] for e in queue(api, recon, limit=100) for a in e["assignees"])
    assert holders == Counter({u.id: 2 for u in team})  # least loaded counts this sweep's own picks


def test_settling_a_pick_moves_the_routing_states_version(services):
    """On the real adapter: a router holding a read from before a pick was settled cannot write the
    state back (with the settled pick in it)."""
    store, environment = services.ports.service_levels, "acme"
    start = store.state(environment)
    assert store.advance(environment, start, 1, 1, 7, 1, utc_now())
    older = store.state(environment)
    store.settle(environment, 7)
    settled = store.state(environment)
    assert settled.version == older.version + 1 and 7 not in settled.pending
    assert not store.advance(environment, older, 1, 2, 8, 2, utc_now())
    store.settle(environment, 7)  # settled already: nothing moves
    assert store.state(environment).version == settled.version


def test_the_active_exceptions_read_names_the_open_ones_only(api, ingest, worker, recon, services):
    """The sparse read (each reconciliation's active exception guards, then the exceptions they
    name) finds what the queue's whole index holds as open, and leaves out an exception closed
    whose guard was never released (a stale guard)."""
    exceptions = run_leaving_exceptions(api, ingest, worker, recon)
    store = services.ports.service_levels
    ours = {e["id"] for e in exceptions.values()}
    assert {s.summary.id for s in store.active_summaries("acme")} >= ours
    closed = exceptions["bank2"]["id"]
    services.table.update(keys.reconciliation_exception("acme", closed), "SET #s = :r", names={"#s": "status"},
                          values={":r": "resolved"})  # as if the close's release of the guard failed
    found = {s.summary.id: s for s in store.active_summaries("acme")}
    assert ours - set(found) == {closed}
    whole = {s.summary.id: s for s in store.summaries("acme") if s.summary.status.value in ("open", "investigating")}
    assert set(found) == set(whole) and all(found[i] == whole[i] for i in found)
