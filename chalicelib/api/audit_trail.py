"""What the audit trail records of a state-changing request: its action, resource and summary,
from the route it took (the middleware appends one entry per 2xx POST/PUT/PATCH/DELETE).

ROUTE_ACTIONS maps each route to `resource.verb` (past tense), its resource type and where the
resource's id comes from: a path parameter, else the response body's `id` (or `key`). A route not
listed (a new one) still gets an entry, its action derived from its path (`derived`); a route
mapped to None writes no entry here: it changes nothing (a dry run), or its service announces the
change itself, once however often the request is repeated (an approval's decision). The summary
never copies the request's body: it names the fields a PATCH sent, takes a few ids and counts from
the response, and adds what the service noted (`services.audit.note_change`: each changed field's
before and after, cut and redacted).
"""
from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from chalicelib.api.routing import API_PREFIX

MUTATING_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


@dataclass(frozen=True)
class Audited:
    action: str
    resource_type: str
    id_param: str | None = None  # the path parameter naming the resource; None: the response's `id_field`
    id_field: str = "id"
    # Path parameters and response fields copied into the summary (under these names).
    params: Mapping[str, str] | None = None
    fields: Mapping[str, str] | None = None


def _crud(path: str, resource_type: str, param: str = "id", id_field: str = "id") -> dict[tuple[str, str], Audited]:
    one = f"{path}/{{{param}}}"
    return {("POST", path): Audited(f"{resource_type}.created", resource_type, id_field=id_field),
            ("PATCH", one): Audited(f"{resource_type}.updated", resource_type, param),
            ("DELETE", one): Audited(f"{resource_type}.deleted", resource_type, param)}


