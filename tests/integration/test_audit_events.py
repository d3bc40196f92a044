"""The audit trail on moto, through the API: what each state-changing call records, the filters and
cursor of GET /audit_events, and GET /audit_events/verify finding entries edited or removed in the
table; concurrent appenders never fork the chain."""
import re
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import timedelta, timezone

import pytest

from chalicelib.adapters.dynamodb import keys
from chalicelib.api.audit_trail import MUTATING_METHODS, ROUTE_ACTIONS, derived
from chalicelib.api.routers import ROUTERS
from chalicelib.domain.api_keys import hash_secret
from chalicelib.domain.clock import iso, parse_iso, utc_now
from chalicelib.domain.errors import BrokenInvariant
from chalicelib.services import audit
from chalicelib.services.api_keys import create_key
from tests.integration.conftest import record
from tests.support.crashes import Replaced, ports_swapped

EVENTS = "/v1/audit_events"
RULE = {"name": "Amount", "priority": 1, "conditions": [{"field": "amount", "operator": "equals"}]}


def days_ago(n: int) -> str:
    return (utc_now().date() - timedelta(days=n)).isoformat()


def actor_of(services, secret: str) -> str:
    return f"api_key:{services.api_keys.find_by_hash(hash_secret(secret)).id}"


def entries(api, query: str = "") -> list[dict]:
    response = api.get(f"{EVENTS}{query}")
    assert response.status_code == 200, response.json_body
    return response.json_body["data"]


def summary_of(entry: dict) -> dict:
    """An API call's entry's summary, less the request id every such summary names."""
    return {k: v for k, v in entry["summary"].items() if k != "request_id"}


def verified(api, query: str = "") -> dict:
    response = api.get(f"{EVENTS}/verify{query}")
    assert response.status_code == 200, response.json_body
    return response.json_body


def edit_entry(services, seq: int, **attributes) -> None:
    """What someone with write access to the table might do, bypassing the API."""
    names = {f"#a{i}": name for i, name in enumerate(attributes)}
    values = {f":v{i}": {"S": str(value)} for i, value in enumerate(attributes.values())}
    services.aws.dynamodb.update_item(
        TableName=services.settings.table_name,
        Key={"pk": {"S": keys.audit_pk("acme")}, "sk": {"S": keys.audit_entry_sk(seq)}},
        UpdateExpression="SET " + ", ".join(f"{n} = {v}" for n, v in zip(names, values, strict=True)),
        ExpressionAttributeNames=names, ExpressionAttributeValues=values)


def delete_entry(services, seq: int | str) -> None:
    """`seq`, or "HEAD" for the chain's head."""
    sort_key = seq if seq == "HEAD" else keys.audit_entry_sk(seq)
    services.aws.dynamodb.delete_item(
        TableName=services.settings.table_name, Key={"pk": {"S": keys.audit_pk("acme")}, "sk": {"S": sort_key}})


def streams(api, count: int) -> None:
    for n in range(count):
        assert api.post("/v1/data_streams", {"key": f"s{n}", "name": f"Stream {n}"}).status_code == 201


# What is recorded ------------------------------------------------------------------------------

def test_a_change_records_who_made_it_what_and_on_which_resource(api, services):
    api.post("/v1/data_streams", {"key": "bank", "name": "Bank"})
    api.patch("/v1/data_streams/bank", {"name": "Main bank", "description": "ops"})
    api.delete("/v1/data_streams/bank")

    deleted, updated, created = entries(api)

    actor = actor_of(services, api.key)
    assert [(e["seq"], e["actor"], e["action"], e["resource_type"], e["resource_id"])
            for e in (created, updated, deleted)] == [
        (1, actor, "data_stream.created", "data_stream", "bank"),
        (2, actor, "data_stream.updated", "data_stream", "bank"),
        (3, actor, "data_stream.deleted", "data_stream", "bank")]
    assert summary_of(updated) == {"fields": ["description", "name"],
                                   "before": {"name": "Bank", "description": None},
                                   "after": {"name": "Main bank", "description": "ops"}}
    assert len({e["summary"]["request_id"] for e in (created, updated, deleted)}) == 3
    assert created["prev_hash"] == "0" * 64 and updated["prev_hash"] == created["hash"]
    assert created["id"] == created["seq"] and created["at"] <= updated["at"] <= deleted["at"]


def updated_entry(api, resource_type: str, resource_id) -> dict:
    """The newest entry of the resource."""
    return entries(api, f"?resource_type={resource_type}&resource_id={resource_id}")[0]


