"""The role table beside the route table: every route that is not public has its role, and no other
entry (tests/integration/test_route_roles.py sends each route with each role)."""
import re

from chalicelib.api.route_roles import ROUTE_ROLES, role_needed
from chalicelib.api.route_table import ROUTES
from chalicelib.domain.users import Role


def test_every_route_but_the_public_ones_has_exactly_one_role():
    private = [(method, path) for method, path, _, _, public in ROUTES if not public]
    public = {(method, path) for method, path, _, _, public in ROUTES if public}
    assert len(private) == len(set(private))
    assert sorted(set(private) - set(ROUTE_ROLES)) == []
    assert sorted(set(ROUTE_ROLES) - set(private)) == []
    assert not public & set(ROUTE_ROLES)


def test_reads_are_a_viewers_but_the_keys():
    reads = {route: role for route, role in ROUTE_ROLES.items() if route[0] == "GET"}
    assert {route for route, role in reads.items() if role is not Role.VIEWER} == {("GET", "/v1/api_keys")}


def test_what_a_preparer_and_an_approver_do():
    assert role_needed("POST", "/v1/reconciliation_exceptions/{id}/comments") is Role.PREPARER
    assert role_needed("POST", "/v1/reconciliation_matches") is Role.PREPARER
    assert role_needed("POST", "/v1/reconciliation_matches/{id}/confirm") is Role.APPROVER
    assert role_needed("DELETE", "/v1/reconciliation_matches/{id}") is Role.APPROVER
    assert role_needed("POST", "/v1/users") is Role.ADMIN


def test_a_route_missing_from_the_table_needs_an_admin():
    assert role_needed("POST", "/v1/nowhere") is Role.ADMIN


def test_the_users_page_shows_the_table_as_it_is():
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "users.md").read_text()
    shown = dict(re.findall(r"^\| `(\w+ /v1/\S+)` \| (\w+) \|$", doc, flags=re.MULTILINE))
    assert shown == {f"{method} {path}": role.value for (method, path), role in ROUTE_ROLES.items()}
