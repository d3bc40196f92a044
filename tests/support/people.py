"""Users in a test's world, as an admin's invitation and the person's first sign-in leave them."""
from __future__ import annotations

from chalicelib.domain.clock import utc_now
from chalicelib.domain.users import Role, User, UserStatus
from chalicelib.services.ports import Users


def add_user(users: Users, environment: str, idp_user_id: str, role: Role = Role.PREPARER, *,
             email: str | None = None, status: UserStatus = UserStatus.ACTIVE) -> User:
    user = User(id=users.next_id(environment), environment=environment, idp_user_id=idp_user_id,
                email=email or f"{idp_user_id.lower()}@{environment}.example", name=idp_user_id.title(), role=role,
                status=status, created_at=utc_now())
    return users.add(user)
