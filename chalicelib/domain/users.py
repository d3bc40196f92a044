"""People of an environment: who they are with the identity provider, and what their role lets
them do. We keep no password and mint no token: the provider (a Cognito user pool) does both."""
from __future__ import annotations

import re
from dataclasses import dataclass, replace
from datetime import datetime
from enum import StrEnum

from chalicelib.domain.errors import ValidationFailed


class Role(StrEnum):
    """One per user, each allowing what the one before it does and more."""
    VIEWER = "viewer"  # reads
    PREPARER = "preparer"  # works exceptions, comments, investigates, proposes and makes manual matches
    APPROVER = "approver"  # a preparer's work, plus confirms and rejects proposed matches, approves
    ADMIN = "admin"  # everything, plus users, keys, webhooks, agents and settings

    @property
    def rank(self) -> int:
        return ROLE_ORDER.index(self)

    def allows(self, needed: Role) -> bool:
        return self.rank >= needed.rank


ROLE_ORDER: tuple[Role, ...] = (Role.VIEWER, Role.PREPARER, Role.APPROVER, Role.ADMIN)


class UserStatus(StrEnum):
    INVITED = "invited"  # the provider sent the invitation; not signed in yet
    ACTIVE = "active"
    DEACTIVATED = "deactivated"  # cannot sign in; past actions keep their name


@dataclass(frozen=True)
class User:
    id: int  # what `assignees` and `mentions` carry
    environment: str
    idp_user_id: str  # the provider's `sub`
    email: str
    name: str | None
    role: Role
    status: UserStatus
    created_at: datetime
    last_sign_in_at: datetime | None = None


@dataclass(frozen=True)
class VerifiedToken:
    """What a provider's token says once its signature, issuer, audience and expiry are checked."""
    subject: str  # the provider's user id (`sub`)
    token_use: str  # "id" or "access"
    expires_at: datetime
    email: str | None = None


USER_ACTOR_PREFIX = "user:"


def user_actor(user_id: int) -> str:
    """How the audit trail and events name a person who acted."""
    return f"{USER_ACTOR_PREFIX}{user_id}"


MAX_EMAIL = 254
EMAIL_PATTERN = re.compile(r"^[^@\s]{1,64}@[^@\s]+\.[^@\s]+$")
MAX_NAME = 200


def normalized_email(email: str) -> str:
    """An email as we compare it: one user per email of an environment, whatever its case."""
    return email.strip().lower()


def check_email(email: str) -> str:
    normalized = normalized_email(email)
    if len(normalized) > MAX_EMAIL or not EMAIL_PATTERN.match(normalized):
        raise ValidationFailed.on("email", "must be an email address")
    return normalized


def can_sign_in(user: User) -> bool:
    return user.status is not UserStatus.DEACTIVATED


def can_be_named(user: User) -> bool:
    """Who a new assignment, comment or mention may name: a user of the environment who is not
    deactivated. An invited user counts: a lead invites the team and hands out the queue before
    everyone has signed in (the invitation is theirs to accept)."""
    return user.status is not UserStatus.DEACTIVATED


def signed_in(user: User, at: datetime) -> User:
    """A sign-in's effect on the user: the first one makes an invited user active."""
    status = UserStatus.ACTIVE if user.status is UserStatus.INVITED else user.status
    return replace(user, status=status, last_sign_in_at=at)


@dataclass(frozen=True)
class Principal:
    """Who sends a request: a person signed in with the provider's token, or a machine with an API
    key. The environment, the role and the actor the audit trail names all come from it."""
    environment: str
    role: Role
    actor: str  # user:<id> or api_key:<id>
    user: User | None = None  # None for an API key

    @property
    def user_id(self) -> int | None:
        return self.user.id if self.user is not None else None
