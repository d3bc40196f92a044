"""The web app's sign-in: what it sends and what it gets back (the refresh token goes in a cookie)."""
from __future__ import annotations

from pydantic import Field, SecretStr

from chalicelib.api.schemas.common import Model, RequestModel, Timestamp


class SignInIn(RequestModel):
    email: str = Field(min_length=3, max_length=254, examples=["ana@example.com"])
    password: SecretStr = Field(min_length=1, max_length=256, examples=["Correct-horse-1"])
    new_password: SecretStr | None = Field(default=None, min_length=1, max_length=256, examples=["Battery-staple-2"],
                                           description="An invitee's own password, when the one given is the "
                                                       "invitation's temporary password (409 asks for it)")


class SessionUserOut(Model):
    id: int
    email: str
    name: str | None
    role: str
    environment: str


class SessionOut(Model):
    id_token: str = Field(description="For `Authorization: Bearer` on every other route")
    access_token: str = Field(description="For DELETE /v1/session (sign-out everywhere)")
    expires_at: Timestamp = Field(description="When both tokens expire, by the server's clock (for display)")
    expires_in: int = Field(description="Seconds from this answer until both tokens expire: schedule the "
                                        "refresh from when the answer arrived, whatever the client's clock says")
    user: SessionUserOut
