"""Environments never see each other's data: every route, called with another environment's key,
answers 404 for the first environment's things and lists none of them."""
import pytest

from chalicelib.api.routers import ROUTERS
from chalicelib.domain.api_keys import hash_secret
from chalicelib.services.api_keys import create_key
from tests.support.people import add_user
from tests.support.worlds import dated, world_of_api

# How to call each route against environment A's data, and what environment B must get.
# A route missing here fails test_every_route_is_covered, so new routes cannot skip isolation.
PD = "/data_stream_property_definitions"
SL = "/v1/reconciliations/{reconciliation_id}/service_levels"
RR = "/v1/reconciliations/{reconciliation_id}/routing_rules"
CASES = {
    # Reference exchange rates (tests/integration/test_rate_streams.py: a rule and a run of B never use A's)
    ("POST", "/rate_streams"): ("POST", "/v1/rate_streams", {"key": "ecb", "name": "B's rates"}, "creates"),
    ("GET", "/rate_streams"): ("GET", "/v1/rate_streams", None, "lists_nothing"),
    ("GET", "/rate_streams/{key}"): ("GET", "/v1/rate_streams/ecb", None, 404),
    ("POST", "/rate_streams/{key}/rates"): ("POST", "/v1/rate_streams/ecb/rates", {
        "csv": "date,base,quote,rate\n2026-11-01,EUR,USD,9.99\n"}, 404),
    ("GET", "/rate_streams/{key}/rates"): ("GET", "/v1/rate_streams/ecb/rates", None, 404),
    ("POST", "/data_streams"): ("POST", "/v1/data_streams", {"key": "bank", "name": "B's own"}, "creates"),
    ("GET", "/data_streams"): ("GET", "/v1/data_streams", None, "lists_nothing"),
    ("GET", "/data_streams/{key}"): ("GET", "/v1/data_streams/bank", None, 404),
    ("PATCH", "/data_streams/{key}"): ("PATCH", "/v1/data_streams/bank", {"name": "stolen"}, 404),
    ("DELETE", "/data_streams/{key}"): ("DELETE", "/v1/data_streams/bank", None, 404),
    ("POST", PD): ("POST", f"/v1{PD}", {"key": "x", "name": "x", "type": "string", "data_stream_key": "bank"},
                   "refers_to_unknown_stream"),
    ("GET", PD): ("GET", f"/v1{PD}", None, "lists_nothing"),
    ("GET", PD + "/{id}"): ("GET", f"/v1{PD}/{{definition_id}}", None, 404),
    ("PATCH", PD + "/{id}"): ("PATCH", f"/v1{PD}/{{definition_id}}", {"name": "stolen"}, 404),
    ("DELETE", PD + "/{id}"): ("DELETE", f"/v1{PD}/{{definition_id}}", None, 404),
    ("POST", "/records/bulk"): ("POST", "/v1/records/bulk", {"records": [
        {"date": "2026-11-01", "data_stream_key": "bank", "amount": 1, "direction": "credit"}]},
        "bulk_item_refers_to_unknown_stream"),
    ("GET", "/bulk_requests/{id}"): ("GET", "/v1/bulk_requests/{bulk_request_id}", None, 404),
    ("GET", "/records"): ("GET", "/v1/records?data_stream_key=bank", None, "lists_nothing"),
    ("GET", "/records/{id}"): ("GET", "/v1/records/{record_id}", None, 404),
    ("DELETE", "/records/{id}"): ("DELETE", "/v1/records/{record_id}", None, 404),
    ("POST", "/data_streams/{key}/file_imports"): ("POST", "/v1/data_streams/bank/file_imports",
                                                   {"filename": "x.csv", "format": "csv"}, 404),
    ("GET", "/data_streams/{key}/file_imports"): ("GET", "/v1/data_streams/bank/file_imports", None, 404),
    ("GET", "/file_imports/{id}"): ("GET", "/v1/file_imports/{bulk_request_id}", None, 404),
    ("GET", "/file_imports/{id}/records"): ("GET", "/v1/file_imports/{bulk_request_id}/records", None, 404),
    ("GET", "/file_imports/{id}/results"): ("GET", "/v1/file_imports/{bulk_request_id}/results", None, 404),
    ("POST", "/file_imports/{id}/cancel"): ("POST", "/v1/file_imports/{bulk_request_id}/cancel", None, 404),
    # B's own import, routed among B's streams only (tests/integration/test_statement_imports.py)
    ("POST", "/file_imports"): ("POST", "/v1/file_imports", {"filename": "s.bai2", "format": "bai2"}, "creates"),
    ("GET", "/data_streams/{key}/balances"): ("GET", "/v1/data_streams/bank/balances", None, 404),
    # Reconciliations and their rules
    ("POST", "/reconciliations"): ("POST", "/v1/reconciliations", {
        "name": "R", "side_a_stream_keys": ["bank"], "side_b_stream_keys": ["ledger"]}, "refers_to_unknown_streams"),
    ("GET", "/reconciliations"): ("GET", "/v1/reconciliations", None, "lists_nothing"),
    ("GET", "/overview"): ("GET", "/v1/overview", None, "sees_an_empty_overview"),
    ("GET", "/reconciliations/{id}"): ("GET", "/v1/reconciliations/{reconciliation_id}", None, 404),
    ("PATCH", "/reconciliations/{id}"): ("PATCH", "/v1/reconciliations/{reconciliation_id}", {"name": "stolen"}, 404),
    ("DELETE", "/reconciliations/{id}"): ("DELETE", "/v1/reconciliations/{reconciliation_id}", None, 404),
    ("POST", "/reconciliations/{id}/rules"): ("POST", "/v1/reconciliations/{reconciliation_id}/rules", {
        "name": "R", "priority": 2, "conditions": [{"field": "amount", "operator": "equals"}]}, 404),
    ("GET", "/reconciliations/{id}/rules"): ("GET", "/v1/reconciliations/{reconciliation_id}/rules", None, 404),
    ("GET", "/reconciliation_rules/{id}"): ("GET", "/v1/reconciliation_rules/{rule_id}", None, 404),
    ("PATCH", "/reconciliation_rules/{id}"): ("PATCH", "/v1/reconciliation_rules/{rule_id}", {"name": "stolen"}, 404),
    ("DELETE", "/reconciliation_rules/{id}"): ("DELETE", "/v1/reconciliation_rules/{rule_id}", None, 404),
    ("POST", "/reconciliation_rules/{id}/dry_run"): ("POST", "/v1/reconciliation_rules/{rule_id}/dry_run", None, 404),
    ("POST", "/reconciliations/{id}/rule_suggestions"): ("POST", "/v1/reconciliations/{reconciliation_id}/"
                                                                 "rule_suggestions", {}, 404),
    ("POST", "/reconciliation_rules/{id}/accept"): ("POST", "/v1/reconciliation_rules/{rule_id}/accept",
                                                    {"priority": 9}, 404),
    ("POST", "/reconciliation_rules/{id}/dismiss"): ("POST", "/v1/reconciliation_rules/{rule_id}/dismiss", None, 404),
    ("POST", "/reconciliations/{id}/runs"): ("POST", "/v1/reconciliations/{reconciliation_id}/runs", None, 404),
    ("GET", "/reconciliations/{id}/runs"): ("GET", "/v1/reconciliations/{reconciliation_id}/runs", None, 404),
    ("GET", "/reconciliations/{id}/runs/{run_id}"): ("GET", "/v1/reconciliations/{reconciliation_id}/runs/{run_id}",
                                                     None, 404),
    ("POST", "/reconciliations/{id}/runs/{run_id}/cancel"): (
        "POST", "/v1/reconciliations/{reconciliation_id}/runs/{run_id}/cancel", None, 404),
    ("GET", "/reconciliation_matches"): ("GET", "/v1/reconciliation_matches?reconciliation_id={reconciliation_id}",
                                         None, 404),
    ("GET", "/reconciliation_matches/{id}"): ("GET", "/v1/reconciliation_matches/{match_id}", None, 404),
    ("POST", "/reconciliation_matches"): ("POST", "/v1/reconciliation_matches", lambda world: {
        "reconciliation_id": world["reconciliation_id"], "record_ids": [world["record_id"]]}, 404),
    ("POST", "/reconciliation_matches/{id}/confirm"): ("POST", "/v1/reconciliation_matches/{match_id}/confirm",
                                                       None, 404),
    ("DELETE", "/reconciliation_matches/{id}"): ("DELETE", "/v1/reconciliation_matches/{match_id}", None, 404),
    ("GET", "/reconciliation_exceptions"): ("GET", "/v1/reconciliation_exceptions", None, "lists_nothing"),
    ("GET", "/reconciliation_exceptions/{id}"): ("GET", "/v1/reconciliation_exceptions/{exception_id}", None, 404),
    ("GET", "/reconciliation_exceptions/{id}/records"): ("GET", "/v1/reconciliation_exceptions/{exception_id}/records",
                                                         None, 404),
    ("PATCH", "/reconciliation_exceptions/{id}"): ("PATCH", "/v1/reconciliation_exceptions/{exception_id}",
                                                   {"status": "dismissed"}, 404),
    ("POST", "/reconciliation_exceptions/{id}/assignees"): (
        "POST", "/v1/reconciliation_exceptions/{exception_id}/assignees", {"idp_user_id": "mallory"}, 404),
    ("DELETE", "/reconciliation_exceptions/{id}/assignees/{assignee_id}"): (
        "DELETE", "/v1/reconciliation_exceptions/{exception_id}/assignees/{assignee_id}", None, 404),
    ("POST", "/reconciliation_exceptions/{id}/investigations"): (
        "POST", "/v1/reconciliation_exceptions/{exception_id}/investigations", None, 404),
    ("POST", "/reconciliation_exceptions/{id}/investigations/{investigation_id}/accept"): (
        "POST", "/v1/reconciliation_exceptions/{exception_id}/investigations/{investigation_id}/accept", None, 404),
    ("POST", "/reconciliation_exceptions/{id}/comments"): (
        "POST", "/v1/reconciliation_exceptions/{exception_id}/comments", {"body": "x", "author_idp_id": "m"}, 404),
    # Bulk actions: B's own, whose items of A's are not found (a filter reaches only B's: see
    # tests/integration/test_bulk_actions_api.py)
    ("POST", "/reconciliation_exceptions/bulk"): ("POST", "/v1/reconciliation_exceptions/bulk", lambda world: {
        "action": "status", "status": "dismissed", "ids": [world["exception_id"]]}, "bulk_item_not_found"),
    ("POST", "/reconciliation_matches/bulk"): ("POST", "/v1/reconciliation_matches/bulk", lambda world: {
        "action": "reject", "ids": [world["match_id"]]}, "bulk_item_not_found"),
    ("GET", "/bulk_actions/{id}"): ("GET", "/v1/bulk_actions/{bulk_action_id}", None, 404),
    # Reconciliation stories
    ("POST", "/reconciliation_stories"): ("POST", "/v1/reconciliation_stories", lambda world: {
        "name": "S", "links": [{"reconciliation_id": world["reconciliation_id"], "position": 1}]},
        "refers_to_unknown_reconciliation"),
    ("GET", "/reconciliation_stories"): ("GET", "/v1/reconciliation_stories", None, "lists_nothing"),
    ("GET", "/reconciliation_stories/{id}"): ("GET", "/v1/reconciliation_stories/{story_id}", None, 404),
    ("PATCH", "/reconciliation_stories/{id}"): ("PATCH", "/v1/reconciliation_stories/{story_id}",
                                                {"name": "stolen"}, 404),
    ("DELETE", "/reconciliation_stories/{id}"): ("DELETE", "/v1/reconciliation_stories/{story_id}", None, 404),
    ("GET", "/reconciliation_stories/{id}/trace"): (
        "GET", "/v1/reconciliation_stories/{story_id}/trace?record_id={record_id}", None, 404),
    # Agents
    ("POST", "/agents"): ("POST", "/v1/agents", lambda world: {
        "name": "B's", "mentions": [{"type": "agent", "id": world["agent_id"]}]}, "refers_to_unknown_agent"),
    ("GET", "/agents"): ("GET", "/v1/agents", None, "lists_nothing"),
    ("GET", "/agents/{id}"): ("GET", "/v1/agents/{agent_id}", None, 404),
    ("PATCH", "/agents/{id}"): ("PATCH", "/v1/agents/{agent_id}", {"name": "stolen"}, 404),
    ("DELETE", "/agents/{id}"): ("DELETE", "/v1/agents/{agent_id}", None, 404),
    ("POST", "/agents/{id}/runs"): ("POST", "/v1/agents/{agent_id}/runs", None, 404),
    ("POST", "/agents/{id}/verification"): ("POST", "/v1/agents/{agent_id}/verification", {"code": "424242"}, 404),
    ("GET", "/agents/{id}/runs"): ("GET", "/v1/agents/{agent_id}/runs", None, 404),
    ("GET", "/agents/{id}/runs/{run_id}"): ("GET", "/v1/agents/{agent_id}/runs/{agent_run_id}", None, 404),
    ("POST", "/agents/{id}/files"): ("POST", "/v1/agents/{agent_id}/files",
                                     {"filename": "stolen.csv", "content_base64": ""}, 404),
    ("DELETE", "/agents/{id}/files/{file_id}"): ("DELETE", "/v1/agents/{agent_id}/files/{agent_file_id}", None, 404),
    ("GET", "/reconciliation_stories/{id}/summary"): ("GET", "/v1/reconciliation_stories/{story_id}/summary",
                                                      None, 404),
    # Webhook endpoints
    ("POST", "/webhook_endpoints"): ("POST", "/v1/webhook_endpoints", {"url": "http://127.0.0.1:9/b", "events": ["*"]},
                                     "creates"),
    ("GET", "/webhook_endpoints"): ("GET", "/v1/webhook_endpoints", None, "lists_nothing"),
    ("GET", "/webhook_endpoints/{id}"): ("GET", "/v1/webhook_endpoints/{webhook_endpoint_id}", None, 404),
    ("PATCH", "/webhook_endpoints/{id}"): ("PATCH", "/v1/webhook_endpoints/{webhook_endpoint_id}",
                                           {"url": "http://127.0.0.1:9/stolen"}, 404),
    ("DELETE", "/webhook_endpoints/{id}"): ("DELETE", "/v1/webhook_endpoints/{webhook_endpoint_id}", None, 404),
    ("POST", "/webhook_endpoints/{id}/rotate_secret"): (
        "POST", "/v1/webhook_endpoints/{webhook_endpoint_id}/rotate_secret", None, 404),
    ("GET", "/webhook_endpoints/{id}/deliveries"): (
        "GET", "/v1/webhook_endpoints/{webhook_endpoint_id}/deliveries", None, 404),
    ("POST", "/webhook_endpoints/{id}/deliveries/{delivery_id}/retry"): (
        "POST", "/v1/webhook_endpoints/{webhook_endpoint_id}/deliveries/{webhook_delivery_id}/retry", None, 404),
    # Users and API keys
    ("POST", "/users"): ("POST", "/v1/users", {"email": "ada@acme.example", "role": "admin"}, "creates"),
    ("GET", "/users"): ("GET", "/v1/users", None, "lists_nothing"),
    ("GET", "/users/{id}"): ("GET", "/v1/users/{user_id}", None, 404),
    ("PATCH", "/users/{id}"): ("PATCH", "/v1/users/{user_id}", {"role": "viewer"}, 404),
    ("DELETE", "/users/{id}"): ("DELETE", "/v1/users/{user_id}", None, 404),
    ("POST", "/api_keys"): ("POST", "/v1/api_keys", {"label": "B's"}, "creates"),
    ("GET", "/api_keys"): ("GET", "/v1/api_keys", None, "lists_none_of_a_keys"),
    ("DELETE", "/api_keys/{id}"): ("DELETE", "/v1/api_keys/{api_key_id}", None, 404),
    # The audit trail: B's chain is its own (empty), whatever A's holds
    ("GET", "/audit_events"): ("GET", "/v1/audit_events", None, "lists_nothing"),
    ("GET", "/audit_events/verify"): ("GET", "/v1/audit_events/verify", None, "verifies_an_empty_chain"),
    # Exports: B cannot export A's lists (the filters name A's things: 404) nor see A's exports
    ("POST", "/exports"): ("POST", "/v1/exports", lambda world: {
        "kind": "matches", "filters": {"reconciliation_id": world["reconciliation_id"]}}, 404),
    ("GET", "/exports"): ("GET", "/v1/exports", None, "lists_nothing"),
    ("GET", "/exports/{id}"): ("GET", "/v1/exports/{export_id}", None, 404),
    # Four-eyes approvals: B neither sees nor decides A's, nor reads or sets A's policy
    ("GET", "/approvals"): ("GET", "/v1/approvals", None, "lists_nothing"),
    ("GET", "/approvals/{id}"): ("GET", "/v1/approvals/{approval_id}", None, 404),
    ("POST", "/approvals/{id}/approve"): ("POST", "/v1/approvals/{approval_id}/approve", None, 404),
    ("POST", "/approvals/{id}/reject"): ("POST", "/v1/approvals/{approval_id}/reject", {"reason": "stolen"}, 404),
    ("GET", "/reconciliations/{id}/approval_policy"): (
        "GET", "/v1/reconciliations/{reconciliation_id}/approval_policy", None, 404),
    ("PUT", "/reconciliations/{id}/approval_policy"): (
        "PUT", "/v1/reconciliations/{reconciliation_id}/approval_policy", {"actions": []}, 404),
    # Period closes: B can neither close, list, read nor reopen A's
    ("POST", "/reconciliations/{id}/period_closes"): ("POST", "/v1/reconciliations/{reconciliation_id}/period_closes", {
        "period_start": "2020-02-01", "period_end": "2020-02-29", "note": "B's sign-off"}, 404),
    ("GET", "/reconciliations/{id}/period_closes"): ("GET", "/v1/reconciliations/{reconciliation_id}/period_closes",
                                                     None, 404),
    ("GET", "/reconciliations/{id}/period_closes/{close_id}"): (
        "GET", "/v1/reconciliations/{reconciliation_id}/period_closes/{period_close_id}", None, 404),
    ("POST", "/reconciliations/{id}/period_closes/{close_id}/reopen"): (
        "POST", "/v1/reconciliations/{reconciliation_id}/period_closes/{period_close_id}/reopen", {"reason": "B's"}, 404),
    # Service levels and routing rules of A's reconciliation (docs/service-levels.md)
    ("GET", "/reconciliations/{id}/service_levels"): ("GET", f"{SL}", None, 404),
    ("PUT", "/reconciliations/{id}/service_levels"): ("PUT", f"{SL}", {"due_in_hours": {
        "low": 9, "medium": 9, "high": 9, "critical": 9}}, 404),
    ("DELETE", "/reconciliations/{id}/service_levels"): ("DELETE", f"{SL}", None, 404),
    ("GET", "/reconciliations/{id}/service_levels/aging"): ("GET", f"{SL}/aging", None, 404),
    ("GET", "/reconciliations/{id}/routing_rules"): ("GET", f"{RR}", None, 404),
    ("POST", "/reconciliations/{id}/routing_rules"): ("POST", f"{RR}", {
        "name": "B's", "strategy": "round_robin", "team": {"role": "preparer"}}, 404),
    ("GET", "/reconciliations/{id}/routing_rules/{rule_id}"): ("GET", f"{RR}/{{routing_rule_id}}", None, 404),
    ("PATCH", "/reconciliations/{id}/routing_rules/{rule_id}"): ("PATCH", f"{RR}/{{routing_rule_id}}",
                                                                {"name": "stolen"}, 404),
    ("DELETE", "/reconciliations/{id}/routing_rules/{rule_id}"): ("DELETE", f"{RR}/{{routing_rule_id}}", None, 404),
}
# The cases that change what B's later requests see: as B, POST /data_streams creates B's own "bank" (B's
# GET /data_streams/bank would then find it) and the bulk request creates a B job. Each of them gets a world
# of its own; every other case only reads or is refused (404/422), and they share one world per module
# (module_state_unchanged fails any of them that changes it).
MUTATING = {("POST", "/data_streams"), ("POST", "/records/bulk"), ("POST", "/file_imports"),
            ("POST", "/webhook_endpoints"), ("POST", "/users"), ("POST", "/api_keys"),
            ("POST", "/reconciliation_exceptions/bulk"), ("POST", "/reconciliation_matches/bulk"),
            ("POST", "/rate_streams")}
