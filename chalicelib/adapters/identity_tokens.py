"""Verifies a person's token from the identity provider (a Cognito user pool): its RS256 signature
against the keys the provider publishes (JWKS), then its issuer, its audience (our app client),
its use and its expiry. We never mint a token: a token we did not get from the provider fails."""
from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from joserfc import jws, jwt
from joserfc.errors import JoseError
from joserfc.jwk import KeySet

from chalicelib.domain.clock import utc_now
from chalicelib.domain.errors import Unauthorized
from chalicelib.domain.users import VerifiedToken

ALGORITHMS = ["RS256"]  # what Cognito signs with; "none" and HMAC are refused
CLOCK_SKEW = timedelta(seconds=30)
TOKEN_USES = ("id", "access")
# A token signed by a key we do not hold yet refetches the key set (the provider rotated its
# keys), at most this often, so that garbage tokens cannot make every request fetch.
REFETCH_AT_MOST_EVERY = timedelta(minutes=1)


class TokenVerifier:
    """`fetch_key_set` returns the provider's JWKS document (`{"keys": [...]}`); it is fetched at
    the first token and kept, and fetched again when a token names a key id it lacks."""

    def __init__(self, issuer: str, client_id: str, fetch_key_set: Callable[[], Mapping[str, Any]],
                 clock: Callable[[], datetime] = utc_now) -> None:
        self.issuer = issuer
        self.client_id = client_id
        self._fetch_key_set = fetch_key_set
        self._clock = clock
        self._keys: KeySet | None = None
        self._fetched_at: datetime | None = None
        self._lock = threading.Lock()

    def verify(self, token: str) -> VerifiedToken:
        keys = self._keys_for(key_id_of(token))
        try:
            claims = jwt.decode(token, keys, algorithms=ALGORITHMS).claims
        except (JoseError, ValueError, TypeError) as error:
            raise Unauthorized(f"invalid token: {reason_of(error)}") from None
        return self._checked(claims)

    def _keys_for(self, key_id: str) -> KeySet:
        with self._lock:
            now = self._clock()
            stale = self._fetched_at is None or now - self._fetched_at >= REFETCH_AT_MOST_EVERY
            if self._keys is None or (stale and not holds_key(self._keys, key_id)):
                self._keys = KeySet.import_key_set(dict(self._fetch_key_set()))  # type: ignore[arg-type]
                self._fetched_at = now
            if not holds_key(self._keys, key_id):
                raise Unauthorized("invalid token: it is not signed by a key of this service's identity provider")
            return self._keys

    def _checked(self, claims: Mapping[str, Any]) -> VerifiedToken:
        if claims.get("iss") != self.issuer:
            raise Unauthorized("invalid token: it was issued by another identity provider")
        token_use = claims.get("token_use")
        if token_use not in TOKEN_USES:
            raise Unauthorized("invalid token: send an id or access token of the identity provider")
        audience = claims.get("aud") if token_use == "id" else claims.get("client_id")
        if audience != self.client_id:
            raise Unauthorized("invalid token: it was issued for another application")
        subject, expires = claims.get("sub"), claims.get("exp")
        if not isinstance(subject, str) or not subject or not isinstance(expires, int):
            raise Unauthorized("invalid token: it lacks its subject or expiry")
        expires_at = datetime.fromtimestamp(expires, UTC)
        if expires_at + CLOCK_SKEW <= self._clock():
            raise Unauthorized("expired token: sign in again")
        return VerifiedToken(subject=subject, token_use=token_use, expires_at=expires_at,
                             email=verified_email(claims))


def verified_email(claims: Mapping[str, Any]) -> str | None:
    """The token's email only when the pool marks it verified: a federated person's email is
    whatever their own provider asserts, and must not pass for an address we checked. (Cognito
    writes `email_verified` as a boolean; a provider's attribute mapped onto it may be a string.)"""
    email, verified = claims.get("email"), claims.get("email_verified")
    if isinstance(email, str) and (verified is True or verified == "true"):
        return email
    return None


def key_id_of(token: str) -> str:
    """The `kid` of a token's header, read before its signature is checked (only to pick the key)."""
    try:
        header = jws.extract_compact(token.encode("ascii")).headers()
    except (JoseError, ValueError, TypeError, UnicodeError):
        raise Unauthorized("invalid token: it is not a signed JSON web token") from None
    key_id = header.get("kid")
    if not isinstance(key_id, str):
        raise Unauthorized("invalid token: its header names no key")
    return key_id


def holds_key(keys: KeySet, key_id: str) -> bool:
    return any(key.kid == key_id for key in keys.keys)


def reason_of(error: Exception) -> str:
    if isinstance(error, JoseError) and "signature" in str(error).lower():
        return "its signature does not verify"
    return "it cannot be read as a signed token of the identity provider"