EXCEPTION = "reconciliation_exception"
ROUTE_ACTIONS: dict[tuple[str, str], Audited | None] = {
    **_crud("/data_streams", "data_stream", "key", id_field="key"),
    **_crud("/data_stream_property_definitions", "data_stream_property_definition"),
    **_crud("/reconciliations", "reconciliation"),
    **_crud("/reconciliation_stories", "reconciliation_story"),
    **_crud("/agents", "agent"),
    ("POST", "/records/bulk"): Audited("bulk_request.created", "bulk_request",
                                       fields={"total_items": "total_items"}),
    ("DELETE", "/records/{id}"): Audited("record.deleted", "record", "id"),
    ("POST", "/data_streams/{key}/file_imports"): Audited("file_import.created", "file_import",
                                                          params={"key": "data_stream_key"}),
    ("POST", "/file_imports"): Audited("file_import.created", "file_import"),
    ("POST", "/file_imports/{id}/cancel"): Audited("file_import.cancellation_requested", "file_import", "id",
                                                   fields={"status": "status"}),
    ("POST", "/reconciliations/{id}/runs"): Audited("reconciliation_run.created", "reconciliation_run",
                                                    params={"id": "reconciliation_id"}),
    ("POST", "/reconciliations/{id}/runs/{run_id}/cancel"): Audited(
        "reconciliation_run.cancellation_requested", "reconciliation_run", "run_id", params={"id": "reconciliation_id"},
        fields={"status": "status"}),
    ("POST", "/reconciliations/{id}/rules"): Audited("reconciliation_rule.created", "reconciliation_rule",
                                                     params={"id": "reconciliation_id"}),
    ("PATCH", "/reconciliation_rules/{id}"): Audited("reconciliation_rule.updated", "reconciliation_rule", "id"),
    ("DELETE", "/reconciliation_rules/{id}"): Audited("reconciliation_rule.deleted", "reconciliation_rule", "id"),
    ("POST", "/reconciliation_rules/{id}/dry_run"): None,  # computes, changes nothing
    ("POST", "/reconciliations/{id}/rule_suggestions"): Audited("reconciliation.rules_suggested", "reconciliation",
                                                                "id"),
    ("POST", "/reconciliation_rules/{id}/accept"): Audited("reconciliation_rule.accepted", "reconciliation_rule",
                                                           "id", fields={"priority": "priority"}),
    ("POST", "/reconciliation_rules/{id}/dismiss"): Audited("reconciliation_rule.dismissed", "reconciliation_rule",
                                                            "id"),
    # Signing in, refreshing and signing out change nothing of ours (the provider keeps sessions).
    ("POST", "/session"): None,
    ("POST", "/session/refresh"): None,
    ("DELETE", "/session"): None,
    ("POST", "/reconciliation_matches"): Audited("reconciliation_match.created", "reconciliation_match",
                                                 fields={"reconciliation_id": "reconciliation_id"}),
    ("POST", "/reconciliation_matches/{id}/confirm"): Audited("reconciliation_match.confirmed",
                                                              "reconciliation_match", "id"),
    ("DELETE", "/reconciliation_matches/{id}"): Audited("reconciliation_match.deleted", "reconciliation_match", "id"),
    # A bulk action's own entry; each item it changes gets the single route's entry (services/bulk_actions.py).
    ("POST", "/reconciliation_exceptions/bulk"): Audited("bulk_action.created", "bulk_action", fields={
        "action": "action", "total_items": "total_items"}),
    ("POST", "/reconciliation_matches/bulk"): Audited("bulk_action.created", "bulk_action", fields={
        "action": "action", "total_items": "total_items"}),
    ("PATCH", "/reconciliation_exceptions/{id}"): Audited(f"{EXCEPTION}.updated", EXCEPTION, "id"),
    ("POST", "/reconciliation_exceptions/{id}/assignees"): Audited(f"{EXCEPTION}.assigned", EXCEPTION, "id",
                                                                   fields={"id": "assignee_id"}),
    ("DELETE", "/reconciliation_exceptions/{id}/assignees/{assignee_id}"): Audited(
        f"{EXCEPTION}.unassigned", EXCEPTION, "id", params={"assignee_id": "assignee_id"}),
    ("POST", "/reconciliation_exceptions/{id}/comments"): Audited(f"{EXCEPTION}.commented", EXCEPTION, "id",
                                                                  fields={"id": "comment_id"}),
    ("POST", "/reconciliation_exceptions/{id}/investigations"): Audited(
        "investigation.created", "investigation", params={"id": "reconciliation_exception_id"}),
    ("POST", "/reconciliation_exceptions/{id}/investigations/{investigation_id}/accept"): Audited(
        "investigation.accepted", "investigation", "investigation_id", fields={"id": "reconciliation_match_id"}),
    ("POST", "/agents/{id}/files"): Audited("agent_file.created", "agent_file", params={"id": "agent_id"}),
    ("DELETE", "/agents/{id}/files/{file_id}"): Audited("agent_file.deleted", "agent_file", "file_id",
                                                        params={"id": "agent_id"}),
    ("POST", "/agents/{id}/runs"): Audited("agent_run.created", "agent_run", params={"id": "agent_id"}),
    # The code itself is never recorded: only that one was sent, for which run.
    ("POST", "/agents/{id}/verification"): Audited("agent_run.verification_code_sent", "agent_run",
                                                   params={"id": "agent_id"}),
    **_crud("/webhook_endpoints", "webhook_endpoint"),
    ("POST", "/webhook_endpoints/{id}/rotate_secret"): Audited("webhook_endpoint.secret_rotated",
                                                               "webhook_endpoint", "id"),
    ("POST", "/webhook_endpoints/{id}/deliveries/{delivery_id}/retry"): Audited(
        "webhook_delivery.retried", "webhook_delivery", "delivery_id", params={"id": "webhook_endpoint_id"}),
    ("POST", "/users"): Audited("user.invited", "user", fields={"role": "role"}),
    ("PATCH", "/users/{id}"): Audited("user.updated", "user", "id", fields={"role": "role", "status": "status"}),
    ("DELETE", "/users/{id}"): Audited("user.deactivated", "user", "id"),
    # Never the secret: the key's access only.
    ("POST", "/api_keys"): Audited("api_key.created", "api_key", fields={"access": "access"}),
    ("DELETE", "/api_keys/{id}"): Audited("api_key.revoked", "api_key", "id"),
    # What was exported, not its rows: the kind and format (the filters stay on the export).
    ("POST", "/exports"): Audited("export.created", "export", fields={"kind": "kind", "format": "format"}),
    # Approvals: deciding is announced by services/approvals.py (the approval's entry, then its event, once).
    ("PUT", "/reconciliations/{id}/approval_policy"): Audited("approval_policy.updated", "approval_policy", "id"),
    ("POST", "/approvals/{id}/approve"): None,
    ("POST", "/approvals/{id}/reject"): None,
    # A close names its period; a reopen its reason (services/period_closes.py notes both).
    ("POST", "/reconciliations/{id}/period_closes"): Audited("period_close.created", "period_close",
                                                             params={"id": "reconciliation_id"}),
    ("POST", "/reconciliations/{id}/period_closes/{close_id}/reopen"): Audited(
        "period_close.reopened", "period_close", "close_id", params={"id": "reconciliation_id"}),
    # Service levels and routing (docs/service-levels.md): the policy's id is its reconciliation's.
    ("PUT", "/reconciliations/{id}/service_levels"): Audited("service_level_policy.updated", "service_level_policy",
                                                            "id"),
    ("DELETE", "/reconciliations/{id}/service_levels"): Audited("service_level_policy.reset", "service_level_policy",
                                                               "id"),
    ("POST", "/reconciliations/{id}/routing_rules"): Audited("routing_rule.created", "routing_rule",
                                                             params={"id": "reconciliation_id"}),
    ("PATCH", "/reconciliations/{id}/routing_rules/{rule_id}"): Audited(
        "routing_rule.updated", "routing_rule", "rule_id", params={"id": "reconciliation_id"}),
    ("DELETE", "/reconciliations/{id}/routing_rules/{rule_id}"): Audited(
        "routing_rule.deleted", "routing_rule", "rule_id", params={"id": "reconciliation_id"}),
    # Reference exchange rates (docs/currencies.md): an import's counts, not its rows.
    ("POST", "/rate_streams"): Audited("rate_stream.created", "rate_stream", id_field="key"),
    ("POST", "/rate_streams/{key}/rates"): Audited("rate_stream.rates_imported", "rate_stream", "key", fields={
        "rows": "rows", "created": "created", "replaced": "replaced"}),
}
# A request whose action now waits for an approver changed nothing: its entry is the approval's
# `approval.requested` (services/approvals.py notes this, and announces it).
APPROVAL_REQUESTED_NOTE = "approval_requested"