OTHER_LISTS = ["/v1/records?status=unreconciled", "/v1/records?external_id=a-1",
               "/v1/records?file_import_id={bulk_request_id}", "/v1/records?reconciliation_match_id={match_id}",
               "/v1/audit_events?resource_type=data_stream&resource_id=bank",
               "/v1/audit_events?resource_type=reconciliation_exception&resource_id={exception_id}",
               "/v1/reconciliation_exceptions?overdue=false",
               "/v1/audit_events?resource_type=routing_rule&resource_id={routing_rule_id}"]


def test_every_route_is_covered():
    routes = {(s.method, s.path) for r in ROUTERS for s in r.specs if not s.public}
    assert routes == set(CASES)
    assert MUTATING <= set(CASES)  # the others run in the shared world


@pytest.fixture
def world(api, services, worker):
    """A world of the test's own (see build_world), built once a process and restored after."""
    return world_of_api(dated("test_isolation.world"), api, lambda: build_world(api, services, worker))


@pytest.fixture(scope="module")
def module_world(module_api, module_services, module_worker):
    """One world for the module's tests that leave it as they found it."""
    return build_world(module_api, module_services, module_worker)


@pytest.fixture
def shared_world(module_world, module_state_unchanged):
    return dict(module_world)


def build_world(api, services, worker):
    """Environment A ('acme') owns a stream, a definition, a bulk request and its record;
    B ('globex') is a different environment with nothing."""
    assert api.post("/v1/data_streams", {"key": "bank", "name": "A's bank"}).status_code == 201
    assert api.post("/v1/rate_streams", {"key": "ecb", "name": "A's rates"}).status_code == 201
    assert api.post("/v1/rate_streams/ecb/rates", {"csv": "date,base,quote,rate\n2026-11-01,EUR,USD,1.08\n"}
                    ).status_code == 200
    definition = api.post(f"/v1{PD}", {"key": "ref", "name": "Ref", "type": "string",
                                       "data_stream_key": "bank"}).json_body
    bulk = api.post("/v1/records/bulk", {"records": [{"date": "2026-11-01", "data_stream_key": "bank", "amount": 5,
                                                      "direction": "credit", "external_id": "a-1",
                                                      "metadata": {"ref": "r"}}]}).json_body
    worker.drain()
    record_id = api.get(bulk["url"]).json_body["results"][0]["record_id"]
    assert api.post("/v1/data_streams", {"key": "ledger", "name": "A's ledger"}).status_code == 201
    reconciliation = api.post("/v1/reconciliations", {"name": "A's recon", "side_a_stream_keys": ["bank"],
                                                      "side_b_stream_keys": ["ledger"]}).json_body
    rule = api.post(f"/v1/reconciliations/{reconciliation['id']}/rules", {
        "name": "A's rule", "conditions": [{"field": "amount", "operator": "equals"}]}).json_body
    # The ledger's 5 matches the bank's at once (continuous), the 7 stays open.
    api.post("/v1/records/bulk", {"records": [
        {"date": "2026-11-01", "data_stream_key": "ledger", "amount": amount, "direction": "credit"} for amount in (5, 7)]})
    worker.drain()
    [match] = api.get(f"/v1/reconciliation_matches?reconciliation_id={reconciliation['id']}").json_body["data"]
    run = api.get(f"/v1/reconciliations/{reconciliation['id']}/runs").json_body["data"][0]
    # The ledger's 7, weeks old (the bank's 5 sat in an exception of its own until it was matched).
    [exception] = api.get("/v1/reconciliation_exceptions?data_stream_key=ledger").json_body["data"]
    ada = add_user(services.users, "acme", "ada")
    assignee = api.post(f"/v1/reconciliation_exceptions/{exception['id']}/assignees", {"idp_user_id": "ada"}).json_body
    investigation = api.post(f"/v1/reconciliation_exceptions/{exception['id']}/investigations").json_body
    story = api.post("/v1/reconciliation_stories", {"name": "A's story", "links": [
        {"reconciliation_id": reconciliation["id"], "position": 1}]}).json_body
    agent = api.post("/v1/agents", {"name": "A's agent", "handles_file_drops": True}).json_body
    agent_file = api.post(f"/v1/agents/{agent['id']}/files", {"filename": "a.csv", "content_base64": "YQ=="}).json_body
    agent_run = api.post(f"/v1/agents/{agent['id']}/runs").json_body
    # A's approval: unmatching its match waits for an approver (the match stays confirmed).
    assert api.request("PUT", f"/v1/reconciliations/{reconciliation['id']}/approval_policy",
                       {"actions": ["unmatch"]}).status_code == 200
    approval = api.delete(f"/v1/reconciliation_matches/{match['id']}").json_body
    export = api.post("/v1/exports", {"kind": "records", "filters": {"data_stream_key": "bank"}}).json_body
    worker.drain()  # the run fails at once (no model answers here): a finished run of A's; A's export completes
    # A's closed period: January 2020, before any of A's records (its event is handled before A's endpoint exists).
    period_close = api.post(f"/v1/reconciliations/{reconciliation['id']}/period_closes", {
        "period_start": "2020-01-01", "period_end": "2020-01-31", "note": "A's sign-off"}).json_body
    worker.drain()
    # A's bulk action: the exception is investigating already, so it changes nothing (its end is
    # told before A's endpoint exists: that endpoint's one delivery is the one written below).
    bulk_action = api.post("/v1/reconciliation_exceptions/bulk", {
        "action": "status", "status": "investigating", "ids": [exception["id"]]}).json_body
    worker.drain()
    # A's service levels and a routing rule (after A's exception: it routes only those opened after it).
    assert api.request("PUT", f"/v1/reconciliations/{reconciliation['id']}/service_levels", {"due_in_hours": {
        "low": 100, "medium": 50, "high": 10, "critical": 2}}).status_code == 200
    routing_rule = api.post(f"/v1/reconciliations/{reconciliation['id']}/routing_rules", {
        "name": "A's routing", "strategy": "round_robin", "team": {"role": "preparer"}}).json_body
    # A's webhook endpoint and a delivery of its (written directly: nothing is queued or sent).
    endpoint = api.post("/v1/webhook_endpoints", {"url": "http://127.0.0.1:9/a", "events": ["*"]}).json_body
    delivery = _a_webhook_delivery(services, endpoint["id"])
    other_key = create_key(services.api_keys, "globex")[1]
    return {"routing_rule_id": routing_rule["id"], "bulk_action_id": bulk_action["id"], "webhook_endpoint_id": endpoint["id"], "webhook_delivery_id": delivery.id,
            "definition_id": definition["id"], "bulk_request_id": bulk["id"], "record_id": record_id,
            "reconciliation_id": reconciliation["id"], "rule_id": rule["id"], "match_id": match["id"],
            "run_id": run["id"], "exception_id": exception["id"], "assignee_id": assignee["id"],
            "investigation_id": investigation["id"], "story_id": story["id"], "agent_id": agent["id"],
            "agent_file_id": agent_file["id"], "agent_run_id": agent_run["id"], "other_key": other_key, "worker": worker,
            "user_id": ada.id, "export_id": export["id"], "approval_id": approval["id"],
            "period_close_id": period_close["id"], "api_key_id": services.api_keys.find_by_hash(hash_secret(api.key)).id}


