"""The web app's door and shell, in-process on moto's Cognito (its USER_PASSWORD_AUTH checks the
password): sign-in forwards to the pool and answers tokens with the refresh token in an HttpOnly cookie;
the routes that read that cookie answer only our own origin with a JSON content type; the shell and
its files carry the CSP and their caching. The real browser's side is tests/e2e/test_web_app_local.py."""
from __future__ import annotations

import base64
import gzip
import hashlib
import json
import re
from pathlib import Path
from urllib.parse import urlsplit

import moto.cognitoidp
import pytest
from botocore.awsrequest import AWSResponse
from botocore.exceptions import EndpointConnectionError

from chalicelib.adapters.identity import CognitoIdentity, pool_issuer
from chalicelib.adapters.identity_tokens import TokenVerifier
from chalicelib.domain.users import Role
from tests.support.people import add_user

HOST, ORIGIN = "app.test", "http://app.test"
EMAIL, TEMPORARY, CHOSEN = "ana@acme.example", "Temporary-Passw0rd", "Chosen-Passw0rd-1"
MOTO_KEYS = Path(moto.cognitoidp.__file__).with_name("resources") / "jwks-public.json.gz"


@pytest.fixture
def pool(services):
    """The provisioned pool with its real verifier on the keys moto signs with, and an invitee of ours."""
    settings = services.settings
    cognito = services.aws.client("cognito-idp")
    verifier = TokenVerifier(pool_issuer(settings.region, settings.user_pool_id), settings.user_pool_client_id,
                             lambda: json.loads(gzip.decompress(MOTO_KEYS.read_bytes())))
    services.identity = CognitoIdentity(cognito, settings.user_pool_id, settings.user_pool_client_id, verifier)
    created = cognito.admin_create_user(UserPoolId=settings.user_pool_id, Username=EMAIL, TemporaryPassword=TEMPORARY,
                                        UserAttributes=[{"Name": "email", "Value": EMAIL}],
                                        MessageAction="SUPPRESS")
    sub = next(a["Value"] for a in created["User"]["Attributes"] if a["Name"] == "sub")
    return add_user(services.users, "acme", sub, Role.APPROVER, email=EMAIL)


def send(api, method, path, body=None, *, origin: str | None = ORIGIN, content_type="application/json",
         headers: dict | None = None):
    sent = {"Host": HOST, **({"Origin": origin} if origin else {}),
            **({"Content-Type": content_type} if content_type else {}), **(headers or {})}
    return api.request(method, path, key=None, headers=sent, body=json.dumps(body) if body is not None else None)


def headers_of(response) -> dict[str, str]:
    return {name.lower(): value for name, value in response.headers.items()}


def cookie_of(response) -> str:
    return headers_of(response)["set-cookie"]


def test_an_invitee_chooses_a_password_refreshes_and_signs_out(api, pool):
    first = send(api, "POST", "/v1/session", {"email": EMAIL, "password": TEMPORARY})
    assert first.status_code == 409 and "new password" in first.json_body["message"]

    signed_in = send(api, "POST", "/v1/session", {"email": EMAIL, "password": TEMPORARY, "new_password": CHOSEN})
    assert signed_in.status_code == 200, signed_in.json_body
    body = signed_in.json_body
    assert body["user"] == {"id": pool.id, "email": EMAIL, "name": pool.name, "role": "approver",
                            "environment": "acme"}
    # the refresh token only in the cookie; expires_in as the pool gave it (the page needs no clock of ours)
    assert set(body) == {"id_token", "access_token", "expires_at", "expires_in", "user"}
    assert body["expires_in"] == 3600
    cookie = cookie_of(signed_in)
    assert re.fullmatch(r"recon_refresh=[^;]+; Max-Age=2592000; Path=/v1/session; HttpOnly; Secure; SameSite=Strict",
                        cookie)
    assert headers_of(signed_in)["cache-control"] == "no-store"
    refresh_token = cookie.split(";")[0].split("=", 1)[1]
    assert refresh_token not in json.dumps(body)
    jar = {"Cookie": f"recon_refresh={refresh_token}"}
    # The id token is a Bearer the rest of the API takes.
    read = api.get(f"/v1/users/{pool.id}", key=None, headers={"Authorization": f"Bearer {body['id_token']}"})
    assert read.status_code == 200, read.json_body

    refreshed = send(api, "POST", "/v1/session/refresh", headers=jar)
    assert refreshed.status_code == 200, refreshed.json_body
    assert refreshed.json_body["user"]["id"] == pool.id and "set-cookie" not in headers_of(refreshed)

    signed_out = send(api, "DELETE", "/v1/session", headers={**jar, "Authorization": f"Bearer {body['access_token']}"})
    assert signed_out.status_code == 204
    assert cookie_of(signed_out).startswith("recon_refresh=; Max-Age=0; Path=/v1/session; HttpOnly; Secure")
    after = send(api, "POST", "/v1/session/refresh", headers=jar)  # the pool revoked it
    assert after.status_code == 401 and after.json_body == {"message": "the session has ended: sign in again"}