def test_an_update_records_each_changed_fields_value_before_and_after_whatever_the_resource(
        api, reconciliation):
    # Given a property definition, a reconciliation, one of its rules and a story
    definition = api.post("/v1/data_stream_property_definitions", {
        "key": "ref", "name": "Reference", "type": "string", "data_stream_key": "bank"}).json_body
    rule = api.post(f"/v1/reconciliations/{reconciliation['id']}/rules", RULE).json_body
    story = api.post("/v1/reconciliation_stories", {"name": "Cash", "links": [
        {"reconciliation_id": reconciliation["id"], "position": 1}]}).json_body

    # When each is changed
    for path, body in ((f"/v1/data_stream_property_definitions/{definition['id']}", {"name": "Ref", "optional": True}),
                       (f"/v1/reconciliations/{reconciliation['id']}", {"name": "Bank v ledger",
                                                                         "exception_after_days": 9}),
                       (f"/v1/reconciliation_rules/{rule['id']}", {"priority": 5, "name": "Amount"}),
                       (f"/v1/reconciliation_stories/{story['id']}", {"name": "Cash story"})):
        response = api.patch(path, body)
        assert response.status_code == 200, response.json_body

    # Then each entry says what the changed fields were before and what they are now
    # (a field sent unchanged is among those sent, not among those changed)
    assert summary_of(updated_entry(api, "data_stream_property_definition", definition["id"])) == {
        "fields": ["name", "optional"], "before": {"name": "Reference", "optional": False},
        "after": {"name": "Ref", "optional": True}}
    changed = summary_of(updated_entry(api, "reconciliation", reconciliation["id"]))
    assert (changed["before"], changed["after"]) == (
        {"name": reconciliation["name"], "exception_after_days": reconciliation["exception_after_days"]},
        {"name": "Bank v ledger", "exception_after_days": 9})
    changed = summary_of(updated_entry(api, "reconciliation_rule", rule["id"]))
    assert (changed["fields"], changed["before"], changed["after"]) == (
        ["name", "priority"], {"definition.priority": 1}, {"definition.priority": 5})
    changed = summary_of(updated_entry(api, "reconciliation_story", story["id"]))
    assert (changed["before"], changed["after"]) == ({"name": "Cash"}, {"name": "Cash story"})


def test_a_long_value_is_recorded_cut_to_its_first_100_characters_with_its_length(api):
    agent = api.post("/v1/agents", {"name": "Mailer", "instructions": "short"}).json_body
    long = "List yesterday's unmatched payouts. " * 100

    assert api.patch(f"/v1/agents/{agent['id']}", {"instructions": long, "cadence": "daily", "hour": 7,
                                                   "minute": 0}).status_code == 200

    changed = summary_of(updated_entry(api, "agent", agent["id"]))
    assert changed["before"]["instructions"] == "short"
    assert changed["after"]["instructions"] == f"{long[:100]}… ({len(long)} characters)"
    assert (changed["before"]["schedule.cadence"], changed["after"]["schedule.cadence"]) == ("manual", "daily")
    assert (changed["before"]["schedule.hour"], changed["after"]["schedule.hour"]) == (None, 7)


def test_a_webhook_endpoints_changes_are_recorded_and_its_secrets_never(api):
    endpoint = api.post("/v1/webhook_endpoints", {"url": "https://93.184.215.14/a", "events": ["*"]}).json_body
    rotated = api.post(f"/v1/webhook_endpoints/{endpoint['id']}/rotate_secret").json_body
    api.patch(f"/v1/webhook_endpoints/{endpoint['id']}", {"url": "https://93.184.215.14/b", "active": False})

    patched, rotation = entries(api, f"?resource_type=webhook_endpoint&resource_id={endpoint['id']}")[:2]
    assert (summary_of(patched)["before"], summary_of(patched)["after"]) == (
        {"url": "https://93.184.215.14/a", "active": True}, {"url": "https://93.184.215.14/b", "active": False})
    assert summary_of(rotation)["before"]["secret"] == summary_of(rotation)["after"]["secret"] == "[redacted]"
    assert summary_of(rotation)["after"]["previous_secret"] == "[redacted]"
    everything = str(entries(api))
    assert endpoint["secret"] not in everything and rotated["secret"] not in everything
    assert endpoint["secret"].removeprefix("whsec_") not in everything