def _a_webhook_delivery(services, endpoint_id):
    from chalicelib.domain.clock import utc_now
    from chalicelib.domain.webhooks import DeliveryStatus, WebhookDelivery

    now = utc_now()
    delivery = WebhookDelivery(environment="acme", endpoint_id=endpoint_id, event_id="evt_a", payload="{}",
                               id=services.counters.next_id("acme", "webhook_delivery"),
                               event_type="file_import.completed", status=DeliveryStatus.FAILED, created_at=now,
                               updated_at=now, attempts=8)
    services.webhooks.add_delivery(delivery, wake_at=now)
    return delivery


def _a_still_has_everything(api, world):
    assert api.get("/v1/data_streams/bank").json_body["name"] == "A's bank"
    assert api.get("/v1/rate_streams/ecb/rates").json_body["data"] == [
        {"date": "2026-11-01", "base": "EUR", "quote": "USD", "rate": "1.08"}]
    assert api.get(f"/v1{PD}/{world['definition_id']}").json_body["name"] == "Ref"
    assert api.get(f"/v1/records/{world['record_id']}").json_body["amount"] == 5
    assert api.get("/v1/data_streams/bank").json_body["records_count"] == 1
    assert api.get(f"/v1/reconciliations/{world['reconciliation_id']}").json_body["name"] == "A's recon"
    assert api.get(f"/v1/reconciliation_rules/{world['rule_id']}").json_body["name"] == "A's rule"
    assert api.get(f"/v1/reconciliations/{world['reconciliation_id']}/routing_rules/{world['routing_rule_id']}"
                   ).json_body["name"] == "A's routing"
    assert api.get(f"/v1/reconciliations/{world['reconciliation_id']}/service_levels").json_body["due_in_hours"][
        "critical"] == 2
    assert api.get(f"/v1/reconciliation_matches/{world['match_id']}").json_body["status"] == "confirmed"
    assert api.get(f"/v1/reconciliations/{world['reconciliation_id']}/runs/{world['run_id']}").status_code == 200
    exception = api.get(f"/v1/reconciliation_exceptions/{world['exception_id']}").json_body
    assert exception["status"] == "investigating" and [a["idp_user_id"] for a in exception["assignees"]] == ["ada"]
    assert api.get(f"/v1/users/{world['user_id']}").json_body["role"] == "preparer"
    assert world["api_key_id"] in [k["id"] for k in api.get("/v1/api_keys").json_body["data"]]
    assert exception["comments"] == [] and exception["investigation"]["id"] == world["investigation_id"]
    agent = api.get(f"/v1/agents/{world['agent_id']}").json_body
    assert agent["name"] == "A's agent" and [f["id"] for f in agent["input_files"]] == [world["agent_file_id"]]
    assert [r["id"] for r in api.get(f"/v1/agents/{world['agent_id']}/runs").json_body["data"]] == [
        world["agent_run_id"]]
    story = api.get(f"/v1/reconciliation_stories/{world['story_id']}").json_body
    assert story["name"] == "A's story" and story["links"][0]["reconciliation_name"] == "A's recon"
    endpoint = api.get(f"/v1/webhook_endpoints/{world['webhook_endpoint_id']}").json_body
    assert endpoint["url"] == "http://127.0.0.1:9/a"
    [delivery] = api.get(f"/v1/webhook_endpoints/{world['webhook_endpoint_id']}/deliveries").json_body["data"]
    assert (delivery["id"], delivery["status"]) == (world["webhook_delivery_id"], "failed")
    export = api.get(f"/v1/exports/{world['export_id']}").json_body
    assert (export["status"], export["rows_written"]) == ("completed", 1)
    assert api.get(f"/v1/approvals/{world['approval_id']}").json_body["status"] == "pending"
    assert api.get(f"/v1/reconciliations/{world['reconciliation_id']}/approval_policy").json_body["actions"] == [
        "unmatch"]
    [close] = api.get(f"/v1/reconciliations/{world['reconciliation_id']}/period_closes").json_body["data"]
    assert (close["id"], close["status"], close["note"]) == (world["period_close_id"], "closed", "A's sign-off")


