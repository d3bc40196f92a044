"""Four-eyes approvals over HTTP (on moto, the app in-process): a reconciliation's policy holds
manual matches, unmatches, dismissals and accepted investigations above an amount for a second
person; the held action changes nothing until an approver other than its requester approves it
(then it runs, once) or rejects it; a pending one expires."""
from __future__ import annotations

from datetime import timedelta

import pytest

from chalicelib.adapters.dynamodb import keys
from chalicelib.domain.clock import clock_in_use, utc_now
from chalicelib.domain.errors import Conflict
from chalicelib.domain.events import event_id
from chalicelib.domain.users import Role
from chalicelib.services import approvals as approval_service
from chalicelib.services import events as event_service
from tests.integration.conftest import record
from tests.integration.test_events import BusListener
from tests.support.crashes import Replaced, ports_swapped
from tests.support.people import add_user

RULE = {"name": "Amount within 3 days", "priority": 1, "conditions": [
    {"field": "amount", "operator": "equals"}, {"field": "date", "operator": "within", "days": 3}]}
ALL_ACTIONS = ["manual_match", "unmatch", "dismissal", "accept_investigation"]


def days_ago(n: int) -> str:
    return (utc_now().date() - timedelta(days=n)).isoformat()


class FixedClock:
    def __init__(self, moment) -> None:
        self.moment = moment

    def current(self):
        return self.moment


@pytest.fixture
def people(services):
    """Two approvers, a preparer and an admin, each signed in with the provider's token."""
    users = {name: add_user(services.users, "acme", name, role) for name, role in (
        ("alice", Role.APPROVER), ("bob", Role.APPROVER), ("pat", Role.PREPARER), ("ada", Role.ADMIN))}
    return {name: {"key": None, "headers": {"Authorization": f"Bearer {services.identity.token_for(user.idp_user_id)}"},
                   "actor": f"user:{user.id}"} for name, user in users.items()}


def signed(person: dict) -> dict:
    return {"key": person["key"], "headers": person["headers"]}


def set_policy(api, reconciliation, **policy):
    response = api.request("PUT", f"/v1/reconciliations/{reconciliation['id']}/approval_policy", policy)
    assert response.status_code == 200, response.json_body
    return response.json_body


def manual(api, reconciliation, record_ids, **kw):
    return api.post("/v1/reconciliation_matches", {"reconciliation_id": reconciliation["id"],
                                                   "record_ids": record_ids}, **kw)


def statuses(api, record_ids):
    return [api.get(f"/v1/records/{rid}").json_body["status"] for rid in record_ids]


def entries(api, resource_type, resource_id, action=None):
    found = api.get(f"/v1/audit_events?resource_type={resource_type}&resource_id={resource_id}").json_body["data"]
    return [e for e in found if action in (None, e["action"])]


# The policy ---------------------------------------------------------------------------------------

def test_the_policy_defaults_to_none_and_only_an_admin_sets_it_audited(api, reconciliation, people):
    path = f"/v1/reconciliations/{reconciliation['id']}/approval_policy"
    default = api.get(path).json_body
    assert default == {"reconciliation_id": reconciliation["id"], "actions": [], "thresholds": {"*": 0},
                       "threshold": 0, "threshold_decimal_places": 2, "expires_after_minutes": 4320, "updated_at": None,
                       "updated_by": None}
    body = {"actions": ["dismissal", "manual_match"], "threshold": 100000, "expires_after_minutes": 60}
    refused = api.request("PUT", path, body, **signed(people["alice"]))
    assert refused.status_code == 403 and "needs the admin role" in refused.json_body["message"]
    assert api.request("PUT", path, {"threshold": -1}, **signed(people["ada"])).status_code == 422
    assert api.request("PUT", path, {"actions": ["approve_everything"]}, **signed(people["ada"])).status_code == 422

    saved = api.request("PUT", path, body, **signed(people["ada"]))

    assert saved.status_code == 200, saved.json_body
    assert saved.json_body["actions"] == ["dismissal", "manual_match"] and saved.json_body["threshold"] == 100000
    assert saved.json_body["updated_by"] == people["ada"]["actor"]
    assert api.get(path).json_body == saved.json_body
    [entry] = entries(api, "approval_policy", reconciliation["id"], "approval_policy.updated")
    assert entry["actor"] == people["ada"]["actor"]
    assert entry["summary"]["before"]["actions"] == [] and entry["summary"]["after"]["thresholds"] == {"*": 100000}
    assert api.get("/v1/reconciliations/999999/approval_policy").status_code == 404


# Manual matches ---------------------------------------------------------------------------------

def test_a_manual_match_at_or_below_the_threshold_goes_through(api, ingest, reconciliation):
    set_policy(api, reconciliation, actions=["manual_match"], threshold=5000)  # 50.00
    records = ingest(record("bank", 1, 5000)) + ingest(record("ledger", 1, 5000))

    made = manual(api, reconciliation, records)

    assert made.status_code == 201, made.json_body
    assert statuses(api, records) == ["reconciled", "reconciled"]
    assert api.get("/v1/approvals").json_body["data"] == []