@dataclass(frozen=True)
class AuditedRequest:
    action: str
    resource_type: str
    resource_id: str | None
    summary: dict[str, Any]


def singular(segment: str) -> str:
    if segment.endswith("ies"):
        return segment[:-3] + "y"
    return segment[:-1] if segment.endswith("s") else segment


_VERBS = {"POST": "created", "PUT": "updated", "PATCH": "updated", "DELETE": "deleted"}


def derived(method: str, path: str) -> Audited:
    """The action of a route ROUTE_ACTIONS does not list, from its path: `/things` and
    `/things/{id}` give `thing.created/updated/deleted`; `/things/{id}/do_it` gives `thing.do_it`;
    `/things/{id}/parts` (POST) gives `part.created`."""
    segments = path.strip("/").split("/")
    last = segments[-1]
    if last.startswith("{"):
        resource = singular(segments[-2]) if len(segments) > 1 else "resource"
        return Audited(f"{resource}.{_VERBS.get(method, 'changed')}", resource, last.strip("{}"))
    if len(segments) >= 3 and segments[-2].startswith("{") and not last.endswith("s"):
        resource = singular(segments[-3])
        return Audited(f"{resource}.{last}", resource, segments[-2].strip("{}"))
    resource = singular(last)
    return Audited(f"{resource}.{_VERBS.get(method, 'changed')}", resource)


def audited_request(method: str, resource_path: str, uri_params: Mapping[str, str] | None,
                    raw_body: bytes | str | None, response_body: Any,
                    notes: Mapping[str, Any]) -> AuditedRequest | None:
    """The entry of a successful state-changing request, or None when its route changes nothing."""
    if APPROVAL_REQUESTED_NOTE in notes:
        return None
    path = resource_path.removeprefix(API_PREFIX)
    key = (method, path)
    audited = ROUTE_ACTIONS[key] if key in ROUTE_ACTIONS else derived(method, path)
    if audited is None:
        return None
    params = dict(uri_params or {})
    body = _json_object(response_body)
    id_param = audited.id_param
    if id_param is not None and id_param not in params and params:
        id_param = _path_params(path)[-1]  # a listed route whose parameter was renamed since
    resource_id = params.get(id_param) if id_param else None
    if resource_id is None:
        found = body.get(audited.id_field, body.get("id"))
        resource_id = None if found is None or isinstance(found, dict | list) else str(found)
    summary: dict[str, Any] = {name: params[param] for param, name in (audited.params or {}).items()
                               if param in params}
    summary.update({name: body[field] for field, name in (audited.fields or {}).items() if field in body})
    if method in ("PATCH", "PUT"):
        sent = _json_object(raw_body)
        if sent:
            summary["fields"] = sorted(sent)[:20]
    summary.update(notes)
    return AuditedRequest(audited.action, audited.resource_type, resource_id, summary)


def _path_params(path: str) -> list[str]:
    return [segment.strip("{}") for segment in path.split("/") if segment.startswith("{")] or [""]


def _json_object(body: Any) -> dict[str, Any]:
    if isinstance(body, bytes | str):
        try:
            body = json.loads(body or b"null")
        except ValueError:
            return {}
    return body if isinstance(body, dict) else {}
