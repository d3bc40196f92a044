"""A token issuer shaped like a Cognito user pool (RS256, its `iss`, `aud` or `client_id`,
`token_use`), holding its own RSA key: the tests sign tokens the way the provider does and let our
verifier do all the checking. Its key set is what the provider publishes at
`<issuer>/.well-known/jwks.json`."""
from __future__ import annotations

import socket
import time
import uuid
from typing import Any

from joserfc import jwt
from joserfc.jwk import KeySet, RSAKey


class TokenIssuer:
    def __init__(self, issuer: str = "https://cognito-idp.us-east-1.amazonaws.com/us-east-1_TestPool",
                 client_id: str = "test-app-client", key_id: str | None = None) -> None:
        self.issuer = issuer
        self.client_id = client_id
        self.key = RSAKey.generate_key(2048, parameters={"kid": key_id or uuid.uuid4().hex, "use": "sig",
                                                         "alg": "RS256"})

    @property
    def key_id(self) -> str:
        return str(self.key.kid)

    def key_set(self) -> dict[str, Any]:
        """The public keys only, as the provider serves them."""
        return dict(KeySet([self.key]).as_dict(private=False))

    def token(self, subject: str, token_use: str = "id", expires_in: int = 3600, email: str | None = None,
              **overrides: Any) -> str:
        now = int(time.time())
        claims: dict[str, Any] = {"iss": self.issuer, "sub": subject, "token_use": token_use, "iat": now,
                                  "auth_time": now, "exp": now + expires_in, "jti": uuid.uuid4().hex}
        claims["aud" if token_use == "id" else "client_id"] = self.client_id
        if email is not None:  # as the pool writes an invited person's email (we invite it verified)
            claims["email"], claims["email_verified"] = email, True
        claims.update(overrides)
        return jwt.encode({"alg": "RS256", "kid": self.key_id}, claims, self.key)


def unreachable_url() -> str:
    """A local address where nothing listens: a fetch from it is refused at once."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{probe.getsockname()[1]}"