def test_reads_and_refused_changes_record_nothing(api):
    api.get("/v1/data_streams")
    assert api.post("/v1/data_streams", {"key": "Bad Key!", "name": "x"}).status_code == 422
    assert api.patch("/v1/data_streams/missing", {"name": "x"}).status_code == 404
    assert api.post("/v1/data_streams", {"key": "bank", "name": "x"}, key="wrong").status_code == 401
    assert entries(api) == []


def test_a_bulk_request_records_one_entry_however_many_records_it_carries(api, services, worker):
    api.post("/v1/data_streams", {"key": "bank", "name": "Bank"})
    bulk = api.post("/v1/records/bulk", {"records": [record("bank", n, 100 + n) for n in range(30)]}).json_body
    worker.drain()

    by_key = f"&actor={actor_of(services, api.key)}"
    [entry] = entries(api, f"?resource_type=bulk_request&resource_id={bulk['id']}{by_key}")

    assert (entry["action"], summary_of(entry)) == ("bulk_request.created", {"total_items": 30})
    assert len(entries(api, "?resource_type=record")) == 0  # never one per record
    assert len(entries(api)) < 5  # the stream, the request (and what the ingestion itself records)


def test_status_changes_of_exceptions_and_matches_record_their_before_and_after(api, services, ingest,
                                                                                reconciliation):
    assert api.post(f"/v1/reconciliations/{reconciliation['id']}/rules", RULE).status_code == 201
    ingest(record("bank", 1, 1000, days_ago(20)), record("bank", 2, 2500, days_ago(40)))
    ingest(record("ledger", 1, 1000, days_ago(20)))
    run = api.post(f"/v1/reconciliations/{reconciliation['id']}/runs").json_body
    [exception] = api.get("/v1/reconciliation_exceptions?data_stream_key=bank").json_body["data"]
    [match] = api.get(f"/v1/reconciliation_matches?reconciliation_id={reconciliation['id']}").json_body["data"]

    assert api.patch(f"/v1/reconciliation_exceptions/{exception['id']}", {"status": "investigating"}).status_code == 200
    assert api.delete(f"/v1/reconciliation_matches/{match['id']}").status_code == 204

    by_key = f"&actor={actor_of(services, api.key)}"
    [updated] = entries(api, f"?resource_type=reconciliation_exception&resource_id={exception['id']}{by_key}")
    assert updated["action"] == "reconciliation_exception.updated"
    assert summary_of(updated) == {"fields": ["status"], "before": {"status": "open"},
                                  "after": {"status": "investigating"}}
    [unmatched] = entries(api, f"?resource_type=reconciliation_match&resource_id={match['id']}{by_key}")
    assert unmatched["action"] == "reconciliation_match.deleted"
    assert summary_of(unmatched) == {"before": {"status": "confirmed"}, "after": {"status": "unmatched"},
                                    "record_count": 2}
    [started] = entries(api, f"?resource_type=reconciliation_run{by_key}")
    assert (started["action"], started["resource_id"], summary_of(started)) == (
        "reconciliation_run.created", str(run["id"]), {"reconciliation_id": str(reconciliation["id"])})


def test_a_failed_append_is_logged_and_the_change_still_answers(api, services, caplog):
    class Unavailable:
        def append(self, *args, **kwargs):
            raise BrokenInvariant("the table is gone")

    services.ports = replace(services.ports, audit=Unavailable())

    response = api.post("/v1/data_streams", {"key": "bank", "name": "Bank"})

    assert response.status_code == 201
    assert api.get("/v1/data_streams/bank").status_code == 200
    [logged] = [r for r in caplog.records if r.getMessage() == "audit entry not recorded"]
    assert (logged.levelname, logged.audit_action, logged.audit_resource_id) == ("ERROR", "data_stream.created", "bank")


# A request whose process dies between its change and its entry ---------------------------------

class Died(BaseException):
    """The process ends here (as a Lambda killed mid-call): no handler of ours catches it."""


def _die(*_args, **_kwargs):
    raise Died()


def _dying_at(services, method: str):
    """Requests made in the block die when they call the audit log's `method`: `append` is before
    the request's entry is written (its change made), `end_request` just after."""
    return ports_swapped(services, audit=Replaced(services.ports.audit, **{method: _die}))


def _sweep_after(services, delay: timedelta) -> int:
    return audit.record_unfinished(services.ports, now=utc_now() + delay)


