"""The identity provider (`adapters/identity.py`, a Cognito user pool): the people it holds, by
email, each with a `sub` of its own, and which of them are disabled. Its tokens are signed by a
TokenIssuer shaped like the pool (RS256, its issuer and app client) and checked by the real
TokenVerifier against the issuer's published keys, so a test's token passes or fails our checks
exactly as the provider's would."""
from __future__ import annotations

import uuid
from functools import cache
from typing import Any

from chalicelib.adapters.identity import SignInRefused
from chalicelib.adapters.identity_tokens import TokenVerifier
from chalicelib.domain.errors import BadRequest, Conflict, NotFound
from chalicelib.domain.users import VerifiedToken
from tests.support.tokens import TokenIssuer

__all__ = ["FakeIdentityProvider", "SignInRefused", "shared_issuer"]


@cache
def shared_issuer() -> TokenIssuer:
    """One RSA key for every fake of a test process: generating one costs ~0.1 s."""
    return TokenIssuer()


class FakeIdentityProvider:
    """`users`: email -> sub; `names`: sub -> the name given at the invitation; `disabled`: subs
    that cannot sign in; `signed_in`: subs that signed in once (chose their password);
    `invitations`: the emails an invitation went to, in order (a retried invite sends it again
    until the person has signed in; inviting a disabled person is refused, as the pool's adapter
    does). `token_for(sub)` is a token the provider issued to that person (whether or not they are
    disabled since: a token keeps verifying until it expires); `sign_in(email)` is a fresh
    sign-in, which a disabled person does not get."""

    def __init__(self, issuer: TokenIssuer | None = None) -> None:
        self.issuer = issuer or shared_issuer()
        self.verifier = TokenVerifier(self.issuer.issuer, self.issuer.client_id, self.issuer.key_set)
        self.users: dict[str, str] = {}
        self.names: dict[str, str | None] = {}
        self.disabled: set[str] = set()
        self.signed_in: set[str] = set()
        self.invitations: list[str] = []

    def invite(self, email: str, name: str | None) -> str:
        key = email.strip().lower()
        if "@" not in key.strip("@"):
            raise BadRequest(f"the identity provider refused the email {email!r}: it is not an email address")
        if key in self.users:
            sub = self.users[key]
            if sub in self.disabled:
                raise Conflict(f"the identity provider holds {key} disabled: enable that user instead of inviting them")
            if sub not in self.signed_in:
                self.invitations.append(key)
            return sub
        sub = str(uuid.uuid4())
        self.users[key], self.names[sub] = sub, name
        self.invitations.append(key)
        return sub

    def find(self, email: str) -> str | None:
        return self.users.get(email.strip().lower())

    def disable(self, idp_user_id: str) -> None:
        self._held(idp_user_id)
        self.disabled.add(idp_user_id)

    def enable(self, idp_user_id: str) -> None:
        self._held(idp_user_id)
        self.disabled.discard(idp_user_id)

    def verify(self, token: str) -> VerifiedToken:
        return self.verifier.verify(token)

    # Test helpers: what signing in at the provider gives.

    def token_for(self, sub: str, **overrides: Any) -> str:
        """A token of the provider for `sub` (an id token with its email unless overridden)."""
        email = next((e for e, s in self.users.items() if s == sub), None)
        overrides.setdefault("email", email)
        return self.issuer.token(sub, **overrides)

    def sign_in(self, email: str, **overrides: Any) -> str:
        sub = self.users.get(email.strip().lower())
        if sub is None or sub in self.disabled:
            raise SignInRefused(f"{email} cannot sign in")
        self.signed_in.add(sub)
        return self.token_for(sub, **overrides)

    def email_of(self, sub: str) -> str:
        return next(e for e, s in self.users.items() if s == sub)

    def _held(self, idp_user_id: str) -> None:
        if idp_user_id not in self.users.values():
            raise NotFound(f"the identity provider holds no user {idp_user_id!r}")
