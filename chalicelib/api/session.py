"""The web app's sign-in (docs/web-app.md): a thin door to the stage's user pool. We forward the email
and password to the pool (USER_PASSWORD_AUTH), which checks them and signs the tokens; we mint none.
The id and access tokens go to the page, which keeps them in memory; the refresh token goes in an
HttpOnly cookie that only these routes read, so a script on the page can never take it.

CSRF: the routes that read the cookie (refresh, sign-out) answer only a request whose Origin is our
own and whose Content-Type is JSON: a cross-site page cannot send that without a preflight we never
allow, and a browser always sends Origin on a POST or DELETE. A request without Origin is refused
there too: a program that is not a browser has no cookie jar to protect and signs in again instead.
Sign-in reads no cookie; an Origin it is sent must still be ours (no signing a victim in as someone
else from another site)."""
from __future__ import annotations

from datetime import timedelta
from http.cookies import CookieError, SimpleCookie
from urllib.parse import urlsplit

from chalice.app import Response

from chalicelib.api.errors import UnsupportedMediaType
from chalicelib.api.meta import served_from
from chalicelib.api.routing import API_PREFIX, JSON_CONTENT_TYPE, ApiRequest, Router
from chalicelib.api.schemas.session import SessionOut, SessionUserOut, SignInIn
from chalicelib.container import container
from chalicelib.domain.clock import utc_now
from chalicelib.domain.errors import Forbidden, ServiceUnavailable, Unauthorized
from chalicelib.observability import logger
from chalicelib.services.users import principal_of_token

router = Router("session")

REFRESH_COOKIE = "recon_refresh"
REFRESH_COOKIE_DAYS = 30  # the app client's RefreshTokenValidity (infra/template.yaml)
RETRY_AFTER_SECONDS = 5  # when the pool is throttling us or down (503)
NOT_SIGNED_OUT = ("this browser is signed out, but the identity provider could not be told: "
                  "sessions elsewhere stay signed in until they expire; sign out again later")


@router.route("POST", "/session", summary="Sign in with an email and password (the web app's form)",
              body=SignInIn, response=SessionOut, public=True, errors=(400, 401, 403, 409, 415, 422, 503))
# 403 also when the password was right but the pool asks for a step the page does not offer (an
# authenticator's code): adapters/identity.py SignInStepMissing.
def sign_in(request: ApiRequest) -> Response:
    check_origin(request.headers, required=False)
    body: SignInIn = request.body
    try:
        result = container().cognito.sign_in(body.email.strip().lower(), body.password.get_secret_value(),
                                             body.new_password.get_secret_value() if body.new_password else None)
    except ServiceUnavailable as error:
        return unavailable(error.message)
    return session_response(result, refresh_token=result.get("RefreshToken"))


@router.route("POST", "/session/refresh", summary="Fresh tokens for the session cookie's refresh token",
              response=SessionOut, public=True, errors=(401, 403, 415, 503))
def refresh(request: ApiRequest) -> Response:
    """401 only when the session has truly ended; 503 (the pool throttling or down) keeps the cookie, so
    the page tries again instead of signing the person out."""
    check_cookie_request(request.headers)
    token = refresh_token_of(request.headers)
    if token is None:
        raise Unauthorized("no session: sign in")
    try:
        result = container().cognito.refresh(token)
    except ServiceUnavailable as error:
        return unavailable(error.message)
    return session_response(result, refresh_token=None)


@router.route("DELETE", "/session", summary="Sign out everywhere (the access token as Bearer) and clear the cookie",
              status=204, public=True, errors=(403, 415, 503))
def sign_out(request: ApiRequest) -> Response:
    """The cookie is cleared whatever the pool answers: this browser is signed out at least. 503 says
    the pool could not be told (its refresh tokens elsewhere still work). RevokeToken of the cookie's
    refresh token is not called: moto 5.2.5, our tests' and the local stack's Cognito, lacks it."""
    check_cookie_request(request.headers)
    authorization = request.headers.get("authorization") or ""
    cleared: dict[str, str | list[str]] = {"Set-Cookie": refresh_cookie("", max_age=0), "Cache-Control": "no-store"}
    try:
        if authorization.lower().startswith("bearer ") and authorization[7:].strip():
            container().cognito.sign_out(authorization[7:].strip())
    except ServiceUnavailable:
        return unavailable(NOT_SIGNED_OUT, cleared)
    except Exception:  # a bug of ours: logged, and the browser is signed out all the same
        logger.exception("sign-out failed")
        return unavailable(NOT_SIGNED_OUT, cleared)
    return Response(body="", status_code=204, headers=cleared)


def unavailable(message: str, headers: dict[str, str | list[str]] | None = None) -> Response:
    return Response(body={"message": message}, status_code=503,
                    headers={"Cache-Control": "no-store", "Retry-After": str(RETRY_AFTER_SECONDS), **(headers or {})})


def own_origin() -> str:
    parts = urlsplit(served_from(router.current_request))
    return f"{parts.scheme}://{parts.netloc}"


def check_origin(headers: dict[str, str], *, required: bool) -> None:
    origin = headers.get("origin")
    if origin is None and not required:
        return
    if origin != own_origin():
        raise Forbidden(f"this route answers only the web app's own pages (origin {own_origin()}); "
                        f"the request came from {(origin or 'no origin')[:100]}")


def check_cookie_request(headers: dict[str, str]) -> None:
    check_origin(headers, required=True)
    content_type = headers.get("content-type", "")
    if not JSON_CONTENT_TYPE.match(content_type):
        raise UnsupportedMediaType(f"Content-Type must be application/json, got '{content_type[:60] or 'none'}'")


def refresh_token_of(headers: dict[str, str]) -> str | None:
    cookies: SimpleCookie = SimpleCookie()
    try:
        cookies.load(headers.get("cookie", ""))
    except CookieError:
        return None
    morsel = cookies.get(REFRESH_COOKIE)
    return morsel.value if morsel is not None and morsel.value else None


def refresh_cookie(value: str, *, max_age: int) -> str:
    """Sent back only to the session routes (API Gateway's stage is part of the path), never readable by
    a script, never over plain http: Chromium and Firefox keep a Secure cookie of http://127.0.0.1 and
    localhost too (loopback counts as secure), so the local stack needs no exception."""
    path = urlsplit(served_from(router.current_request)).path.rstrip("/") + API_PREFIX + "/session"
    return f"{REFRESH_COOKIE}={value}; Max-Age={max_age}; Path={path}; HttpOnly; Secure; SameSite=Strict"


def session_response(result: dict, *, refresh_token: str | None) -> Response:
    """The tokens and who they sign in; the refresh token only in the cookie. A person the pool knows
    but who is no (active) user of ours is 401, as on every other route."""
    services = container()
    id_token = result["IdToken"]
    principal = principal_of_token(services.ports, id_token, services.sign_in_resolution)
    user = principal.user
    if user is None:  # a token always names a user
        raise Unauthorized("this person is not a user of any environment")
    expires_in = int(result.get("ExpiresIn", 3600))
    answer = SessionOut(id_token=id_token, access_token=result["AccessToken"], expires_in=expires_in,
                        expires_at=utc_now() + timedelta(seconds=expires_in),
                        user=SessionUserOut(id=user.id, email=user.email, name=user.name, role=user.role.value,
                                            environment=user.environment))
    headers: dict[str, str | list[str]] = {"Cache-Control": "no-store"}
    if refresh_token:
        headers["Set-Cookie"] = refresh_cookie(refresh_token, max_age=REFRESH_COOKIE_DAYS * 86400)
    return Response(body=answer.model_dump(mode="json"), status_code=200, headers=headers)