def test_a_request_whose_process_died_before_its_entry_is_recorded_by_the_sweeper_outcome_unknown(api, services):
    api.post("/v1/data_streams", {"key": "bank", "name": "Bank"})
    with _dying_at(services, "append"), pytest.raises(Died):
        api.patch("/v1/data_streams/bank", {"name": "Main bank"})
    assert api.get("/v1/data_streams/bank").json_body["name"] == "Main bank"  # the change was made
    assert [e["action"] for e in entries(api)] == ["data_stream.created"]

    assert _sweep_after(services, timedelta(seconds=20)) == 0  # its request might still be running
    assert _sweep_after(services, timedelta(minutes=3)) == 1
    assert _sweep_after(services, timedelta(minutes=10)) == 0

    updated, _ = entries(api)
    assert (updated["actor"], updated["action"], updated["resource_type"], updated["resource_id"]) == (
        actor_of(services, api.key), "data_stream.updated", "data_stream", "bank")
    assert updated["summary"]["outcome"] == "unknown" and updated["summary"]["fields"] == ["name"]
    assert updated["summary"]["request_id"]
    assert services.audit.requests_in_flight() == [] and verified(api)["intact"] is True


def test_one_sweep_at_a_time_writes_an_unfinished_requests_entry(api, services):
    api.post("/v1/data_streams", {"key": "bank", "name": "Bank"})
    with _dying_at(services, "append"), pytest.raises(Died):
        api.patch("/v1/data_streams/bank", {"name": "Main bank"})
    [note] = services.audit.requests_in_flight()
    later = utc_now() + timedelta(minutes=3)
    assert services.audit.claim_request(note, later, stale_before=later - audit.CLAIM_LEASE)  # another sweep's

    assert audit.record_unfinished(services.ports, now=later) == 0
    assert audit.record_unfinished(services.ports, now=later + audit.CLAIM_LEASE + timedelta(seconds=1)) == 1
    assert [e["action"] for e in entries(api)] == ["data_stream.updated", "data_stream.created"]


def test_a_request_whose_process_died_just_after_its_entry_gets_no_second_one(api, services):
    with _dying_at(services, "end_request"):
        with pytest.raises(Died):
            api.post("/v1/data_streams", {"key": "bank", "name": "Bank"})  # a creation: its id unknown before
        with pytest.raises(Died):
            api.patch("/v1/data_streams/bank", {"name": "Main bank"})
    assert len(services.audit.requests_in_flight()) == 2

    assert _sweep_after(services, timedelta(minutes=3)) == 0

    assert [e["action"] for e in entries(api)] == ["data_stream.updated", "data_stream.created"]
    assert services.audit.requests_in_flight() == []


def test_answered_and_refused_requests_leave_nothing_in_flight_and_a_server_error_is_recorded_outcome_unknown(
        api, services):
    streams(api, 2)
    assert api.patch("/v1/data_streams/missing", {"name": "x"}).status_code == 404
    assert services.audit.requests_in_flight() == []

    class Broken:
        def __getattr__(self, name):
            raise RuntimeError("the disk is on fire")

    services.ports = replace(services.ports, reconciliations=Broken())
    response = api.post("/v1/reconciliations", {"name": "r", "run_type": "batch", "side_a_stream_keys": ["s0"],
                                                "side_b_stream_keys": ["s1"]})
    assert response.status_code == 500
    assert [r.action for r in services.audit.requests_in_flight()] == ["reconciliation.created"]

    assert _sweep_after(services, timedelta(minutes=3)) == 1
    [entry] = entries(api, "?resource_type=reconciliation")
    assert entry["action"] == "reconciliation.created" and entry["summary"]["outcome"] == "unknown"


def test_an_unfinished_request_is_recorded_in_its_own_environment(api, services):
    other = create_key(services.api_keys, "globex", label="ops")[1]
    with _dying_at(services, "append"), pytest.raises(Died):
        api.post("/v1/data_streams", {"key": "bank", "name": "Bank"}, key=other)

    assert _sweep_after(services, timedelta(minutes=3)) == 1

    assert entries(api) == []  # acme's chain
    [entry] = api.get(EVENTS, key=other).json_body["data"]
    assert (entry["action"], entry["actor"], entry["summary"]["outcome"]) == (
        "data_stream.created", actor_of(services, other), "unknown")


def test_the_system_and_agents_record_through_the_same_entry_point(api, services):
    audit.record(services.ports, "acme", actor="system:reconciliation_run:12", action="reconciliation_run.completed",
                 resource_type="reconciliation_run", resource_id=12,
                 summary={"matched": 40, "matches_url": "/v1/reconciliation_matches?reconciliation_id=3"})
    [entry] = entries(api, "?actor=system:reconciliation_run:12")
    assert (entry["resource_id"], entry["summary"]["matched"]) == ("12", 40)


