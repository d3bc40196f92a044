"""The verifier of people's tokens, against tokens signed the way Cognito signs them."""
from __future__ import annotations

import base64
import json
from datetime import timedelta

import pytest

from chalicelib.adapters.identity_tokens import REFETCH_AT_MOST_EVERY, TokenVerifier
from chalicelib.domain.clock import utc_now
from chalicelib.domain.errors import Unauthorized
from tests.support.tokens import TokenIssuer

ISSUER = TokenIssuer()


def verifier(issuer: TokenIssuer = ISSUER, fetch=None, clock=utc_now) -> TokenVerifier:
    return TokenVerifier(issuer.issuer, issuer.client_id, fetch or issuer.key_set, clock)


@pytest.mark.parametrize("token_use", ["id", "access"])
def test_a_token_of_the_provider_gives_its_subject(token_use):
    verified = verifier().verify(ISSUER.token("sub-1", token_use=token_use, email="ana@example.com"))
    assert (verified.subject, verified.token_use, verified.email) == ("sub-1", token_use, "ana@example.com")


def b64(data: dict) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()


def tampered(token: str) -> str:
    header, payload, signature = token.split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    claims["sub"] = "someone-else"
    return ".".join([header, b64(claims), signature])


@pytest.mark.parametrize(("token", "reason"), [
    (ISSUER.token("s", expires_in=-120), "expired token"),
    (ISSUER.token("s", iss="https://cognito-idp.us-east-1.amazonaws.com/us-east-1_Other"), "another identity provider"),
    (ISSUER.token("s", aud="another-client"), "another application"),
    (ISSUER.token("s", token_use="access", client_id="another-client"), "another application"),
    (ISSUER.token("s", token_use="refresh"), "id or access token"),
    (tampered(ISSUER.token("s")), "signature does not verify"),
    (TokenIssuer().token("s"), "not signed by a key of this service"),
    (TokenIssuer(key_id=ISSUER.key_id).token("s"), "signature does not verify"),
    (b64({"alg": "none", "kid": ISSUER.key_id}) + "." + b64({"sub": "s"}) + ".", "invalid token"),
    ("not-a-token", "not a signed JSON web token"),
], ids=lambda value: "" if value.count(".") == 2 else value)  # a token in an id differs between xdist workers
def test_a_token_that_is_not_the_providers_is_refused_with_its_reason(token, reason):
    with pytest.raises(Unauthorized, match=reason):
        verifier().verify(token)


def test_rotated_keys_are_fetched_again_but_not_for_every_unknown_key():
    fetches = []
    old, new = TokenIssuer(), TokenIssuer()
    new.issuer, new.client_id = old.issuer, old.client_id
    published = [old]
    now = [utc_now()]

    def fetch():
        fetches.append(now[0])
        return {"keys": [key for issuer in published for key in issuer.key_set()["keys"]]}

    subject = verifier(old, fetch, lambda: now[0])
    subject.verify(old.token("s"))
    published.append(new)  # the provider rotates its keys
    with pytest.raises(Unauthorized):  # within the minute: no fetch for an unknown key
        subject.verify(new.token("s"))
    assert len(fetches) == 1
    now[0] += REFETCH_AT_MOST_EVERY + timedelta(seconds=1)
    assert subject.verify(new.token("s")).subject == "s"
    assert subject.verify(old.token("s")).subject == "s"
    assert len(fetches) == 2
