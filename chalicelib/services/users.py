"""Users of an environment: invite (the provider sends the invitation), change a role or a name,
deactivate and reactivate; who sends a request (its principal: a user's token, or an API key); and
the one check that a person named in a write (assignee, author, mention) is an active user."""
from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import replace
from datetime import timedelta

from chalicelib.domain.api_keys import ApiKey
from chalicelib.domain.audit import api_key_actor
from chalicelib.domain.clock import utc_now
from chalicelib.domain.errors import Conflict, FieldError, Unauthorized, ValidationFailed
from chalicelib.domain.users import (
    MAX_NAME,
    Principal,
    Role,
    User,
    UserStatus,
    can_be_named,
    can_sign_in,
    check_email,
    user_actor,
)
from chalicelib.observability import logger
from chalicelib.services.paging import every
from chalicelib.services.ports import Ports

USER_PAGE = 200  # users a listing reads at a time


def invite(ports: Ports, environment: str, *, email: str, name: str | None, role: Role) -> User:
    """The provider makes the person its user and sends the invitation; then they are our user,
    invited until their first sign-in. Nothing reaches the provider before we know the person may be
    invited here: a person the provider holds who is another environment's user is refused at once
    (no invitation re-sent, no temporary password reset). A retry after a failure between the two
    finds the provider's user again (its invite returns the same id) and finishes; a retry after
    success, with the same role and name, answers the user again and sends nothing."""
    address = check_email(email)
    name = _checked_name(name)
    existing = ports.users.find_by_email(environment, address)
    if existing is not None:
        if _as_asked(existing, role, name) and existing.status is not UserStatus.DEACTIVATED:
            return existing
        raise Conflict(f"{address} is already user {existing.id} of this environment")
    held = ports.identity.find(address)
    if held is not None:
        linked = ports.users.find_by_subject(held)
        if linked is not None and linked.environment != environment:
            raise Conflict(_not_invitable(address))
    subject = ports.identity.invite(address, name)
    user = User(id=ports.users.next_id(environment), environment=environment, idp_user_id=subject, email=address,
                name=name, role=role, status=UserStatus.INVITED, created_at=utc_now())
    stored = ports.users.add(user)
    if not _as_asked(stored, role, name):  # another admin's invitation of the same person came first
        raise Conflict(f"{address} is already user {stored.id} of this environment, as {stored.role.value}")
    return stored


def _not_invitable(email: str) -> str:
    """Said alike whatever the reason (never naming another environment)."""
    return f"{email} cannot be invited to this environment"


def _as_asked(user: User, role: Role, name: str | None) -> bool:
    return (user.role, user.name) == (role, name)


def update(ports: Ports, environment: str, user_id: int, *, acting: Principal, role: Role | None = None,
           name: str | None = None, status: UserStatus | None = None, fields: Iterable[str] = ()) -> User:
    """A change of role, name (`fields` names those given) or status (active or deactivated). Saved
    first, then the provider enables or disables the person: a retry redoes the provider's call.
    The environment keeps an active admin: demoting or deactivating the last one is 409."""
    current = ports.users.get(environment, user_id)
    given = set(fields)
    new_role = role if role is not None else current.role
    new_name = _checked_name(name) if "name" in given else current.name
    new_status = current.status
    if status is UserStatus.DEACTIVATED:
        new_status = UserStatus.DEACTIVATED
    elif status is UserStatus.ACTIVE and current.status is UserStatus.DEACTIVATED:
        new_status = UserStatus.ACTIVE if current.last_sign_in_at else UserStatus.INVITED
    elif status is UserStatus.INVITED:
        raise ValidationFailed.on("status", "must be active or deactivated")
    if acting.user_id == user_id and (new_status is UserStatus.DEACTIVATED or new_role is not current.role):
        raise Conflict("you cannot deactivate yourself or change your own role; ask another admin")
    updated = replace(current, role=new_role, name=new_name, status=new_status)
    saved = current
    if updated != current:
        steps_down = _is_active_admin(current) and not _is_active_admin(updated)
        if steps_down and not _other_active_admins(ports, environment, user_id):
            raise Conflict(_last_admin(user_id))
        saved = ports.users.save(updated, current)
        if steps_down and not _other_active_admins(ports, environment, user_id):
            # Two requests demoting the last two admins at once: both see none left, both undo.
            ports.users.save(current, saved)
            raise Conflict(_last_admin(user_id))
    if new_status is UserStatus.DEACTIVATED:
        # After our save, which refuses their next request at once; again on a retry, if it failed.
        ports.identity.disable(current.idp_user_id)
        _hand_on_exceptions(ports, environment, saved)
    elif status is UserStatus.ACTIVE:
        ports.identity.enable(current.idp_user_id)  # idempotent: a retry enables them, if the first failed
    return saved