def test_every_state_changing_route_has_an_action_named_resource_dot_verb():
    mutating = {(s.method, s.path) for r in ROUTERS for s in r.specs if s.method in MUTATING_METHODS}
    assert mutating - set(ROUTE_ACTIONS) == set(), "give each new route its action in ROUTE_ACTIONS"
    unchanging = {route for route in mutating if ROUTE_ACTIONS[route] is None}
    # No entry of the middleware's: they change nothing, or (an approval's decision) their service
    # announces the change once, its entry then its event (services/approvals.py).
    assert unchanging == {("POST", "/reconciliation_rules/{id}/dry_run"), ("POST", "/session"),
                          ("POST", "/session/refresh"), ("DELETE", "/session"),
                          ("POST", "/approvals/{id}/approve"), ("POST", "/approvals/{id}/reject")}
    for route in mutating - unchanging:
        audited = ROUTE_ACTIONS[route]
        assert re.fullmatch(r"[a-z_]+\.[a-z_]+", audited.action) and audited.action.startswith(
            audited.resource_type + "."), route
        assert audited.id_param is None or "{" + audited.id_param + "}" in route[1], route


def test_a_route_not_yet_listed_still_gets_an_action_from_its_path():
    assert derived("POST", "/widgets").action == "widget.created"
    assert (derived("PATCH", "/widgets/{id}").action, derived("PATCH", "/widgets/{id}").id_param) == (
        "widget.updated", "id")
    assert derived("POST", "/widgets/{id}/polish").action == "widget.polish"
    assert derived("POST", "/widgets/{id}/parts").action == "part.created"
    assert derived("DELETE", "/categories/{id}").action == "category.deleted"


# Listing -------------------------------------------------------------------------------------

def test_entries_page_newest_first_with_a_cursor(api):
    streams(api, 5)
    first = api.get(f"{EVENTS}?limit=2").json_body
    second = api.get(f"{EVENTS}?limit=2&cursor={first['next_cursor']}").json_body
    third = api.get(f"{EVENTS}?limit=2&cursor={second['next_cursor']}").json_body
    assert [e["seq"] for page in (first, second, third) for e in page["data"]] == [5, 4, 3, 2, 1]
    assert third["next_cursor"] is None and first["limit"] == 2


def test_entries_filter_by_resource_actor_and_time(api, services):
    streams(api, 3)
    other = create_key(services.api_keys, "acme", label="ops")[1]
    assert api.patch("/v1/data_streams/s1", {"name": "Renamed"}, key=other).status_code == 200
    all_entries = entries(api)
    middle = all_entries[2]  # seq 2

    assert [e["seq"] for e in entries(api, "?resource_type=data_stream&resource_id=s1")] == [4, 2]
    assert [e["seq"] for e in entries(api, "?resource_type=data_stream&resource_id=s1&limit=1")] == [4]
    assert [e["seq"] for e in entries(api, f"?actor={actor_of(services, other)}")] == [4]
    assert [e["seq"] for e in entries(api, f"?resource_type=data_stream&resource_id=s1&actor="
                                           f"{actor_of(services, api.key)}")] == [2]
    assert [e["seq"] for e in entries(api, "?resource_type=data_stream")] == [4, 3, 2, 1]
    assert [e["seq"] for e in entries(api, f"?from={middle['at']}&to={middle['at']}")] == [
        e["seq"] for e in all_entries if e["at"] == middle["at"]]
    assert entries(api, f"?from={iso(utc_now() + timedelta(days=1))}") == []


def test_a_resource_list_pages_with_its_own_cursor(api):
    api.post("/v1/data_streams", {"key": "bank", "name": "Bank"})
    for n in range(3):
        api.patch("/v1/data_streams/bank", {"name": f"Bank {n}"})
    query = "?resource_type=data_stream&resource_id=bank&limit=3"
    first = api.get(EVENTS + query).json_body
    second = api.get(f"{EVENTS}{query}&cursor={first['next_cursor']}").json_body
    assert [e["seq"] for e in first["data"] + second["data"]] == [4, 3, 2, 1]
    assert second["next_cursor"] is None
    assert api.get(f"{EVENTS}?cursor={first['next_cursor']}").status_code == 400  # another list's cursor


