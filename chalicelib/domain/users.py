"""People of an environment: who they are with the identity provider, and what their role lets
them do. We keep no password and mint no token: the provider (a Cognito user pool) does both."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum


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


def user_actor(user_id: int) -> str:
    """How the audit trail and events name a person who acted."""
    return f"user:{user_id}"
