"""Every route with every role, as a person signed in with the provider's token: a role below the
route's (route_roles.py) is 403 naming the role needed, before the route runs; a role at or above it
passes (the route may then answer 404 or 422 for the ids and empty bodies sent here). One world for
the module, the app in-process: ~380 requests in seconds."""
from __future__ import annotations

import re

import pytest

from chalicelib.api.route_roles import ROUTE_ROLES
from chalicelib.api.route_table import ROUTES
from chalicelib.domain.users import Role
from tests.support.people import add_user

PRIVATE = [(method, path) for method, path, _, _, public in ROUTES if not public]
NO_SUCH_ID = "999999999"


@pytest.fixture(scope="module")
def tokens(module_services) -> dict[Role, str]:
    """A user of each role, and the token the provider (tests/conftest.py's fake) gave them."""
    identity = module_services.identity
    return {role: identity.token_for(add_user(module_services.users, "acme", f"role-{role.value}", role).idp_user_id)
            for role in Role}


def concrete(path: str) -> str:
    """A path's parameters filled with what names nothing: ids and keys that do not exist."""
    return re.sub(r"{(\w+)}", lambda m: "no-such-stream" if m[1] == "key" else NO_SUCH_ID, path)


@pytest.mark.parametrize("role", list(Role), ids=lambda role: role.value)
@pytest.mark.parametrize("route", PRIVATE, ids=lambda route: f"{route[0]} {route[1]}")
def test_each_route_allows_its_role_and_above_and_refuses_the_rest(module_api, tokens, route, role):
    method, path = route
    needed = ROUTE_ROLES[route]
    body = {} if method in ("POST", "PATCH") else None
    response = module_api.request(method, concrete(path), body, key=None,
                                  headers={"Authorization": f"Bearer {tokens[role]}"})
    if role.allows(needed):
        assert response.status_code not in (401, 403), response.json_body
        assert response.status_code < 500, response.json_body
    else:
        assert response.status_code == 403, response.json_body
        assert response.json_body == {"message": f"{method} {path} needs the {needed.value} role or above; "
                                                 f"yours is {role.value}"}


def test_the_served_document_names_each_operations_role_and_its_403(module_api):
    document = module_api.get("/v1/openapi.json", key=None).json_body
    for (method, path), needed in ROUTE_ROLES.items():
        operation = document["paths"][path][method.lower()]
        assert operation["x-role"] == needed.value, (method, path)
        # Every caller is a viewer at least: a route a viewer may call never answers 403.
        assert ("403" in operation["responses"]) == (needed is not Role.VIEWER), (method, path)
        assert operation["description"] == f"Needs the {needed.value} role or above."
    assert "x-role" not in document["paths"]["/v1/health"]["get"]