def test_a_wrong_password_and_an_unknown_email_get_the_same_401(api, pool):
    wrong = send(api, "POST", "/v1/session", {"email": EMAIL, "password": "not-the-password"})
    unknown = send(api, "POST", "/v1/session", {"email": "nobody@acme.example", "password": "not-the-password"})
    assert wrong.status_code == unknown.status_code == 401
    assert wrong.json_body == unknown.json_body == {"message": "the email or password is not right"}
    assert "set-cookie" not in headers_of(wrong)


@pytest.mark.parametrize(("method", "path"), [("POST", "/v1/session/refresh"), ("DELETE", "/v1/session")])
@pytest.mark.parametrize(("origin", "content_type", "status"), [
    (None, "application/json", 403), ("http://evil.test", "application/json", 403),
    ("https://app.test", "application/json", 403), (ORIGIN, "text/plain", 415), (ORIGIN, None, 415)])
def test_the_cookie_routes_answer_only_our_own_origin_with_json(api, services, method, path, origin, content_type,
                                                                status):
    response = send(api, method, path, origin=origin, content_type=content_type,
                    headers={"Cookie": "recon_refresh=anything"})
    assert response.status_code == status, response.json_body
    assert "set-cookie" not in headers_of(response)


def test_a_sign_in_from_another_site_is_refused_before_the_pool_is_asked(api, pool, pool_answers):
    asked = pool_answers("InitiateAuth", 500, "InternalErrorException")  # a 503 if the pool were asked
    response = send(api, "POST", "/v1/session", {"email": EMAIL, "password": TEMPORARY}, origin="http://evil.test")
    assert response.status_code == 403 and "origin" in response.json_body["message"]
    # What a cross-site HTML form can send without a preflight: a real body, form-encoded.
    form = api.request("POST", "/v1/session", key=None, body=f"email={EMAIL}&password={TEMPORARY}",
                       headers={"Host": HOST, "Origin": ORIGIN, "Content-Type": "application/x-www-form-urlencoded"})
    assert form.status_code == 415, form.json_body
    assert asked == []


def test_the_shell_allows_its_own_import_map_and_nothing_inline_else(api):
    page = api.get("/v1/app", key=None)
    assert page.status_code == 200 and headers_of(page)["content-type"].startswith("text/html")
    html = page.body.decode()
    [import_map] = re.findall(r'<script type="importmap">(.*?)</script>', html, flags=re.DOTALL)
    digest = base64.b64encode(hashlib.sha256(import_map.encode()).digest()).decode()
    # Requests go to this origin and to the one of the upload URLs a file import answers (the bucket).
    assert api.post("/v1/data_streams", {"key": "csp-bank", "name": "Bank"}).status_code == 201
    created = api.post("/v1/data_streams/csp-bank/file_imports", {"filename": "a.csv", "format": "csv"})
    upload = urlsplit(created.json_body["upload_url"])
    assert upload.scheme in ("http", "https") and upload.netloc
    assert headers_of(page)["content-security-policy"] == (
        f"default-src 'none'; script-src 'self' 'sha256-{digest}'; style-src 'self'; img-src 'self' data:; "
        f"connect-src 'self' {upload.scheme}://{upload.netloc}; form-action 'self'; base-uri 'self'; "
        "frame-ancestors 'none'")
    assert len(re.findall(r"<script", html)) == 2 and "style=" not in html  # the map and the module, by src
    assert (headers_of(page)["x-content-type-options"], headers_of(page)["referrer-policy"],
            headers_of(page)["cache-control"]) == ("nosniff", "no-referrer", "no-cache")
    for name in json.loads(import_map)["imports"].values():
        served = api.get(f"/v1/{name.removeprefix('./')}", key=None)
        assert served.status_code == 200 and headers_of(served)["content-type"].startswith("text/javascript")
        assert headers_of(served)["cache-control"] == "public, max-age=31536000, immutable"
        assert headers_of(served)["content-security-policy"] == headers_of(page)["content-security-policy"]


