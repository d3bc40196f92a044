"""Where the pool's keys are fetched from, and what a fetch that does not give a key set says."""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from chalicelib.adapters.identity import IdentityProviderUnreachable, KeySetFetcher, key_set_url, pool_issuer
from tests.support.tokens import unreachable_url


def test_on_aws_the_keys_are_the_issuers_and_locally_the_endpoints():
    assert pool_issuer("eu-west-1", "eu-west-1_Abc") == "https://cognito-idp.eu-west-1.amazonaws.com/eu-west-1_Abc"
    assert key_set_url("eu-west-1", "eu-west-1_Abc") == \
        "https://cognito-idp.eu-west-1.amazonaws.com/eu-west-1_Abc/.well-known/jwks.json"
    assert key_set_url("eu-west-1", "eu-west-1_Abc", "http://127.0.0.1:4566/") == \
        "http://127.0.0.1:4566/eu-west-1_Abc/.well-known/jwks.json"


ANSWERS = {"/keys": (200, {"keys": [{"kty": "RSA", "kid": "k1", "n": "AQAB", "e": "AQAB"}]}),
           "/down": (503, {"message": "unavailable"}), "/other": (200, {"issuer": "x"})}


@pytest.fixture(scope="module")
def server():
    class Answer(BaseHTTPRequestHandler):
        def do_GET(self):
            status, body = ANSWERS[self.path]
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Answer)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


def test_the_key_set_is_fetched_whole(server):
    assert KeySetFetcher(f"{server}/keys")()["keys"][0]["kid"] == "k1"


@pytest.mark.parametrize(("path", "said"), [("/down", "answered HTTP 503"), ("/other", "not a JWKS document"),
                                             (None, "could not be fetched: MaxRetryError")])
def test_a_fetch_that_gives_no_key_set_is_unreachable_and_our_logs_say_why(server, path, said):
    url = f"{server}{path}" if path else f"{unreachable_url()}/keys"
    with pytest.raises(IdentityProviderUnreachable) as raised:
        KeySetFetcher(url)()
    assert raised.value.message == "the identity provider cannot be reached; try again"
    assert said in raised.value.detail and url in raised.value.detail