@pytest.mark.parametrize("query, field", [
    ("?actor=bob", "actor"), ("?resource_type=Data%20Stream", "resource_type"), ("?from=yesterday", "from"),
    ("?to=2026-13-01T00:00:00Z", "to"), ("?resource_id=7", "resource_id"),
    ("?from=2026-11-02T00:00:00Z&to=2026-11-01T00:00:00Z", "from"), ("?limit=0", "limit"),
    # In range as written, out of range once converted to UTC (was a 500), on either way of reading.
    ("?from=0001-01-01T00:00:00%2B05:00", "from"), ("?to=9999-12-31T23:59:59-05:00", "to"),
    ("?resource_type=data_stream&resource_id=s1&from=0001-01-01T00:00:00%2B05:00", "from")])
def test_bad_filters_are_422_naming_the_field(api, query, field):
    response = api.get(EVENTS + query)
    assert response.status_code == 422, response.json_body
    assert response.json_body["errors"][0]["field"] == field


def test_from_and_to_with_an_offset_name_that_instant_and_the_extremes_of_the_calendar_are_fine(api):
    streams(api, 2)
    newest = entries(api)[0]
    in_kolkata = (parse_iso(newest["at"]) + timedelta(hours=5, minutes=30)).replace(
        tzinfo=timezone(timedelta(hours=5, minutes=30))).isoformat().replace("+", "%2B")
    assert [e["seq"] for e in entries(api, f"?from={in_kolkata}")] == [
        e["seq"] for e in entries(api) if e["at"] >= newest["at"]]
    assert len(entries(api, "?from=0001-01-01T00:00:00Z&to=9999-12-31T23:59:59.999Z")) == 2
    assert len(entries(api, "?from=0001-01-01T05:00:00%2B05:00&to=9999-12-31T18:59:59-05:00")) == 2
    assert api.get(f"{EVENTS}?to=9999-12-31T23:59:59-05:00").json_body["errors"] == [
        {"field": "to", "message": "is outside years 1 to 9999 once converted to UTC"}]


def test_an_unknown_filter_or_a_bad_cursor_is_400(api):
    assert api.get(f"{EVENTS}?resource=data_stream").status_code == 400
    assert api.get(f"{EVENTS}?cursor=nonsense").status_code == 400


def test_no_route_edits_or_deletes_an_entry(api):
    streams(api, 1)
    before = entries(api)
    for method in ("POST", "PUT", "PATCH", "DELETE"):
        for path in (EVENTS, f"{EVENTS}/verify"):
            assert api.request(method, path, {"summary": {}}).status_code == 405, (method, path)
        # No route serves a single entry: API Gateway (and Chalice's test client) answer 403 there.
        assert api.request(method, f"{EVENTS}/1", {"summary": {}}).status_code in (403, 404, 405)
    assert entries(api) == before and verified(api)["intact"]


# Verifying ---------------------------------------------------------------------------------

def test_an_untouched_chain_verifies_intact_with_the_count_checked(api):
    streams(api, 4)
    report = verified(api)
    assert report == {"intact": True, "checked": 4, "first_break": None, "from_seq": 1, "last_checked_seq": 4,
                      "head_seq": 4, "head_hash": entries(api)[0]["hash"], "complete": True, "next_from_seq": None}


def test_an_entry_edited_in_the_table_breaks_the_chain_at_that_entry(api, services):
    streams(api, 5)
    edit_entry(services, 3, summary='{"fields":["quietly","changed"]}')

    report = verified(api)

    assert (report["intact"], report["checked"], report["complete"]) == (False, 2, True)
    assert report["first_break"] == {
        "seq": 3, "id": 3, "reason": "hash_mismatch",
        "message": "the entry's fields do not hash to its stored hash: it was changed after it was written"}


def test_an_edit_with_a_recomputed_hash_breaks_the_link_of_the_entry_after_it(api, services):
    streams(api, 4)
    forged = replace(services.audit.get("acme", 2), actor="api_key:999")
    edit_entry(services, 2, actor=forged.actor, hash=forged.computed_hash())

    assert verified(api)["first_break"]["seq"] == 3
    assert verified(api)["first_break"]["reason"] == "prev_hash_mismatch"


def test_an_entry_edited_into_unreadable_values_is_reported_not_crashed_on(api, services):
    streams(api, 3)
    edit_entry(services, 2, at="not a time", summary="[1, 2")
    assert verified(api)["first_break"]["seq"] == 2


def test_a_deleted_entry_is_reported_missing_at_its_seq(api, services):
    streams(api, 5)
    delete_entry(services, 2)

    report = verified(api)

    assert report["intact"] is False and report["checked"] == 1
    assert (report["first_break"]["seq"], report["first_break"]["id"], report["first_break"]["reason"]) == (
        2, 3, "missing_entry")