def test_above_the_threshold_a_match_waits_changes_nothing_and_another_approver_runs_it(
        api, services, ingest, reconciliation, people):
    bus = BusListener(services)
    set_policy(api, reconciliation, actions=["manual_match"], threshold=5000)
    bank = ingest(record("bank", 1, 3000), record("bank", 2, 2001))  # a side of 50.01: above 50.00
    ledger = ingest(record("ledger", 1, 5001))

    held = manual(api, reconciliation, bank + ledger, **signed(people["alice"]))

    assert held.status_code == 202, held.json_body
    approval = held.json_body
    assert (approval["status"], approval["action"], approval["amount"], approval["amount_decimal_places"]) == (
        "pending", "manual_match", 5001, 2)
    assert approval["requested_by"] == people["alice"]["actor"] and approval["url"] == f"/v1/approvals/{approval['id']}"
    assert approval["params"]["record_ids"] == bank + ledger and approval["threshold"] == 5000
    # Nothing changed: the records are where they were, no match exists
    assert statuses(api, bank + ledger) == ["unreconciled"] * 3
    assert api.get(f"/v1/reconciliation_matches?reconciliation_id={reconciliation['id']}").json_body["data"] == []
    [requested] = entries(api, "approval", approval["id"])
    assert (requested["action"], requested["actor"]) == ("approval.requested", people["alice"]["actor"])
    assert not entries(api, "reconciliation_match", approval["id"])  # no entry of a match that was not made

    # The requester never approves their own; a preparer may not approve at all
    own = api.post(f"{approval['url']}/approve", **signed(people["alice"]))
    assert own.status_code == 403 and "another approver" in own.json_body["message"]
    assert api.post(f"{approval['url']}/approve", **signed(people["pat"])).status_code == 403
    assert api.get(approval["url"]).json_body["status"] == "pending"

    approved = api.post(f"{approval['url']}/approve", **signed(people["bob"]))

    assert approved.status_code == 200, approved.json_body
    done = approved.json_body
    assert (done["status"], done["decided_by"]) == ("approved", people["bob"]["actor"]) and done["completed_at"]
    match_id = done["result"]["reconciliation_match_id"]
    match = api.get(f"/v1/reconciliation_matches/{match_id}").json_body
    assert match["status"] == "confirmed" and sorted(r["id"] for r in match["records"]) == sorted(bank + ledger)
    assert statuses(api, bank + ledger) == ["reconciled"] * 3
    [made] = entries(api, "reconciliation_match", match_id, "reconciliation_match.created")
    assert made["actor"] == people["alice"]["actor"]
    assert (made["summary"]["approval_id"], made["summary"]["approved_by"]) == (approval["id"], people["bob"]["actor"])
    assert [e["action"] for e in entries(api, "approval", approval["id"])] == ["approval.approved",
                                                                               "approval.requested"]
    assert [e["data"]["id"] for e in bus.events("approval.requested")] == [approval["id"]]
    [told] = bus.events("approval.approved")
    assert told["data"]["status"] == "approved" and told["data"]["result"] == {"reconciliation_match_id": match_id}
    assert [e["data"]["id"] for e in bus.events("reconciliation_match.created")] == [match_id]


def test_two_approvals_of_one_request_run_the_action_once(api, services, ingest, reconciliation, people,
                                                          monkeypatch):
    set_policy(api, reconciliation, actions=["manual_match"], threshold=0)
    records = ingest(record("bank", 1, 700)) + ingest(record("ledger", 1, 700))
    approval = manual(api, reconciliation, records, **signed(people["alice"])).json_body
    bob, ada = people["bob"]["actor"], people["ada"]["actor"]
    execute, runs, meanwhile = approval_service._execute, [], []

    def execute_while_others_click(ports, executing, approver):
        # The second click (and another approver's) arrive while the first runs the action
        for other in (bob, ada):
            try:
                approval_service.approve(ports, "acme", approval["id"], other)
            except Conflict as conflict:
                meanwhile.append(str(conflict))
        runs.append(executing.id)
        return execute(ports, executing, approver)

    monkeypatch.setattr(approval_service, "_execute", execute_while_others_click)
    first = approval_service.approve(services.ports, "acme", approval["id"], bob)

    assert first.status.value == "approved" and runs == [approval["id"]]
    assert "being approved by your earlier request" in meanwhile[0] and "is executing" in meanwhile[1]
    matches = api.get(f"/v1/reconciliation_matches?reconciliation_id={reconciliation['id']}").json_body["data"]
    assert len(matches) == 1
    # A double click over HTTP after it ran: the same approval, nothing run again; anyone else's is 409
    again = api.post(f"/v1/approvals/{approval['id']}/approve", **signed(people["bob"]))
    assert again.status_code == 200 and again.json_body["result"] == {"reconciliation_match_id": matches[0]["id"]}
    other = api.post(f"/v1/approvals/{approval['id']}/approve", **signed(people["ada"]))
    assert other.status_code == 409 and "approved" in other.json_body["message"]
    assert len(entries(api, "approval", approval["id"], "approval.approved")) == 1
    assert len(api.get(f"/v1/reconciliation_matches?reconciliation_id={reconciliation['id']}")
               .json_body["data"]) == 1


def test_a_rejection_needs_a_reason_and_leaves_everything_as_it_was(api, ingest, reconciliation, people):
    set_policy(api, reconciliation, actions=["manual_match"], threshold=0)
    records = ingest(record("bank", 1, 700)) + ingest(record("ledger", 1, 700))
    approval = manual(api, reconciliation, records, **signed(people["alice"])).json_body
    url = approval["url"]

    assert api.post(f"{url}/reject", {"reason": "  "}, **signed(people["bob"])).status_code == 422
    own = api.post(f"{url}/reject", {"reason": "mine"}, **signed(people["alice"]))
    assert own.status_code == 403
    rejected = api.post(f"{url}/reject", {"reason": "the ledger entry is a duplicate"}, **signed(people["bob"]))

    assert rejected.status_code == 200, rejected.json_body
    assert (rejected.json_body["status"], rejected.json_body["rejection_reason"]) == (
        "rejected", "the ledger entry is a duplicate")
    assert statuses(api, records) == ["unreconciled"] * 2
    late = api.post(f"{url}/approve", **signed(people["ada"]))
    assert late.status_code == 409 and "rejected" in late.json_body["message"]
    [entry] = entries(api, "approval", approval["id"], "approval.rejected")
    assert entry["actor"] == people["bob"]["actor"]
    assert entry["summary"]["rejection_reason"] == "the ledger entry is a duplicate"


def test_an_approval_the_world_overtook_fails_with_the_reason(api, ingest, reconciliation, people):
    set_policy(api, reconciliation, actions=["manual_match"], threshold=1000)
    bank = ingest(record("bank", 1, 2000))
    ledger = ingest(record("ledger", 1, 2000), record("ledger", 2, 500), record("ledger", 3, 1500))
    approval = manual(api, reconciliation, bank + ledger[:1], **signed(people["alice"])).json_body
    # Meanwhile the bank record is matched otherwise, by an admin who lifted the threshold for it
    set_policy(api, reconciliation, actions=["manual_match"], threshold=10 ** 6)
    assert manual(api, reconciliation, bank + ledger[1:]).status_code == 201

    approved = api.post(f"{approval['url']}/approve", **signed(people["bob"]))

    assert approved.status_code == 200, approved.json_body
    assert approved.json_body["status"] == "failed"
    assert f"record {bank[0]} is already matched" in approved.json_body["failure_reason"]
    assert statuses(api, ledger[:1]) == ["unreconciled"]
    assert api.get("/v1/approvals?status=failed").json_body["data"][0]["id"] == approval["id"]


# Unmatches, dismissals, investigations -------------------------------------------------------------