@pytest.mark.parametrize(("file", "media_type"), [("app.js", "text/javascript"), ("app.css", "text/css")])
def test_our_own_modules_are_revalidated_at_each_load(api, file, media_type):
    served = api.get(f"/v1/app/{file}", key=None)
    assert served.status_code == 200 and headers_of(served)["content-type"].startswith(media_type)
    assert headers_of(served)["cache-control"] == "no-cache" and headers_of(served)["x-content-type-options"] == "nosniff"


@pytest.mark.parametrize("file", ["index.html", "MANIFEST", "LICENSE-htm", "..%2Fapp.js", "vendor"])
def test_only_the_listed_files_are_served(api, file):
    assert api.get(f"/v1/app/{file}", key=None).status_code == 404


@pytest.fixture
def pool_answers(services):
    """Scripts the pool at the wire for one operation of the session calls' client (shared by the tests
    of this process: unscripted after the test)."""
    events = services.cognito._session_client.meta.events
    scripted: list[tuple[str, object]] = []
    yield lambda operation, status, code="": scripted_answer(events, scripted, operation, status, code)
    for name, handler in scripted:
        events.unregister(name, handler)


def scripted_answer(events, scripted, operation: str, status: int | None, code: str) -> list[str]:
    """An AWS error answer of `status` and `code` (or, status None, no connection at all); botocore
    parses and retries it as it would AWS's. The operations sent are recorded."""
    sent: list[str] = []

    def answer(request, **_):
        sent.append(operation)
        if status is None:
            raise EndpointConnectionError(endpoint_url=request.url)
        body = json.dumps({"__type": code, "message": "scripted"}).encode()
        return AWSResponse(request.url, status, {"x-amzn-errortype": code, "content-type": "application/x-amz-json-1.1"},
                           RawBody(body))

    name = f"before-send.cognito-idp.{operation}"
    events.register(name, answer)
    scripted.append((name, answer))
    return sent


class RawBody:
    def __init__(self, data: bytes) -> None:
        self._data = data

    def stream(self, **_):
        yield self._data


def signed_in_session(api) -> tuple[dict, dict]:
    signed_in = send(api, "POST", "/v1/session", {"email": EMAIL, "password": TEMPORARY, "new_password": CHOSEN})
    assert signed_in.status_code == 200, signed_in.json_body
    refresh_token = cookie_of(signed_in).split(";")[0].split("=", 1)[1]
    return signed_in.json_body, {"Cookie": f"recon_refresh={refresh_token}"}


@pytest.mark.parametrize(("status", "code", "attempts"), [
    (500, "InternalErrorException", 2), (400, "TooManyRequestsException", 2), (None, "", 2),
    (400, "InvalidParameterException", 1)])  # any refusal but NotAuthorized: not retried, still a 503
def test_a_sign_out_the_pool_does_not_take_clears_the_cookie_and_says_so(api, pool, pool_answers, status, code,
                                                                          attempts):
    body, jar = signed_in_session(api)
    sent = pool_answers("GlobalSignOut", status, code)
    signed_out = send(api, "DELETE", "/v1/session", headers={**jar, "Authorization": f"Bearer {body['access_token']}"})
    assert signed_out.status_code == 503 and "could not be told" in signed_out.json_body["message"]
    assert cookie_of(signed_out).startswith("recon_refresh=; Max-Age=0; Path=/v1/session; HttpOnly; Secure")
    assert headers_of(signed_out)["retry-after"] == "5"
    assert sent == ["GlobalSignOut"] * attempts  # two attempts at most, not the shared client's nine


@pytest.mark.parametrize(("status", "code"), [(400, "TooManyRequestsException"), (400, "LimitExceededException"),
                                              (500, "InternalErrorException"), (None, "")])