def test_deleting_the_newest_entry_is_found_against_the_chain_head(api, services):
    streams(api, 3)
    delete_entry(services, 3)
    report = verified(api)
    assert (report["first_break"]["seq"], report["first_break"]["id"], report["checked"]) == (3, None, 2)


def test_a_long_chain_is_verified_in_bounded_steps_that_continue_where_the_last_stopped(api, services):
    streams(api, 5)

    first = audit.verify(services.ports, "acme", max_entries=2)
    second = audit.verify(services.ports, "acme", from_seq=first.next_from_seq, max_entries=2)
    last = audit.verify(services.ports, "acme", from_seq=second.next_from_seq, max_entries=2)

    assert [(r.checked, r.complete, r.next_from_seq) for r in (first, second, last)] == [
        (2, False, 3), (2, False, 5), (1, True, None)]
    assert all(r.intact for r in (first, second, last))
    assert verified(api, "?from_seq=4")["checked"] == 2


def test_a_from_seq_past_the_chains_end_is_422_and_right_after_it_checks_nothing_intact(api):
    streams(api, 1)

    for from_seq in (3, 5, 10**20):
        response = api.get(f"{EVENTS}/verify?from_seq={from_seq}")
        assert response.status_code == 422, response.json_body
        assert response.json_body["errors"] == [
            {"field": "from_seq", "message": "past the chain's end: the chain holds 1 entries"}]
    report = verified(api, "?from_seq=2")
    assert (report["intact"], report["checked"], report["complete"], report["last_checked_seq"]) == (True, 0, True, 1)


def test_an_empty_chain_verifies_intact_from_1_and_refuses_any_later_start(api):
    assert verified(api) == {"intact": True, "checked": 0, "first_break": None, "from_seq": 1,
                             "last_checked_seq": 0, "head_seq": 0, "head_hash": None, "complete": True,
                             "next_from_seq": None}
    assert api.get(f"{EVENTS}/verify?from_seq=2").status_code == 422


def test_removing_the_newest_entries_with_the_head_is_reported_as_a_missing_head(api, services):
    streams(api, 5)
    for seq in (4, 5):
        delete_entry(services, seq)
    delete_entry(services, "HEAD")

    report = verified(api)

    assert (report["intact"], report["head_seq"], report["head_hash"]) == (False, 0, None)
    assert report["first_break"] == {
        "seq": 3, "id": 3, "reason": "head_missing",
        "message": "the chain's head is missing while entries exist: the newest entries may have been removed "
                   "with it"}
    assert verified(api, "?from_seq=4")["first_break"]["reason"] == "head_missing"


def test_a_tail_rewritten_with_recomputed_hashes_disagrees_with_the_head(api, services):
    streams(api, 4)
    forged = replace(services.audit.get("acme", 4), actor="api_key:999")
    edit_entry(services, 4, actor=forged.actor, hash=forged.computed_hash())

    report = verified(api)

    assert (report["checked"], report["first_break"]["seq"], report["first_break"]["reason"]) == (
        3, 4, "head_mismatch")
    assert verified(api, "?from_seq=5")["first_break"]["reason"] == "head_mismatch"


def test_a_head_rewritten_to_another_hash_is_reported_at_its_seq(api, services):
    streams(api, 3)
    services.aws.dynamodb.update_item(
        TableName=services.settings.table_name, Key={"pk": {"S": keys.audit_pk("acme")}, "sk": {"S": "HEAD"}},
        UpdateExpression="SET #h = :h", ExpressionAttributeNames={"#h": "hash"},
        ExpressionAttributeValues={":h": {"S": "f" * 64}})
    assert verified(api)["first_break"]["reason"] == "head_mismatch"


def test_the_walk_reads_its_entries_consistently_as_it_reads_the_head(api, services, monkeypatch):
    # On DynamoDB a query that is not consistent may miss an entry put just before the head moved
    # to it, and report it missing; moto is always consistent, so what is asked for is checked.
    streams(api, 3)
    client, asked = services.aws.dynamodb, []
    make_call = client._make_api_call

    def recording_call(operation, params):
        asked.append((operation, params))
        return make_call(operation, params)

    monkeypatch.setattr(client, "_make_api_call", recording_call)
    assert verified(api)["checked"] == 3
    queries = [p for op, p in asked if op == "Query" and p["ExpressionAttributeValues"].get(":p", {}).get("S")
               == keys.audit_pk("acme")]
    assert queries and all(p.get("ConsistentRead") is True for p in queries)