def test_an_unmatch_of_a_confirmed_match_waits_for_its_approval(api, ingest, reconciliation, people):
    records = ingest(record("bank", 1, 9900)) + ingest(record("ledger", 1, 9900))
    match = manual(api, reconciliation, records).json_body
    set_policy(api, reconciliation, actions=["unmatch"], threshold=0)

    held = api.delete(f"/v1/reconciliation_matches/{match['id']}", **signed(people["alice"]))

    assert held.status_code == 202, held.json_body
    assert (held.json_body["action"], held.json_body["target_type"], held.json_body["target_id"]) == (
        "unmatch", "reconciliation_match", match["id"])
    assert api.get(f"/v1/reconciliation_matches/{match['id']}").json_body["status"] == "confirmed"
    assert statuses(api, records) == ["reconciled"] * 2
    done = api.post(f"/v1/approvals/{held.json_body['id']}/approve", **signed(people["bob"])).json_body
    assert done["status"] == "approved"
    assert api.get(f"/v1/reconciliation_matches/{match['id']}").status_code == 404
    assert statuses(api, records) == ["unreconciled"] * 2
    [entry] = entries(api, "reconciliation_match", match["id"], "reconciliation_match.deleted")
    assert entry["summary"]["approval_id"] == held.json_body["id"]


def _old_exceptions(api, ingest, reconciliation):
    """Bank 25.00 and ledger 40.00 unmatched for weeks: an open exception each."""
    ingest(record("bank", 9, 2500, days_ago(40)))
    ingest(record("ledger", 9, 4000, days_ago(30)))
    run = api.post(f"/v1/reconciliations/{reconciliation['id']}/runs").json_body
    assert run["status"] == "completed"
    return {e["data_stream_key"]: e["id"] for e in api.get(
        f"/v1/reconciliation_exceptions?reconciliation_id={reconciliation['id']}").json_body["data"]}


def test_a_dismissal_above_the_threshold_waits_by_patch_and_by_bulk(api, worker, ingest, reconciliation, people):
    exceptions = _old_exceptions(api, ingest, reconciliation)
    set_policy(api, reconciliation, actions=["dismissal"], threshold=3000)  # 30.00: the bank's 25.00 goes through
    bank, ledger = exceptions["bank"], exceptions["ledger"]
    assert api.patch(f"/v1/reconciliation_exceptions/{bank}", {"status": "dismissed"}).status_code == 200

    held = api.patch(f"/v1/reconciliation_exceptions/{ledger}", {"status": "dismissed", "title": "Fee"},
                     **signed(people["pat"]))

    assert held.status_code == 202, held.json_body
    assert (held.json_body["amount"], held.json_body["params"]["title"]) == (4000, "Fee")
    assert api.get(f"/v1/reconciliation_exceptions/{ledger}").json_body["status"] == "open"
    bulk = api.post("/v1/reconciliation_exceptions/bulk", {"action": "status", "status": "dismissed",
                                                           "ids": [ledger]}, **signed(people["pat"])).json_body
    worker.drain()
    [item] = api.get(bulk["url"]).json_body["results"]
    # The same dismissal of the same exception waits already: the bulk item names that approval
    assert item["status"] == "skipped" and item["error"].startswith(f"approval {held.json_body['id']} requested")
    waiting = api.get(f"/v1/approvals?status=pending&reconciliation_id={reconciliation['id']}").json_body["data"]
    assert [a["id"] for a in waiting] == [held.json_body["id"]]
    assert api.get(f"/v1/reconciliation_exceptions/{ledger}").json_body["status"] == "open"

    first = api.post(f"/v1/approvals/{held.json_body['id']}/approve", **signed(people["alice"])).json_body

    assert first["status"] == "approved" and first["result"] == {"status": "dismissed"}
    detail = api.get(f"/v1/reconciliation_exceptions/{ledger}").json_body
    assert (detail["status"], detail["title"]) == ("dismissed", "Fee")
    # A title change alone is not a dismissal: it goes through
    assert api.patch(f"/v1/reconciliation_exceptions/{ledger}", {"title": "Bank fee?"}).status_code == 200
    # A dismissal the status table refuses is refused as before (409), never held
    assert api.patch(f"/v1/reconciliation_exceptions/{bank}", {"status": "open"}).status_code == 200
    assert api.patch(f"/v1/reconciliation_exceptions/{bank}", {"status": "resolved"}).status_code == 200  # 25.00
    set_policy(api, reconciliation, actions=["dismissal"], threshold=0)
    refused = api.patch(f"/v1/reconciliation_exceptions/{bank}", {"status": "dismissed"})
    assert refused.status_code == 409 and "cannot become dismissed" in refused.json_body["message"]
    assert len(api.get("/v1/approvals").json_body["data"]) == 1


def test_resolving_is_held_as_a_dismissal_by_patch_and_by_bulk(api, worker, ingest, reconciliation, people):
    exceptions = _old_exceptions(api, ingest, reconciliation)
    set_policy(api, reconciliation, actions=["dismissal"], threshold=3000)
    ledger = exceptions["ledger"]

    held = api.patch(f"/v1/reconciliation_exceptions/{ledger}", {"status": "resolved"}, **signed(people["pat"]))

    assert held.status_code == 202, held.json_body
    assert (held.json_body["action"], held.json_body["params"]["status"]) == ("dismissal", "resolved")
    assert held.json_body["description"].startswith(f"Resolve exception {ledger}")
    assert api.get(f"/v1/reconciliation_exceptions/{ledger}").json_body["status"] == "open"
    bulk = api.post("/v1/reconciliation_exceptions/bulk", {"action": "status", "status": "resolved",
                                                           "ids": [ledger]}, **signed(people["pat"])).json_body
    worker.drain()
    [item] = api.get(bulk["url"]).json_body["results"]
    assert item["status"] == "skipped" and item["error"].startswith("approval ")
    assert api.get(f"/v1/reconciliation_exceptions/{ledger}").json_body["status"] == "open"

    done = api.post(f"/v1/approvals/{held.json_body['id']}/approve", **signed(people["alice"])).json_body

    assert done["status"] == "approved" and done["result"] == {"status": "resolved"}
    assert api.get(f"/v1/reconciliation_exceptions/{ledger}").json_body["status"] == "resolved"


def test_a_dismissal_of_an_exception_changed_since_the_request_fails(api, services, ingest, reconciliation, people):
    exceptions = _old_exceptions(api, ingest, reconciliation)
    set_policy(api, reconciliation, actions=["dismissal"], threshold=3000)
    ledger = exceptions["ledger"]
    held = api.patch(f"/v1/reconciliation_exceptions/{ledger}", {"status": "dismissed", "title": "Fee"},
                     **signed(people["pat"])).json_body
    assert held["status"] == "pending" and held["params"]["totals"]["record_count"] == 1
    assert held["params"]["version"] == services.ports.exceptions.get("acme", ledger).version

    # Someone edits the exception meanwhile: the dismissal was asked about the exception as it was
    assert api.patch(f"/v1/reconciliation_exceptions/{ledger}", {"title": "Bank fee?"}).status_code == 200
    failed = api.post(f"/v1/approvals/{held['id']}/approve", **signed(people["alice"])).json_body

    assert failed["status"] == "failed" and f"exception {ledger} changed since the request" in failed["failure_reason"]
    detail = api.get(f"/v1/reconciliation_exceptions/{ledger}").json_body
    assert (detail["status"], detail["title"]) == ("open", "Bank fee?")