def test_a_pool_throttling_or_down_is_a_503_that_keeps_the_session(api, pool, pool_answers, status, code):
    _, jar = signed_in_session(api)
    pool_answers("InitiateAuth", status, code)
    refreshed = send(api, "POST", "/v1/session/refresh", headers=jar)
    assert refreshed.status_code == 503, refreshed.json_body
    assert refreshed.json_body == {"message": "the identity provider cannot be reached; try again"}
    assert headers_of(refreshed)["retry-after"] == "5" and "set-cookie" not in headers_of(refreshed)
    again = send(api, "POST", "/v1/session", {"email": EMAIL, "password": CHOSEN})
    assert again.status_code == 503 and again.json_body == refreshed.json_body


def test_a_person_with_an_authenticator_is_told_the_web_app_cannot_sign_them_in_yet(api, services, pool):
    """Only once the password checked out: a wrong one is the same 401 as anyone's."""
    body, _ = signed_in_session(api)
    cognito = services.aws.client("cognito-idp")
    cognito.associate_software_token(AccessToken=body["access_token"])
    cognito.verify_software_token(AccessToken=body["access_token"], UserCode="123456")
    cognito.admin_set_user_mfa_preference(UserPoolId=services.settings.user_pool_id, Username=EMAIL,
                                          SoftwareTokenMfaSettings={"Enabled": True, "PreferredMfa": True})
    right = send(api, "POST", "/v1/session", {"email": EMAIL, "password": CHOSEN})
    assert right.status_code == 403, right.json_body
    assert right.json_body["message"].startswith("this sign-in needs a step the web app does not offer yet "
                                                 "(SOFTWARE_TOKEN_MFA)")
    assert "set-cookie" not in headers_of(right)
    wrong = send(api, "POST", "/v1/session", {"email": EMAIL, "password": "not-the-password"})
    assert wrong.status_code == 401 and wrong.json_body == {"message": "the email or password is not right"}


def test_under_a_stage_the_cookie_is_sent_back_only_to_that_stage_s_session_routes(api, pool, monkeypatch):
    """API Gateway serves the API under its stage (/prod/v1/...): the Lambda event's path carries the
    stage, its resourcePath does not."""
    from chalice.local import LambdaEventConverter

    plain = LambdaEventConverter.create_lambda_event

    def under_prod(self, method, path, headers, body=None):
        event = plain(self, method, path, headers, body)
        event["requestContext"]["path"] = "/prod" + event["requestContext"]["path"]
        return event
    monkeypatch.setattr(LambdaEventConverter, "create_lambda_event", under_prod)

    signed_in = send(api, "POST", "/v1/session", {"email": EMAIL, "password": TEMPORARY, "new_password": CHOSEN})
    assert signed_in.status_code == 200, signed_in.json_body
    assert "; Path=/prod/v1/session; " in cookie_of(signed_in)
    jar = {"Cookie": cookie_of(signed_in).split(";")[0],
           "Authorization": f"Bearer {signed_in.json_body['access_token']}"}
    signed_out = send(api, "DELETE", "/v1/session", headers=jar)
    assert signed_out.status_code == 204
    assert cookie_of(signed_out).startswith("recon_refresh=; Max-Age=0; Path=/prod/v1/session; ")


def test_the_page_with_a_trailing_slash_is_sent_to_the_page_without(api, monkeypatch):
    """The page's URLs (its modules, the API, its "#/…" links) are relative to /v1/app: /v1/app/ is
    redirected there, under API Gateway's stage too."""
    from urllib.parse import urljoin

    from chalice.local import LambdaEventConverter

    moved = api.get("/v1/app/", key=None)
    assert moved.status_code == 308 and urljoin("http://h/v1/app/", headers_of(moved)["location"]) == "http://h/v1/app"
    plain = LambdaEventConverter.create_lambda_event

    def under_prod(self, method, path, headers, body=None):
        event = plain(self, method, path, headers, body)
        event["requestContext"]["path"] = "/prod" + event["requestContext"]["path"]
        return event
    monkeypatch.setattr(LambdaEventConverter, "create_lambda_event", under_prod)
    moved = api.get("/v1/app/", key=None)  # the browser asked for /prod/v1/app/
    assert urljoin("http://h/prod/v1/app/", headers_of(moved)["location"]) == "http://h/prod/v1/app"
    assert api.get("/v1/app", key=None).status_code == 200
