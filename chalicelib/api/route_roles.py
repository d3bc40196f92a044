"""The role each route needs at least, beside the route table (route_table.py): one entry per
route that is not public, checked by the middleware before the route runs (403 naming the role
needed). tests/unit/test_route_roles.py holds the two tables together, and
tests/integration/test_route_roles.py sends every route with every role.

What each role does (domain/users.py `Role`): a viewer reads; a preparer works exceptions (status,
assignees, comments, investigations), proposes and makes manual matches, imports files and starts
runs and dry runs; an approver confirms and rejects (deletes) matches; an admin does everything
else: the environment's settings (data streams, their properties, reconciliations and rules,
stories), records sent by machines, agents, webhooks, users and API keys."""
from __future__ import annotations

from chalicelib.domain.users import Role

VIEWER, PREPARER, APPROVER, ADMIN = Role.VIEWER, Role.PREPARER, Role.APPROVER, Role.ADMIN

ROUTE_ROLES: dict[tuple[str, str], Role] = {
    # The environment at a glance (the web app's front page).
    ("GET", "/v1/overview"): VIEWER,
    # Data streams and their properties: settings.
    ("POST", "/v1/data_streams"): ADMIN,
    ("GET", "/v1/data_streams/{key}/balances"): VIEWER,
    ("GET", "/v1/data_streams"): VIEWER,
    ("GET", "/v1/data_streams/{key}"): VIEWER,
    ("PATCH", "/v1/data_streams/{key}"): ADMIN,
    ("DELETE", "/v1/data_streams/{key}"): ADMIN,
    ("POST", "/v1/data_stream_property_definitions"): ADMIN,
    ("GET", "/v1/data_stream_property_definitions"): VIEWER,
    ("GET", "/v1/data_stream_property_definitions/{id}"): VIEWER,
    ("PATCH", "/v1/data_stream_property_definitions/{id}"): ADMIN,
    ("DELETE", "/v1/data_stream_property_definitions/{id}"): ADMIN,
    # Records: machines send them (a full key); a person imports files.
    ("POST", "/v1/records/bulk"): ADMIN,
    ("GET", "/v1/bulk_requests/{id}"): VIEWER,
    ("GET", "/v1/records"): VIEWER,
    ("GET", "/v1/records/{id}"): VIEWER,
    ("DELETE", "/v1/records/{id}"): ADMIN,
    ("POST", "/v1/data_streams/{key}/file_imports"): PREPARER,
    ("POST", "/v1/file_imports"): PREPARER,
    ("GET", "/v1/data_streams/{key}/file_imports"): VIEWER,
    ("GET", "/v1/file_imports/{id}"): VIEWER,
    ("GET", "/v1/file_imports/{id}/records"): VIEWER,
    ("GET", "/v1/file_imports/{id}/results"): VIEWER,
    ("POST", "/v1/file_imports/{id}/cancel"): PREPARER,
    # Runs.
    ("POST", "/v1/reconciliations/{id}/runs"): PREPARER,
    ("GET", "/v1/reconciliations/{id}/runs"): VIEWER,
    ("GET", "/v1/reconciliations/{id}/runs/{run_id}"): VIEWER,
    ("POST", "/v1/reconciliations/{id}/runs/{run_id}/cancel"): PREPARER,
    ("POST", "/v1/reconciliation_rules/{id}/dry_run"): PREPARER,
    # Matches: a preparer proposes and makes manual ones; an approver confirms and rejects.
    ("GET", "/v1/reconciliation_matches"): VIEWER,
    ("GET", "/v1/reconciliation_matches/{id}"): VIEWER,
    ("POST", "/v1/reconciliation_matches"): PREPARER,
    ("POST", "/v1/reconciliation_matches/{id}/confirm"): APPROVER,
    ("DELETE", "/v1/reconciliation_matches/{id}"): APPROVER,
    # Exceptions: a preparer's work.
    ("GET", "/v1/reconciliation_exceptions"): VIEWER,
    ("GET", "/v1/reconciliation_exceptions/{id}"): VIEWER,
    ("GET", "/v1/reconciliation_exceptions/{id}/records"): VIEWER,
    ("PATCH", "/v1/reconciliation_exceptions/{id}"): PREPARER,
    ("POST", "/v1/reconciliation_exceptions/{id}/assignees"): PREPARER,
    ("DELETE", "/v1/reconciliation_exceptions/{id}/assignees/{assignee_id}"): PREPARER,
    ("POST", "/v1/reconciliation_exceptions/{id}/comments"): PREPARER,
    ("POST", "/v1/reconciliation_exceptions/{id}/investigations"): PREPARER,
    ("POST", "/v1/reconciliation_exceptions/{id}/investigations/{investigation_id}/accept"): PREPARER,
    # Bulk actions: a preparer may submit; each item is refused unless the caller's role may do it
    # alone (confirm and reject need an approver: domain/bulk_actions.py ROLE_NEEDED).
    ("POST", "/v1/reconciliation_exceptions/bulk"): PREPARER,
    ("POST", "/v1/reconciliation_matches/bulk"): PREPARER,
    ("GET", "/v1/bulk_actions/{id}"): VIEWER,
    # Reconciliations and their rules: settings.
    ("POST", "/v1/reconciliations"): ADMIN,
    ("GET", "/v1/reconciliations"): VIEWER,
    ("GET", "/v1/reconciliations/{id}"): VIEWER,
    ("PATCH", "/v1/reconciliations/{id}"): ADMIN,
    ("DELETE", "/v1/reconciliations/{id}"): ADMIN,
    ("POST", "/v1/reconciliations/{id}/rules"): ADMIN,
    ("GET", "/v1/reconciliations/{id}/rules"): VIEWER,
    ("GET", "/v1/reconciliation_rules/{id}"): VIEWER,
    ("PATCH", "/v1/reconciliation_rules/{id}"): ADMIN,
    ("DELETE", "/v1/reconciliation_rules/{id}"): ADMIN,
    # Stories: settings.
    ("POST", "/v1/reconciliation_stories"): ADMIN,
    ("GET", "/v1/reconciliation_stories"): VIEWER,
    ("GET", "/v1/reconciliation_stories/{id}"): VIEWER,
    ("GET", "/v1/reconciliation_stories/{id}/trace"): VIEWER,
    ("PATCH", "/v1/reconciliation_stories/{id}"): ADMIN,
    ("DELETE", "/v1/reconciliation_stories/{id}"): ADMIN,
    ("GET", "/v1/reconciliation_stories/{id}/summary"): VIEWER,
    # Agents: an admin's.
    ("POST", "/v1/agents"): ADMIN,
    ("GET", "/v1/agents"): VIEWER,
    ("GET", "/v1/agents/{id}"): VIEWER,
    ("PATCH", "/v1/agents/{id}"): ADMIN,
    ("DELETE", "/v1/agents/{id}"): ADMIN,
    ("POST", "/v1/agents/{id}/files"): ADMIN,
    ("DELETE", "/v1/agents/{id}/files/{file_id}"): ADMIN,
    ("POST", "/v1/agents/{id}/runs"): ADMIN,
    ("POST", "/v1/agents/{id}/verification"): ADMIN,
    ("GET", "/v1/agents/{id}/runs"): VIEWER,
    ("GET", "/v1/agents/{id}/runs/{run_id}"): VIEWER,
    # The audit trail: read by all.
    # Exports: whoever reads a list may export it (the audit trail: an admin, checked by kind in the route).
    ("POST", "/v1/exports"): VIEWER,
    ("GET", "/v1/exports"): VIEWER,
    ("GET", "/v1/exports/{id}"): VIEWER,
    ("GET", "/v1/audit_events"): VIEWER,
    ("GET", "/v1/audit_events/verify"): VIEWER,
    # Period close: an approver signs a period off; an admin alone reopens one (docs/period-close.md).
    ("POST", "/v1/reconciliations/{id}/period_closes"): APPROVER,
    ("GET", "/v1/reconciliations/{id}/period_closes"): VIEWER,
    ("GET", "/v1/reconciliations/{id}/period_closes/{close_id}"): VIEWER,
    ("POST", "/v1/reconciliations/{id}/period_closes/{close_id}/reopen"): ADMIN,
    # Webhooks: an admin's.
    ("POST", "/v1/webhook_endpoints"): ADMIN,
    ("GET", "/v1/webhook_endpoints"): VIEWER,
    ("GET", "/v1/webhook_endpoints/{id}"): VIEWER,
    ("PATCH", "/v1/webhook_endpoints/{id}"): ADMIN,
    ("DELETE", "/v1/webhook_endpoints/{id}"): ADMIN,
    ("POST", "/v1/webhook_endpoints/{id}/rotate_secret"): ADMIN,
    ("GET", "/v1/webhook_endpoints/{id}/deliveries"): VIEWER,
    ("POST", "/v1/webhook_endpoints/{id}/deliveries/{delivery_id}/retry"): ADMIN,
    # Users and API keys: an admin's; everyone sees who the users are (to assign and mention them).
    ("GET", "/v1/users"): VIEWER,
    ("GET", "/v1/users/{id}"): VIEWER,
    ("POST", "/v1/users"): ADMIN,
    ("PATCH", "/v1/users/{id}"): ADMIN,
    ("DELETE", "/v1/users/{id}"): ADMIN,
    ("POST", "/v1/api_keys"): ADMIN,
    ("GET", "/v1/api_keys"): ADMIN,
    ("DELETE", "/v1/api_keys/{id}"): ADMIN,
    # Four-eyes approvals: everyone sees them; an approver (never the requester) decides; an admin
    # sets a reconciliation's policy (docs/approvals.md).
    ("GET", "/v1/approvals"): VIEWER,
    ("GET", "/v1/approvals/{id}"): VIEWER,
    ("POST", "/v1/approvals/{id}/approve"): APPROVER,
    ("POST", "/v1/approvals/{id}/reject"): APPROVER,
    ("GET", "/v1/reconciliations/{id}/approval_policy"): VIEWER,
    ("PUT", "/v1/reconciliations/{id}/approval_policy"): ADMIN,
    # Service levels and routing rules of a reconciliation: read by all, changed by an approver
    # (the lead who sets the team's targets and hands out the queue) or an admin.
    ("GET", "/v1/reconciliations/{id}/service_levels"): VIEWER,
    ("PUT", "/v1/reconciliations/{id}/service_levels"): APPROVER,
    ("DELETE", "/v1/reconciliations/{id}/service_levels"): APPROVER,
    ("GET", "/v1/reconciliations/{id}/service_levels/aging"): VIEWER,
    ("GET", "/v1/reconciliations/{id}/routing_rules"): VIEWER,
    ("POST", "/v1/reconciliations/{id}/routing_rules"): APPROVER,
    ("GET", "/v1/reconciliations/{id}/routing_rules/{rule_id}"): VIEWER,
    ("PATCH", "/v1/reconciliations/{id}/routing_rules/{rule_id}"): APPROVER,
    ("DELETE", "/v1/reconciliations/{id}/routing_rules/{rule_id}"): APPROVER,
    # Reference exchange rates (docs/currencies.md): a stream is a setting; its rates are imported
    # like files (by a preparer), and read by all.
    ("POST", "/v1/rate_streams"): ADMIN,
    ("GET", "/v1/rate_streams"): VIEWER,
    ("GET", "/v1/rate_streams/{key}"): VIEWER,
    ("POST", "/v1/rate_streams/{key}/rates"): PREPARER,
    ("GET", "/v1/rate_streams/{key}/rates"): VIEWER,
    # Rules learned from decisions: a preparer (who matches by hand) asks for suggestions, which run
    # nowhere; accepting one makes a rule (settings: an admin's), and so does dismissing one.
    ("POST", "/v1/reconciliations/{id}/rule_suggestions"): PREPARER,
    ("POST", "/v1/reconciliation_rules/{id}/accept"): ADMIN,
    ("POST", "/v1/reconciliation_rules/{id}/dismiss"): ADMIN,
}


def role_needed(method: str, path: str) -> Role:
    """The route's role; a route missing from the table needs an admin (the test fails it)."""
    return ROUTE_ROLES.get((method, path), ADMIN)