def test_a_dismissal_of_an_exception_whose_records_changed_fails(api, services, ingest, reconciliation, people):
    exceptions = _old_exceptions(api, ingest, reconciliation)
    set_policy(api, reconciliation, actions=["dismissal"], threshold=3000)
    ledger = exceptions["ledger"]
    held = api.patch(f"/v1/reconciliation_exceptions/{ledger}", {"status": "dismissed"},
                     **signed(people["pat"])).json_body
    # A record joins the open exception (its totals change; its version does not)
    exception = services.ports.exceptions.get("acme", ledger)
    grown = dict(exception.totals, record_count=2, debit_sum=int(exception.totals["debit_sum"]) + 9900)
    services.ports.exceptions.set_totals(exception, grown, None, exception.currency)

    failed = api.post(f"/v1/approvals/{held['id']}/approve", **signed(people["alice"])).json_body

    assert failed["status"] == "failed" and "1 then, 2 now" in failed["failure_reason"]
    assert api.get(f"/v1/reconciliation_exceptions/{ledger}").json_body["status"] == "open"


def test_an_accepted_investigation_waits_for_its_approval(api, worker, ingest, reconciliation, people):
    assert api.post(f"/v1/reconciliations/{reconciliation['id']}/rules", RULE).status_code == 201
    bank = ingest(record("bank", 1, 125000, days_ago(20), description="ACME PAYOUT"))
    ledger = ingest(record("ledger", 1, 125000, days_ago(14), description="Acme payout"))
    api.post(f"/v1/reconciliations/{reconciliation['id']}/runs")
    [row] = api.get("/v1/reconciliation_exceptions?data_stream_key=bank").json_body["data"]
    investigation = api.post(f"/v1/reconciliation_exceptions/{row['id']}/investigations").json_body
    worker.drain()
    set_policy(api, reconciliation, actions=ALL_ACTIONS, threshold=100000)
    accept = f"/v1/reconciliation_exceptions/{row['id']}/investigations/{investigation['id']}/accept"

    held = api.post(accept, **signed(people["pat"]))

    assert held.status_code == 202, held.json_body
    assert (held.json_body["action"], held.json_body["amount"]) == ("accept_investigation", 125000)
    assert statuses(api, bank + ledger) == ["unreconciled"] * 2  # nor did the inner manual match ask again
    assert len(api.get("/v1/approvals").json_body["data"]) == 1
    done = api.post(f"{held.json_body['url']}/approve", **signed(people["bob"])).json_body
    assert done["status"] == "approved", done
    assert statuses(api, bank + ledger) == ["reconciled"] * 2
    detail = api.get(f"/v1/reconciliation_exceptions/{row['id']}").json_body
    assert detail["investigation"]["accepted_match_id"] == done["result"]["reconciliation_match_id"]


def _investigated(api, worker, ingest, reconciliation) -> tuple[dict, str]:
    """An investigation of the bank's exception suggesting the ledger's 1,250.00; its accept's path."""
    assert api.post(f"/v1/reconciliations/{reconciliation['id']}/rules", RULE).status_code == 201
    ingest(record("bank", 1, 125000, days_ago(20), description="ACME PAYOUT"))
    ingest(record("ledger", 1, 125000, days_ago(14), description="Acme payout"))
    api.post(f"/v1/reconciliations/{reconciliation['id']}/runs")
    [row] = api.get("/v1/reconciliation_exceptions?data_stream_key=bank").json_body["data"]
    investigation = api.post(f"/v1/reconciliation_exceptions/{row['id']}/investigations").json_body
    worker.drain()
    return row, f"/v1/reconciliation_exceptions/{row['id']}/investigations/{investigation['id']}/accept"


def test_a_policy_holding_manual_matches_holds_an_accepted_investigation(api, worker, ingest, reconciliation,
                                                                         people):
    _, accept = _investigated(api, worker, ingest, reconciliation)
    set_policy(api, reconciliation, actions=["manual_match"], threshold=100000)

    held = api.post(accept, **signed(people["pat"]))

    assert held.status_code == 202, held.json_body
    assert (held.json_body["action"], held.json_body["amount"]) == ("accept_investigation", 125000)
    assert api.get(f"/v1/reconciliation_matches?reconciliation_id={reconciliation['id']}").json_body["data"] == []


def test_an_accept_of_records_in_a_closed_period_is_refused_not_held(api, worker, ingest, reconciliation, people):
    _, accept = _investigated(api, worker, ingest, reconciliation)
    set_policy(api, reconciliation, actions=ALL_ACTIONS, threshold=0)
    closed = api.post(f"/v1/reconciliations/{reconciliation['id']}/period_closes",
                      {"period_start": days_ago(25), "period_end": days_ago(10), "note": "Signed off"},
                      **signed(people["alice"]))
    assert closed.status_code == 201, closed.json_body

    refused = api.post(accept, **signed(people["pat"]))

    assert refused.status_code == 409, refused.json_body
    assert "closed" in refused.json_body["message"]
    assert api.get("/v1/approvals").json_body["data"] == []


# Expiry, machines, lists --------------------------------------------------------------------------

def test_a_pending_approval_expires_when_read_or_swept_and_can_no_longer_be_decided(
        api, services, ingest, reconciliation, people):
    set_policy(api, reconciliation, actions=["manual_match"], threshold=0, expires_after_minutes=60)
    read = manual(api, reconciliation, ingest(record("bank", 1, 700)) + ingest(record("ledger", 1, 700)),
                  **signed(people["alice"])).json_body
    swept = manual(api, reconciliation, ingest(record("bank", 2, 800)) + ingest(record("ledger", 2, 800)),
                   **signed(people["alice"])).json_body
    assert approval_service.sweep(services.ports) == 0  # not yet due

    later = utc_now() + timedelta(minutes=61)
    assert approval_service.sweep(services.ports, now=later) == 2
    with clock_in_use(FixedClock(later)):  # an API key: a person's token would have expired by then
        shown = api.get(read["url"]).json_body
    late = api.post(f"{read['url']}/approve", **signed(people["bob"]))
    assert shown["status"] == "expired" and shown["completed_at"]
    assert late.status_code == 409 and "expired on" in late.json_body["message"]
    assert api.get(swept["url"]).json_body["status"] == "expired"
    [entry] = entries(api, "approval", swept["id"], "approval.expired")
    assert entry["actor"] == f"system:approval_expiry:{swept['id']}"
    assert api.get(f"/v1/reconciliation_matches?reconciliation_id={reconciliation['id']}").json_body["data"] == []


