"""The local stack's admin user: made at the first start, re-linked to the embedded pool's new
`sub` at every later one (that pool keeps its users in memory), and an admin who can sign in again."""
from __future__ import annotations

from dataclasses import replace

from chalicelib.domain.users import Role, UserStatus
from chalicelib.local.__main__ import ensure_admin_user
from tests.fakes import fake_ports

EMAIL = "admin@local.test"


def test_the_first_start_makes_the_admin_and_later_ones_relink_the_same_user():
    ports = fake_ports()
    first = ensure_admin_user(ports, "local", EMAIL, "sub-1")
    assert (first.role, first.status, first.idp_user_id) == (Role.ADMIN, UserStatus.INVITED, "sub-1")
    again = ensure_admin_user(ports, "local", EMAIL, "sub-2")
    assert again.id == first.id and again.idp_user_id == "sub-2"
    assert ports.users.find_by_subject("sub-1") is None and ports.users.find_by_subject("sub-2").id == first.id
    assert ensure_admin_user(ports, "local", EMAIL, "sub-2") == again


def test_an_admin_demoted_or_deactivated_meanwhile_is_an_admin_again():
    ports = fake_ports()
    made = ensure_admin_user(ports, "local", EMAIL, "sub-1")
    ports.users.save(replace(made, role=Role.VIEWER, status=UserStatus.DEACTIVATED), made)
    restored = ensure_admin_user(ports, "local", EMAIL, "sub-2")
    assert (restored.id, restored.role, restored.status) == (made.id, Role.ADMIN, UserStatus.INVITED)
