"""The HTTP API's routers, one per resource: app.py mounts them through chalicelib/api/mount.py."""
from __future__ import annotations

from chalicelib.api import (
    agents,
    approvals,
    audit_events,
    bulk_actions,
    data_streams,
    exports,
    file_imports,
    matches,
    meta,
    overview,
    period_closes,
    property_definitions,
    rate_streams,
    reconciliation_exceptions,
    reconciliations,
    records,
    rule_suggestions,
    runs,
    service_levels,
    session,
    stories,
    users,
    web,
    webhook_endpoints,
)
from chalicelib.api.routing import Router

ROUTERS: list[Router] = [meta.router, data_streams.router, property_definitions.router, records.router,
                         file_imports.router, runs.router, matches.router, reconciliation_exceptions.router,
                         reconciliations.router, stories.router, agents.router, audit_events.router,
                         webhook_endpoints.router, users.router, session.router, web.router,
                         overview.router, bulk_actions.router, exports.router, approvals.router,
                         period_closes.router, service_levels.router, rate_streams.router,
                         rule_suggestions.router]