def test_an_overdue_approval_expires_at_its_first_read(api, services, ingest, reconciliation, people):
    set_policy(api, reconciliation, actions=["manual_match"], threshold=0, expires_after_minutes=1)
    approval = manual(api, reconciliation, ingest(record("bank", 1, 700)) + ingest(record("ledger", 1, 700)),
                      **signed(people["alice"])).json_body
    with clock_in_use(FixedClock(utc_now() + timedelta(minutes=2))):
        listed = api.get("/v1/approvals?status=pending").json_body["data"]
        expired = api.get("/v1/approvals?status=expired").json_body["data"]
    assert listed == [] and [a["id"] for a in expired] == [approval["id"]]
    assert len(entries(api, "approval", approval["id"], "approval.expired")) == 1


def test_a_machines_request_names_its_key_and_a_key_never_decides(api, ingest, reconciliation, people):
    set_policy(api, reconciliation, actions=["manual_match"], threshold=0)
    approval = manual(api, reconciliation, ingest(record("bank", 1, 700)) + ingest(record("ledger", 1, 700))).json_body
    assert approval["requested_by"].startswith("api_key:")

    by_key = api.post(f"{approval['url']}/approve")

    assert by_key.status_code == 403 and "a person's decision" in by_key.json_body["message"]
    assert api.post(f"{approval['url']}/reject", {"reason": "no"}).status_code == 403
    assert api.post(f"{approval['url']}/approve", **signed(people["alice"])).json_body["status"] == "approved"


def test_the_list_filters_by_status_reconciliation_and_requester(api, ingest, reconciliation, people):
    set_policy(api, reconciliation, actions=["manual_match"], threshold=0)
    by_alice = manual(api, reconciliation, ingest(record("bank", 1, 700)) + ingest(record("ledger", 1, 700)),
                      **signed(people["alice"])).json_body
    by_bob = manual(api, reconciliation, ingest(record("bank", 2, 800)) + ingest(record("ledger", 2, 800)),
                    **signed(people["bob"])).json_body
    api.post(f"{by_bob['url']}/reject", {"reason": "no"}, **signed(people["alice"]))

    def ids(query):
        answer = api.get(f"/v1/approvals{query}")
        assert answer.status_code == 200, answer.json_body
        return [a["id"] for a in answer.json_body["data"]]

    assert ids("") == [by_bob["id"], by_alice["id"]]
    assert ids("?status=pending") == [by_alice["id"]] and ids("?status=rejected") == [by_bob["id"]]
    assert ids(f"?requested_by={people['bob']['actor']}") == [by_bob["id"]]
    assert ids(f"?reconciliation_id={reconciliation['id']}&limit=1") == [by_bob["id"]]
    assert ids("?reconciliation_id=999999") == []
    assert api.get("/v1/approvals?status=maybe").status_code == 422
    assert api.get("/v1/approvals/999999").status_code == 404


def test_the_document_states_the_202_of_each_gated_action_and_the_new_routes(api):
    document = api.get("/v1/openapi.json", key=None).json_body
    gated = [("/v1/reconciliation_matches", "post"), ("/v1/reconciliation_matches/{id}", "delete"),
             ("/v1/reconciliation_exceptions/{id}", "patch"),
             ("/v1/reconciliation_exceptions/{id}/investigations/{investigation_id}/accept", "post")]
    for path, method in gated:
        answer = document["paths"][path][method]["responses"]["202"]
        assert answer["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/ApprovalOut"}
    assert document["paths"]["/v1/approvals/{id}/approve"]["post"]["x-role"] == "approver"
    assert document["paths"]["/v1/reconciliations/{id}/approval_policy"]["put"]["x-role"] == "admin"
    assert "ApprovalOut" in document["components"]["schemas"]


# Outcomes owed in the same write ----------------------------------------------------------------

def _dying_at_announcing(services, event_type: str, approval_id: int):
    """Ports whose process dies as the approval's `event_type` announcement is reserved (after the
    move that owes it is saved, before its audit entry and its event)."""
    from tests.integration.test_events import Died
    owed = event_id("acme", event_type, f"approval {approval_id}")
    ledger = services.ports.event_ledger

    def reserve(environment, reserved_id):
        if reserved_id == owed:
            raise Died()
        return ledger.reserve(environment, reserved_id)

    return ports_swapped(services, event_ledger=Replaced(ledger, reserve=reserve))


def test_an_approval_whose_process_died_before_announcing_its_end_is_announced_by_the_sweeper(
        api, services, ingest, reconciliation, people):
    from tests.integration.test_events import Died
    bus = BusListener(services)
    set_policy(api, reconciliation, actions=["manual_match"], threshold=0)
    approval = manual(api, reconciliation, ingest(record("bank", 1, 700)) + ingest(record("ledger", 1, 700)),
                      **signed(people["alice"])).json_body
    with _dying_at_announcing(services, "approval.approved", approval["id"]), pytest.raises(Died):
        approval_service.approve(services.ports, "acme", approval["id"], people["bob"]["actor"])
    assert api.get(approval["url"]).json_body["status"] == "approved"
    assert bus.events("approval.approved") == [] and entries(api, "approval", approval["id"], "approval.approved") == []

    assert event_service.publish_parked(services.ports, now=utc_now() + timedelta(seconds=30)) == 0  # left to it
    assert event_service.publish_parked(services.ports, now=utc_now() + timedelta(minutes=3)) == 1
    assert event_service.publish_parked(services.ports, now=utc_now() + timedelta(minutes=10)) == 0

    [told] = bus.events("approval.approved")
    assert told["data"]["status"] == "approved" and told["data"]["decided_by"] == people["bob"]["actor"]
    [entry] = entries(api, "approval", approval["id"], "approval.approved")
    assert entry["actor"] == people["bob"]["actor"]
    assert keys.PENDING_EVENTS not in services.table.get(keys.approval("acme", approval["id"]))