def test_entries_beyond_the_head_read_before_the_walk_are_left_to_the_next_verification(services):
    for n in range(3):
        audit.record(services.ports, "acme", actor="system:sweeper", action="test.appended", resource_type="test",
                     resource_id=n)
    second = services.audit.get("acme", 2)  # a writer put entry 3 and has not moved the head yet
    services.aws.dynamodb.update_item(
        TableName=services.settings.table_name, Key={"pk": {"S": keys.audit_pk("acme")}, "sk": {"S": "HEAD"}},
        UpdateExpression="SET #s = :s, #h = :h", ExpressionAttributeNames={"#s": "seq", "#h": "hash"},
        ExpressionAttributeValues={":s": {"N": "2"}, ":h": {"S": second.hash}})

    report = audit.verify(services.ports, "acme")

    assert (report.intact, report.checked, report.last_checked_seq, report.head_seq, report.complete) == (
        True, 2, 2, 2, True)


def test_continuing_from_after_an_edited_entry_still_reports_that_entry(api, services):
    streams(api, 4)
    edit_entry(services, 2, action="data_stream.read")
    report = verified(api, "?from_seq=3")
    assert (report["first_break"]["seq"], report["first_break"]["reason"]) == (2, "hash_mismatch")


# Concurrency ---------------------------------------------------------------------------------

def test_concurrent_appenders_never_fork_the_chain(services, monkeypatch):
    # DynamoDB applies each request atomically (a conditional put's check and write are one step);
    # moto does not under threads, so each request is made one at a time here, as the service
    # would apply it. The writers' steps (read the head, put, move the head) still interleave.
    # tests/e2e/test_audit_local.py does the same over HTTP against dynalite, with no such help.
    client, one_at_a_time = services.aws.dynamodb, threading.Lock()
    make_call = client._make_api_call

    def atomic_call(operation, params):
        with one_at_a_time:
            return make_call(operation, params)

    monkeypatch.setattr(client, "_make_api_call", atomic_call)

    def append_five(writer: int) -> None:
        for n in range(5):
            audit.record(services.ports, "acme", actor=f"system:test_writer:{writer}", action="test.appended",
                         resource_type="test", resource_id=f"{writer}-{n}")

    with ThreadPoolExecutor(max_workers=6) as pool:
        list(pool.map(append_five, range(6)))

    stored = list(services.audit.entries_between("acme", 1, 100))
    assert [e.seq for e in stored] == list(range(1, 31))
    assert sorted(e.resource_id for e in stored) == sorted(f"{w}-{n}" for w in range(6) for n in range(5))
    assert services.audit.head("acme").seq == 30
    report = audit.verify(services.ports, "acme")
    assert (report.intact, report.checked, report.complete) == (True, 30, True)


def test_a_writer_that_crashed_before_moving_the_head_is_healed_by_the_next_append(services):
    for n in range(3):
        audit.record(services.ports, "acme", actor="system:sweeper", action="test.appended", resource_type="test",
                     resource_id=n)
    head = services.audit.get("acme", 2)  # the head as it was before the third append moved it
    services.aws.dynamodb.update_item(
        TableName=services.settings.table_name, Key={"pk": {"S": keys.audit_pk("acme")}, "sk": {"S": "HEAD"}},
        UpdateExpression="SET #s = :s, #h = :h", ExpressionAttributeNames={"#s": "seq", "#h": "hash"},
        ExpressionAttributeValues={":s": {"N": "2"}, ":h": {"S": head.hash}})

    audit.record(services.ports, "acme", actor="system:sweeper", action="test.appended", resource_type="test",
                 resource_id=3)

    assert [e.seq for e in services.audit.entries_between("acme", 1, 10)] == [1, 2, 3, 4]
    assert services.audit.head("acme").seq == 4 and audit.verify(services.ports, "acme").intact


def test_a_lost_head_is_taken_from_the_newest_entry(services):
    for n in range(2):
        audit.record(services.ports, "acme", actor="system:sweeper", action="test.appended", resource_type="test",
                     resource_id=n)
    services.aws.dynamodb.delete_item(TableName=services.settings.table_name,
                                      Key={"pk": {"S": keys.audit_pk("acme")}, "sk": {"S": "HEAD"}})

    audit.record(services.ports, "acme", actor="system:sweeper", action="test.appended", resource_type="test",
                 resource_id=2)

    assert [e.seq for e in services.audit.entries_between("acme", 1, 10)] == [1, 2, 3]
    assert services.audit.head("acme").seq == 3 and audit.verify(services.ports, "acme").intact
