"""Bodies and answers of /users and /api_keys."""
from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, StringConstraints

from chalicelib.api.schemas.common import Model, RequestModel, Timestamp, unchanged_when_absent

RoleName = Literal["viewer", "preparer", "approver", "admin"]
ROLE_DESCRIPTION = ("viewer: reads; preparer: works exceptions, comments, investigates, proposes and makes manual "
                    "matches; approver: a preparer's work, plus confirms and rejects matches; admin: everything, "
                    "plus users, keys, webhooks, agents and settings")
PersonName = Annotated[str, StringConstraints(strip_whitespace=True, max_length=200)]


class InviteUser(RequestModel):
    email: Annotated[str, StringConstraints(strip_whitespace=True, min_length=3, max_length=254)] = Field(
        description="Where the identity provider sends the invitation; one user per email in an environment",
        json_schema_extra={"format": "email"})
    name: PersonName | None = None
    role: RoleName = Field(description=ROLE_DESCRIPTION)


class UpdateUser(RequestModel):
    role: RoleName = unchanged_when_absent(ROLE_DESCRIPTION)
    name: PersonName | None = unchanged_when_absent()
    status: Literal["active", "deactivated"] = unchanged_when_absent(
        "deactivated: they cannot sign in (as DELETE); active: they can again")


class UserOut(Model):
    id: int = Field(description="What assignees, authors and mentions name")
    idp_user_id: str = Field(description="The identity provider's user id (`sub`)")
    email: str
    name: str | None
    role: RoleName
    status: Literal["invited", "active", "deactivated"] = Field(
        description="invited until the first sign-in; deactivated users cannot sign in")
    created_at: Timestamp
    last_sign_in_at: Timestamp | None = Field(description="Within the last few minutes: written at most that often")


class UserPage(Model):
    data: list[UserOut]
    next_cursor: str | None
    limit: int


class CreateApiKey(RequestModel):
    label: Annotated[str, StringConstraints(strip_whitespace=True, max_length=200)] | None = None
    access: Literal["full", "read_only"] = Field(
        default="full", description="full: every route, as an admin; read_only: reads only, as a viewer")


class ApiKeyOut(Model):
    id: int
    label: str | None
    access: Literal["full", "read_only"]
    created_at: Timestamp
    last_used_at: Timestamp | None
    revoked_at: Timestamp | None
    owner_user_id: int | None = Field(default=None, description="The person the key belongs to: who created it (its "
                                      "secret is shown to them alone), or the owner of the key it was created with; "
                                      "null for a machine's key. A request with an owned key counts as its owner's "
                                      "for four-eyes approvals")


class ApiKeyWithSecretOut(ApiKeyOut):
    secret: str = Field(description="The key (rk_...): shown in this response only; send it as X-API-KEY")


class ApiKeyList(Model):
    data: list[ApiKeyOut]