def test_an_expiry_whose_sweeper_died_before_announcing_it_is_announced_by_a_later_sweep(
        api, services, ingest, reconciliation, people):
    from tests.integration.test_events import Died
    bus = BusListener(services)
    set_policy(api, reconciliation, actions=["manual_match"], threshold=0, expires_after_minutes=60)
    approval = manual(api, reconciliation, ingest(record("bank", 1, 700)) + ingest(record("ledger", 1, 700)),
                      **signed(people["alice"])).json_body
    later = utc_now() + timedelta(minutes=61)
    with _dying_at_announcing(services, "approval.expired", approval["id"]), pytest.raises(Died):
        approval_service.sweep(services.ports, now=later)
    assert services.ports.approvals.get("acme", approval["id"]).status.value == "expired"
    assert approval_service.sweep(services.ports, now=later) == 0  # no longer active: the sweep alone forgets it
    assert bus.events("approval.expired") == []

    assert event_service.publish_parked(services.ports, now=utc_now() + timedelta(minutes=3)) == 1

    [told] = bus.events("approval.expired")
    assert told["data"]["id"] == approval["id"] and told["data"]["status"] == "expired"
    [entry] = entries(api, "approval", approval["id"], "approval.expired")
    assert entry["actor"] == f"system:approval_expiry:{approval['id']}"


def test_the_document_states_the_409_of_a_match_confirmed_or_deleted_in_a_closed_period(api):
    document = api.get("/v1/openapi.json", key=None).json_body
    assert "409" in document["paths"]["/v1/reconciliation_matches/{id}/confirm"]["post"]["responses"]
    assert "409" in document["paths"]["/v1/reconciliation_matches/{id}"]["delete"]["responses"]


# An approval its approving process left executing -------------------------------------------------

def _dying_in_the_action(monkeypatch, after_the_action: bool) -> None:
    """The approving process dies while the action runs: after it was made, or before it began."""
    from tests.integration.test_events import Died
    execute = approval_service._execute

    def dying(ports, executing, approver):
        if after_the_action:
            execute(ports, executing, approver)
        raise Died()

    monkeypatch.setattr(approval_service, "_execute", dying)


def _left_executing(services, approval_id: int, approver: str) -> None:
    from tests.integration.test_events import Died
    with pytest.raises(Died):
        approval_service.approve(services.ports, "acme", approval_id, approver)
    assert services.ports.approvals.get("acme", approval_id).status.value == "executing"


def test_a_match_made_before_its_approver_died_is_settled_approved_by_the_sweeper(
        api, services, ingest, reconciliation, people, monkeypatch):
    bus = BusListener(services)
    set_policy(api, reconciliation, actions=["manual_match"], threshold=0)
    records = ingest(record("bank", 1, 700)) + ingest(record("ledger", 1, 700))
    approval = manual(api, reconciliation, records, **signed(people["alice"])).json_body
    _dying_in_the_action(monkeypatch, after_the_action=True)
    _left_executing(services, approval["id"], people["bob"]["actor"])
    monkeypatch.undo()
    assert approval_service.sweep(services.ports, now=utc_now() + timedelta(minutes=2)) == 0  # it may still run

    assert approval_service.sweep(services.ports, now=utc_now() + timedelta(minutes=16)) == 1

    settled = api.get(approval["url"]).json_body
    [match] = api.get(f"/v1/reconciliation_matches?reconciliation_id={reconciliation['id']}").json_body["data"]
    assert (settled["status"], settled["decided_by"]) == ("approved", people["bob"]["actor"])
    assert settled["result"] == {"reconciliation_match_id": match["id"]} and settled["completed_at"]
    [told] = bus.events("approval.approved")
    assert told["data"]["status"] == "approved" and told["data"]["result"] == settled["result"]
    [entry] = entries(api, "approval", approval["id"], "approval.approved")
    assert entry["actor"] == f"system:approval_settle:{approval['id']}"
    assert keys.PENDING_EVENTS not in services.table.get(keys.approval("acme", approval["id"]))
    assert approval_service.sweep(services.ports, now=utc_now() + timedelta(minutes=30)) == 0  # once
    assert len(bus.events("approval.approved")) == 1


def test_a_dismissal_whose_approver_died_before_it_is_settled_failed_and_nothing_moves(
        api, services, ingest, reconciliation, people, monkeypatch):
    bus = BusListener(services)
    exceptions = _old_exceptions(api, ingest, reconciliation)
    set_policy(api, reconciliation, actions=["dismissal"], threshold=0)
    ledger = exceptions["ledger"]
    held = api.patch(f"/v1/reconciliation_exceptions/{ledger}", {"status": "dismissed"},
                     **signed(people["pat"])).json_body
    _dying_in_the_action(monkeypatch, after_the_action=False)
    _left_executing(services, held["id"], people["alice"]["actor"])
    monkeypatch.undo()

    assert approval_service.sweep(services.ports, now=utc_now() + timedelta(minutes=16)) == 1

    settled = api.get(held["url"]).json_body
    assert settled["status"] == "failed" and "stopped before" in settled["failure_reason"]
    assert api.get(f"/v1/reconciliation_exceptions/{ledger}").json_body["status"] == "open"
    [told] = bus.events("approval.approved")
    assert told["data"]["status"] == "failed"
    # A dismissal made before the process died is settled approved
    again = api.patch(f"/v1/reconciliation_exceptions/{ledger}", {"status": "dismissed"},
                      **signed(people["pat"])).json_body
    _dying_in_the_action(monkeypatch, after_the_action=True)
    _left_executing(services, again["id"], people["alice"]["actor"])
    monkeypatch.undo()
    assert approval_service.sweep(services.ports, now=utc_now() + timedelta(minutes=16)) == 1
    assert api.get(again["url"]).json_body["result"] == {"status": "dismissed"}
    assert api.get(f"/v1/reconciliation_exceptions/{ledger}").json_body["status"] == "dismissed"


def test_an_unmatch_stopped_half_way_is_finished_and_settled_approved(
        api, services, ingest, reconciliation, people, monkeypatch):
    from chalicelib.services import matches as match_service
    from tests.integration.test_events import Died
    records = ingest(record("bank", 1, 9900)) + ingest(record("ledger", 1, 9900))
    match = manual(api, reconciliation, records).json_body
    set_policy(api, reconciliation, actions=["unmatch"], threshold=0)
    held = api.delete(f"/v1/reconciliation_matches/{match['id']}", **signed(people["alice"])).json_body

    def dying(*args, **kwargs):
        raise Died()

    monkeypatch.setattr(match_service, "release_members", dying)  # marked unmatching, then the process dies
    _left_executing(services, held["id"], people["bob"]["actor"])
    monkeypatch.undo()
    assert services.ports.matches.find("acme", match["id"]).unmatching

    assert approval_service.sweep(services.ports, now=utc_now() + timedelta(minutes=16)) == 1

    assert api.get(held["url"]).json_body["status"] == "approved"
    assert api.get(f"/v1/reconciliation_matches/{match['id']}").status_code == 404
    assert statuses(api, records) == ["unreconciled"] * 2
    # An unmatch that never began (its match still confirmed) is settled failed: the match stands
    again = manual(api, reconciliation, records).json_body
    set_policy(api, reconciliation, actions=["unmatch"], threshold=0)
    second = api.delete(f"/v1/reconciliation_matches/{again['id']}", **signed(people["alice"])).json_body
    _dying_in_the_action(monkeypatch, after_the_action=False)
    _left_executing(services, second["id"], people["bob"]["actor"])
    monkeypatch.undo()
    assert approval_service.sweep(services.ports, now=utc_now() + timedelta(minutes=16)) == 1
    assert api.get(second["url"]).json_body["status"] == "failed"
    assert api.get(f"/v1/reconciliation_matches/{again['id']}").json_body["status"] == "confirmed"