# The tests of a world of their own come before those of the shared one (see tests/conftest.py).
@pytest.mark.parametrize("route", sorted(MUTATING), ids=lambda r: f"{r[0]} {r[1]}")
def test_another_environment_sees_nothing_of_the_first_when_it_creates(api, world, route):
    _another_environment_sees_nothing_of_the_first(api, world, route)


@pytest.mark.parametrize("route", sorted(set(CASES) - MUTATING), ids=lambda r: f"{r[0]} {r[1]}")
def test_another_environment_sees_nothing_of_the_first(module_api, shared_world, route):
    _another_environment_sees_nothing_of_the_first(module_api, shared_world, route)


def _another_environment_sees_nothing_of_the_first(api, world, route):
    method, path, body, expected = CASES[route]
    body = body(world) if callable(body) else body  # a body naming A's ids
    response = api.request(method, path.format(**world), body, key=world["other_key"])
    if expected == "bulk_item_refers_to_unknown_stream":
        assert response.status_code == 202
        world["worker"].drain()
        done = api.get(response.json_body["url"], key=world["other_key"]).json_body
        assert done["results"][0]["error"] == "data_stream_key: no data stream with key 'bank'"
        expected = "done"
    if expected == "bulk_item_not_found":
        assert response.status_code == 202
        world["worker"].drain()
        done = api.get(response.json_body["url"], key=world["other_key"]).json_body
        assert done["status"] == "completed" and done["results"][0]["status"] == "failed"
        assert done["results"][0]["error"].endswith(" not found")
        expected = "done"
    if expected == "lists_nothing":
        assert response.status_code == 200
        data = response.json_body if isinstance(response.json_body, list) else response.json_body["data"]
        assert data == []
    elif expected == "sees_an_empty_overview":
        assert response.status_code == 200
        assert (response.json_body["reconciliations"], response.json_body["imports_in_progress"]) == ([], [])
    elif expected == "creates":
        # The same key is free in B: keys are unique per environment, not globally.
        assert response.status_code == 201
    elif expected == "refers_to_unknown_stream":
        assert response.status_code == 422
        assert response.json_body["errors"][0]["field"] == "data_stream_key"
    elif expected == "refers_to_unknown_streams":
        assert response.status_code == 422
        assert [e["field"] for e in response.json_body["errors"]] == ["side_a_stream_keys[0]", "side_b_stream_keys[0]"]
    elif expected == "refers_to_unknown_reconciliation":
        assert response.status_code == 422
        assert [e["field"] for e in response.json_body["errors"]] == ["links[0].reconciliation_id"]
    elif expected == "refers_to_unknown_agent":
        assert response.status_code == 422
        assert [e["field"] for e in response.json_body["errors"]] == ["mentions[0].id"]
    elif expected == "lists_none_of_a_keys":
        assert response.status_code == 200
        assert world["api_key_id"] not in [k["id"] for k in response.json_body["data"]]
    elif expected == "verifies_an_empty_chain":
        assert response.status_code == 200
        assert (response.json_body["intact"], response.json_body["checked"], response.json_body["head_seq"]) == (
            True, 0, 0)
    elif expected != "done":
        assert response.status_code == expected, response.json_body
    _a_still_has_everything(api, world)


@pytest.mark.parametrize("path", OTHER_LISTS)
def test_every_record_filter_lists_nothing_of_another_environment(module_api, shared_world, path):
    api, world = module_api, shared_world
    assert api.get(path.format(**world)).json_body["data"] != []  # A sees its own
    assert api.get(path.format(**world), key=world["other_key"]).json_body["data"] == []