def _hand_on_exceptions(ports: Ports, environment: str, user: User) -> None:
    """A deactivated user's open exceptions go to others by the routing rules (services/routing.py);
    what this leaves (a failure) the sweeper hands on within a minute."""
    if ports.service_levels is None:
        return
    from chalicelib.services import routing

    try:
        routing.reassign_from(ports, environment, user)
    except Exception:
        logger.exception("handing on a deactivated user's exceptions failed", extra={"user_id": user.id})


def active_admins(ports: Ports, environment: str) -> list[User]:
    """The environment's active admins (it has few users: every page of them is read)."""
    return [u for u in every_user(ports, environment) if _is_active_admin(u)]


def every_user(ports: Ports, environment: str) -> Iterator[User]:
    """The environment's users, every page of them (an environment has few)."""
    return every(lambda cursor: ports.users.list_page(environment, USER_PAGE, cursor))


def _other_active_admins(ports: Ports, environment: str, user_id: int) -> list[User]:
    return [u for u in active_admins(ports, environment) if u.id != user_id]


def _is_active_admin(user: User) -> bool:
    return user.role is Role.ADMIN and user.status is UserStatus.ACTIVE


def _last_admin(user_id: int) -> str:
    return f"user {user_id} is the environment's last active admin; make another user admin first"


def deactivate(ports: Ports, environment: str, user_id: int, *, acting: Principal) -> User:
    """They cannot sign in, and their token is refused from their next request; what they did keeps
    their name (the audit trail and events name `user:<id>`, which stays)."""
    return update(ports, environment, user_id, acting=acting, status=UserStatus.DEACTIVATED)


# Who sends a request --------------------------------------------------------------------

def principal_of_key(key: ApiKey) -> Principal:
    return Principal(environment=key.environment, role=key.role, actor=api_key_actor(key.id))


def principal_of_token(ports: Ports, token: str, sign_in_resolution: timedelta) -> Principal:
    """A person's token: verified by the provider's keys (signature, issuer, audience, expiry),
    then its subject must be a user who may sign in. A first request makes an invited user active."""
    verified = ports.identity.verify(token)
    user = ports.users.find_by_subject(verified.subject)
    if user is None:
        raise Unauthorized("this person is not a user of any environment; ask an admin for an invitation")
    if not can_sign_in(user):
        raise Unauthorized("this user is deactivated; ask an admin to reactivate them")
    user = ports.users.record_sign_in(user, sign_in_resolution)
    return Principal(environment=user.environment, role=user.role, actor=user_actor(user.id), user=user)


# People named in a write ----------------------------------------------------------------

def active_users(ports: Ports, environment: str, user_ids: Iterable[int], field: str) -> dict[int, User]:
    """The users of these ids, each an active user of the environment; else 422 naming each that is
    not (`field[i]`)."""
    ids = list(user_ids)
    found = ports.users.get_many(environment, ids)
    errors = [FieldError(f"{field}[{n}]", f"user {user_id} is not an active user of this environment")
              for n, user_id in enumerate(ids) if user_id not in found or not can_be_named(found[user_id])]
    if errors:
        raise ValidationFailed(errors)
    return found


def active_user(ports: Ports, environment: str, field: str, *, user_id: int | None = None,
                idp_user_id: str | None = None) -> User:
    """One person named by our id or the provider's, an active user of the environment; else 422
    naming them."""
    if user_id is not None:
        user = ports.users.get_many(environment, [user_id]).get(user_id)
        named = f"user {user_id}"
    else:
        found = ports.users.find_by_subject(idp_user_id or "")
        user = found if found is not None and found.environment == environment else None
        named = f"'{(idp_user_id or '')[:64]}'"
    if user is None or not can_be_named(user):
        raise ValidationFailed.on(field, f"{named} is not an active user of this environment")
    return user


def _checked_name(name: str | None) -> str | None:
    if name is None:
        return None
    name = name.strip()
    if len(name) > MAX_NAME:
        raise ValidationFailed.on("name", f"must be at most {MAX_NAME} characters")
    return name or None