def test_an_approved_unmatch_an_error_of_ours_cut_short_stays_executing_and_is_finished_by_the_sweeper(
        api, services, ingest, reconciliation, people, monkeypatch):
    records = ingest(record("bank", 1, 9900)) + ingest(record("ledger", 1, 9900))
    match = manual(api, reconciliation, records).json_body
    set_policy(api, reconciliation, actions=["unmatch"], threshold=0)
    held = api.delete(f"/v1/reconciliation_matches/{match['id']}", **signed(people["alice"])).json_body
    claims, releases = services.ports.claims, []
    release = claims.release_record

    def throttled(*args, **kwargs):  # one record opens again, the other's write is throttled
        releases.append(args)
        if len(releases) == 2:
            raise RuntimeError("ProvisionedThroughputExceededException")
        return release(*args, **kwargs)

    monkeypatch.setattr(claims, "release_record", throttled)
    assert api.post(f"/v1/approvals/{held['id']}/approve", **signed(people["bob"])).status_code == 500
    monkeypatch.undo()
    # Not failed: the action stopped half-way (one record open, the match hidden)
    assert api.get(held["url"]).json_body["status"] == "executing"
    assert sorted(statuses(api, records)) == ["reconciled", "unreconciled"]
    assert services.ports.matches.find("acme", match["id"]).unmatching

    assert approval_service.sweep(services.ports, now=utc_now() + timedelta(minutes=16)) == 1

    assert api.get(held["url"]).json_body["status"] == "approved"
    assert api.get(f"/v1/reconciliation_matches/{match['id']}").status_code == 404
    assert statuses(api, records) == ["unreconciled"] * 2


def test_an_approved_manual_match_is_made_only_with_the_shares_and_difference_approved(
        api, ingest, reconciliation, people):
    set_policy(api, reconciliation, actions=["manual_match"], thresholds={"USD": 50000})  # 500.00
    invoice = ingest(record("ledger", 1, 100000, direction="debit"))[0]
    payment, other = ingest(record("bank", 1, 99990), record("bank", 2, 40000))
    # Alice asks: the 999.90 payment against the 1,000.00 invoice, a 0.10 fee allowed
    body = {"reconciliation_id": reconciliation["id"], "record_ids": [payment, invoice]}
    held = api.post("/v1/reconciliation_matches", {**body, "allow_difference": True, "reason": "0.10 bank fee"},
                    **signed(people["alice"]))
    assert held.status_code == 202 and held.json_body["params"]["difference"] == 10
    assert held.json_body["params"]["shares"] == []  # both taken whole
    # Meanwhile Pat pays 400.00 of the invoice (under the threshold: made at once)
    part = api.post("/v1/reconciliation_matches", {"reconciliation_id": reconciliation["id"], "record_ids": [
        other, invoice], "allocations": [{"record_id": invoice, "amount": 40000}]}, **signed(people["pat"]))
    assert part.status_code == 201, part.json_body

    done = api.post(f"/v1/approvals/{held.json_body['id']}/approve", **signed(people["bob"])).json_body

    # Made now, it would take 600.00 of the invoice and leave 399.90 nobody approved
    assert done["status"] == "failed" and "the records changed since the request" in done["failure_reason"]
    assert "difference of 39990 (minor units) where 10 was approved" in done["failure_reason"]
    matches = api.get(f"/v1/reconciliation_matches?reconciliation_id={reconciliation['id']}").json_body["data"]
    assert [m["id"] for m in matches] == [part.json_body["id"]]
    assert statuses(api, [payment]) == ["unreconciled"]


# Four eyes by person ------------------------------------------------------------------------------

def test_a_request_sent_with_a_persons_own_key_is_theirs_and_they_cannot_approve_it(
        api, ingest, reconciliation, people):
    set_policy(api, reconciliation, actions=["manual_match"], threshold=0)
    made = api.post("/v1/api_keys", {"label": "ada's script"}, **signed(people["ada"]))
    assert made.status_code == 201, made.json_body
    ada_id = int(people["ada"]["actor"].split(":")[1])
    assert made.json_body["owner_user_id"] == ada_id
    # A key made with ada's key is ada's too; one made with the environment's machine key is nobody's
    chained = api.post("/v1/api_keys", {"label": "ada's other"}, key=made.json_body["secret"]).json_body
    machine = api.post("/v1/api_keys", {"label": "nightly"}).json_body
    assert (chained["owner_user_id"], machine["owner_user_id"]) == (ada_id, None)
    key_actor = f"api_key:{made.json_body['id']}"

    held = manual(api, reconciliation, ingest(record("bank", 1, 700)) + ingest(record("ledger", 1, 700)),
                  key=made.json_body["secret"])

    assert held.status_code == 202, held.json_body
    approval = held.json_body
    assert (approval["requested_by"], approval["requested_with"]) == (people["ada"]["actor"], key_actor)
    [requested] = entries(api, "approval", approval["id"], "approval.requested")
    assert requested["actor"] == key_actor  # the audit trail names the credential that sent it
    own = api.post(f"{approval['url']}/approve", **signed(people["ada"]))
    assert own.status_code == 403 and f"(with {key_actor}, your key)" in own.json_body["message"]
    assert api.post(f"{approval['url']}/reject", {"reason": "mine"}, **signed(people["ada"])).status_code == 403
    ids = [a["id"] for a in api.get(f"/v1/approvals?requested_by={people['ada']['actor']}").json_body["data"]]
    assert ids == [approval["id"]]
    assert [a["id"] for a in api.get(f"/v1/approvals?requested_by={key_actor}").json_body["data"]] == ids
    done = api.post(f"{approval['url']}/approve", **signed(people["bob"]))
    assert done.status_code == 200 and done.json_body["status"] == "approved"
    [entry] = entries(api, "reconciliation_match", done.json_body["result"]["reconciliation_match_id"],
                      "reconciliation_match.created")
    assert entry["actor"] == key_actor


def test_an_action_held_with_nobody_to_name_as_its_requester_is_refused(api, services, ingest, reconciliation):
    from chalicelib.domain.errors import Forbidden
    from chalicelib.services import matches as match_service
    set_policy(api, reconciliation, actions=["manual_match"], threshold=0)
    records = ingest(record("bank", 1, 700)) + ingest(record("ledger", 1, 700))

    with pytest.raises(Forbidden, match="must name who asked"):
        match_service.create_manual_match(services.ports, "acme", reconciliation["id"], records, False, None)

    assert api.get("/v1/approvals").json_body["data"] == []
    assert statuses(api, records) == ["unreconciled"] * 2


# One pending approval per action and target ---------------------------------------------------------

def test_a_second_request_for_the_same_action_answers_with_the_pending_approval(
        api, services, ingest, reconciliation, people):
    set_policy(api, reconciliation, actions=ALL_ACTIONS, threshold=0)
    records = ingest(record("bank", 1, 700)) + ingest(record("ledger", 1, 700))
    first = manual(api, reconciliation, records, **signed(people["alice"]))
    assert first.status_code == 202, first.json_body

    # The same records in another order, by another person: the same approval, nothing new stored
    again = manual(api, reconciliation, list(reversed(records)), **signed(people["pat"]))

    assert again.status_code == 202 and again.json_body["id"] == first.json_body["id"]
    assert again.json_body["requested_by"] == people["alice"]["actor"]
    assert [a["id"] for a in api.get("/v1/approvals").json_body["data"]] == [first.json_body["id"]]
    assert len(entries(api, "approval", first.json_body["id"], "approval.requested")) == 1
    # Other records are another target
    other = manual(api, reconciliation, ingest(record("bank", 2, 800)) + ingest(record("ledger", 2, 800)),
                   **signed(people["alice"]))
    assert other.status_code == 202 and other.json_body["id"] != first.json_body["id"]
    # Once the approval is no longer pending (rejected), the target may be asked again: a new approval
    api.post(f"{first.json_body['url']}/reject", {"reason": "not yet"}, **signed(people["bob"]))
    anew = manual(api, reconciliation, records, **signed(people["alice"]))
    assert anew.status_code == 202 and anew.json_body["id"] not in (first.json_body["id"], other.json_body["id"])
    assert anew.json_body["status"] == "pending"
    # An expired one too
    later = utc_now() + timedelta(days=4)
    with clock_in_use(FixedClock(later)):
        renewed = manual(api, reconciliation, records)
    assert renewed.status_code == 202 and renewed.json_body["id"] != anew.json_body["id"]
    assert api.get(anew.json_body["url"]).json_body["status"] == "expired"


def test_requests_racing_for_the_same_target_store_one_pending_approval(api, services, ingest, reconciliation,
                                                                       people):
    from concurrent.futures import ThreadPoolExecutor

    from chalicelib.domain.approvals import ApprovalRequired
    from chalicelib.services import audit
    from chalicelib.services import matches as match_service
    set_policy(api, reconciliation, actions=["manual_match"], threshold=0)
    records = ingest(record("bank", 1, 700)) + ingest(record("ledger", 1, 700))

    def request(n: int) -> int | None:
        with audit.acting_as(people["alice" if n % 2 else "pat"]["actor"]), audit.collecting_notes():
            try:
                match_service.create_manual_match(services.ports, "acme", reconciliation["id"], records, False, None)
            except ApprovalRequired as held:
                return held.approval.id
            except Conflict as busy:  # the first was still storing its approval after a wait: ask again
                assert "being requested right now" in str(busy)
                return None
        raise AssertionError("the match was not held")

    with ThreadPoolExecutor(8) as pool:
        answered = list(pool.map(request, range(8)))

    stored = [a["id"] for a in api.get("/v1/approvals").json_body["data"]]
    assert len(stored) == 1 and set(answered) - {None} == set(stored)


# Thresholds per currency ---------------------------------------------------------------------------

def test_thresholds_are_per_currency_and_a_currency_without_one_is_held(api, ingest, reconciliation, people):
    path = f"/v1/reconciliations/{reconciliation['id']}/approval_policy"
    bad = api.request("PUT", path, {"actions": ["manual_match"], "thresholds": {"usd": 5}})
    assert bad.status_code == 422 and "thresholds.usd" in str(bad.json_body)
    both = api.request("PUT", path, {"actions": ["manual_match"], "thresholds": {"*": 5}, "threshold": 6})
    assert both.status_code == 422
    policy = set_policy(api, reconciliation, actions=["manual_match"],
                        thresholds={"USD": 100000, "JPY": 10000000})  # 1,000.00 USD; 100,000 JPY (at 2 places)
    assert (policy["thresholds"], policy["threshold"]) == ({"JPY": 10000000, "USD": 100000}, None)

    # 50,000 JPY is far above 1,000.00 read as any currency's: under its own threshold it goes through
    yen = ingest(record("bank", 1, 50000, currency="JPY")) + ingest(record("ledger", 1, 50000, currency="JPY"))
    assert manual(api, reconciliation, yen, **signed(people["alice"])).status_code == 201
    # 1,000.01 USD is above the USD threshold
    dollars = ingest(record("bank", 2, 100001)) + ingest(record("ledger", 2, 100001))
    held = manual(api, reconciliation, dollars, **signed(people["alice"]))
    assert held.status_code == 202, held.json_body
    assert (held.json_body["currency"], held.json_body["amount"], held.json_body["threshold"]) == ("USD", 100001,
                                                                                                   100000)
    # A currency the policy names no threshold for is held whatever its amount (the safe default)
    euros = ingest(record("bank", 3, 1, currency="EUR")) + ingest(record("ledger", 3, 1, currency="EUR"))
    unnamed = manual(api, reconciliation, euros, **signed(people["alice"]))
    assert unnamed.status_code == 202, unnamed.json_body
    assert (unnamed.json_body["currency"], unnamed.json_body["threshold"]) == ("EUR", None)
    # "*" (or the old `threshold`) gives the currencies not named one
    set_policy(api, reconciliation, actions=["manual_match"], thresholds={"USD": 100000}, threshold=500)
    more = ingest(record("bank", 4, 400, currency="EUR")) + ingest(record("ledger", 4, 400, currency="EUR"))
    assert manual(api, reconciliation, more, **signed(people["alice"])).status_code == 201
