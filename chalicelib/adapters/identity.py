"""The identity provider: the stage's Cognito user pool (infra/template.yaml `UserPool`), on AWS
and on the local stack's embedded AWS alike. It invites people (Cognito mails them a temporary
password), disables and enables them, and signs their tokens, which we verify against the keys the
pool publishes. We hold no password and mint no token."""
from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import urllib3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from chalicelib.adapters.identity_tokens import TokenVerifier
from chalicelib.domain.errors import BadRequest, Conflict, Forbidden, NotFound, ServiceUnavailable, Unauthorized
from chalicelib.domain.users import VerifiedToken
from chalicelib.observability import logger

KEY_SET_TIMEOUT = urllib3.Timeout(connect=2.0, read=3.0)  # within the API's 29 s, with room for retries
# The same words for an unknown email and a wrong password: the answer must not tell which emails exist.
WRONG_CREDENTIALS = "the email or password is not right"
# A person waits on the sign-in, refresh and sign-out calls: an answer or a clear 503 within seconds,
# not the shared client's eight adaptive retries. Merged over that client's config (adapters/aws.py).
SESSION_CALLS = Config(connect_timeout=3, read_timeout=3, retries={"total_max_attempts": 2, "mode": "standard"})
# The pool is throttling us or is down: the person's password or session is not in question.
PROVIDER_TROUBLE = ("TooManyRequestsException", "LimitExceededException", "InternalErrorException")
REFUSALS = ("NotAuthorizedException", "UserNotFoundException", "PasswordResetRequiredException",
            "UserNotConfirmedException")


def pool_issuer(region: str, pool_id: str) -> str:
    """The `iss` of the pool's tokens, on AWS and on the embedded AWS (moto signs the same one)."""
    return f"https://cognito-idp.{region}.amazonaws.com/{pool_id}"


def key_set_url(region: str, pool_id: str, aws_endpoint: str | None = None) -> str:
    """Where the pool publishes its signing keys: `<issuer>/.well-known/jwks.json` on AWS; the
    embedded AWS serves them at its own endpoint under the pool's id."""
    base = f"{aws_endpoint.rstrip('/')}/{pool_id}" if aws_endpoint else pool_issuer(region, pool_id)
    return f"{base}/.well-known/jwks.json"


class SignInRefused(Exception):
    """The pool would not sign this person in: unknown, disabled, or a wrong password."""


def password_sign_in(cognito: Any, pool_id: str, client_id: str, email: str, password: str,
                     new_password: str | None = None) -> dict[str, Any]:
    """Signs in with an email and password by the admin flow (IAM rights to the pool: an operator's
    CLI, the local stack), choosing `new_password` when the password is an invitation's temporary
    one. The pool's AuthenticationResult: IdToken, AccessToken, RefreshToken, ExpiresIn."""
    try:
        answer = cognito.admin_initiate_auth(UserPoolId=pool_id, ClientId=client_id,
                                             AuthFlow="ADMIN_USER_PASSWORD_AUTH",
                                             AuthParameters={"USERNAME": email, "PASSWORD": password})
        if answer.get("ChallengeName") == "NEW_PASSWORD_REQUIRED":
            if new_password is None:
                raise SignInRefused(f"{email} must choose a new password: the one given is an invitation's")
            answer = cognito.admin_respond_to_auth_challenge(
                UserPoolId=pool_id, ClientId=client_id, ChallengeName="NEW_PASSWORD_REQUIRED",
                Session=answer["Session"], ChallengeResponses={"USERNAME": email, "NEW_PASSWORD": new_password})
    except ClientError as error:
        if error.response["Error"]["Code"] in ("NotAuthorizedException", "UserNotFoundException",
                                               "PasswordResetRequiredException", "UserNotConfirmedException"):
            raise SignInRefused(f"{email} cannot sign in: {error.response['Error'].get('Message', '')}") from None
        raise
    if "AuthenticationResult" not in answer:
        raise SignInRefused(f"{email} cannot sign in here: the pool asks for {answer.get('ChallengeName')}")
    return dict(answer["AuthenticationResult"])


class SignInStepMissing(Forbidden):
    """The password was right, and the pool asks for a step (an authenticator's code) the web app
    does not offer yet (403, docs/web-app.md)."""


class IdentityProviderUnreachable(ServiceUnavailable):
    """The provider's keys could not be fetched (503): its `detail` (the URL and what failed) is for
    our logs; the client is told only to try again."""

    def __init__(self, detail: str) -> None:
        super().__init__("the identity provider cannot be reached; try again")
        self.detail = detail


class KeySetFetcher:
    """GETs the pool's JWKS document with urllib3 (botocore's own HTTP client: `requests` is not in
    the Lambda package). TLS certificates are checked on AWS's https endpoint."""

    def __init__(self, url: str, http: urllib3.PoolManager | None = None) -> None:
        self.url = url
        self._http = http or urllib3.PoolManager(retries=urllib3.Retry(total=2, backoff_factor=0.2),
                                                 timeout=KEY_SET_TIMEOUT)

    def __call__(self) -> Mapping[str, Any]:
        try:
            response = self._http.request("GET", self.url)
        except urllib3.exceptions.HTTPError as error:  # refused, timed out, TLS: after the retries
            raise self._unreachable(f"could not be fetched: {type(error).__name__}") from None
        if response.status != 200:
            raise self._unreachable(f"answered HTTP {response.status}")
        try:
            document = json.loads(response.data)
        except ValueError:
            document = None
        if not isinstance(document, dict) or not isinstance(document.get("keys"), list):
            raise self._unreachable("are not a JWKS document")
        return document

    def _unreachable(self, why: str) -> IdentityProviderUnreachable:
        detail = f"the identity provider's keys ({self.url}) {why}"
        logger.warning("identity provider unreachable", extra={"detail": detail})
        return IdentityProviderUnreachable(detail)


def provider_trouble(error: Exception) -> IdentityProviderUnreachable | None:
    """The 503 for a call the pool did not answer (throttled, failing, out of reach or too slow);
    None for an answer about the request itself."""
    if isinstance(error, ClientError):
        code = error.response["Error"]["Code"]
        if code not in PROVIDER_TROUBLE:
            return None
        detail = f"the identity provider answered {code}"
    elif isinstance(error, BotoCoreError):  # EndpointConnectionError, ConnectTimeoutError, ReadTimeoutError
        detail = f"the identity provider could not be reached: {type(error).__name__}"
    else:
        return None
    logger.warning("identity provider unreachable", extra={"detail": detail})
    return IdentityProviderUnreachable(detail)


class CognitoIdentity:
    def __init__(self, cognito: Any, pool_id: str, client_id: str, verifier: TokenVerifier,
                 session_client: Any = None) -> None:
        self._cognito = cognito
        # The sign-in, refresh and sign-out calls' client: short timeouts, two attempts (SESSION_CALLS).
        self._session_client = session_client or cognito
        self.pool_id = pool_id
        self.client_id = client_id
        self._verifier = verifier

    @classmethod
    def for_pool(cls, cognito: Any, region: str, pool_id: str, client_id: str,
                 aws_endpoint: str | None = None, session_client: Any = None) -> CognitoIdentity:
        fetch = KeySetFetcher(key_set_url(region, pool_id, aws_endpoint))
        return cls(cognito, pool_id, client_id, TokenVerifier(pool_issuer(region, pool_id), client_id, fetch),
                   session_client)

    def sign_in(self, email: str, password: str, new_password: str | None = None) -> dict[str, Any]:
        """A person's own sign-in (the web app's, through POST /v1/session) by the public client's
        USER_PASSWORD_AUTH flow, which needs no IAM right: we forward, the pool checks the password and
        signs the tokens. An invitee's temporary password asks for `new_password` (409 without one).
        The pool's AuthenticationResult: IdToken, AccessToken, RefreshToken, ExpiresIn."""
        try:
            answer = self._session_client.initiate_auth(ClientId=self.client_id, AuthFlow="USER_PASSWORD_AUTH",
                                                 AuthParameters={"USERNAME": email, "PASSWORD": password})
            if answer.get("ChallengeName") == "NEW_PASSWORD_REQUIRED":
                if not new_password:
                    raise Conflict("a new password is needed: the one given is an invitation's temporary password")
                answer = self._session_client.respond_to_auth_challenge(
                    ClientId=self.client_id, ChallengeName="NEW_PASSWORD_REQUIRED", Session=answer["Session"],
                    ChallengeResponses={"USERNAME": email, "NEW_PASSWORD": new_password})
        except ClientError as error:
            code = error.response["Error"]["Code"]
            if code in REFUSALS:
                raise Unauthorized(WRONG_CREDENTIALS) from None
            if code == "InvalidPasswordException":
                raise BadRequest("the new password does not meet the password policy: at least 12 characters, "
                                 "with upper and lower case letters and a digit") from None
            raise provider_trouble(error) or error from None
        except BotoCoreError as error:
            raise provider_trouble(error) or error from None
        if "AuthenticationResult" not in answer:
            # The pool asks for a further step (SOFTWARE_TOKEN_MFA, MFA_SETUP, …) only once the password
            # checked out, so saying so tells nothing to someone who does not know it: 403, not a 401
            # that would send the person to retype a right password.
            raise SignInStepMissing(f"this sign-in needs a step the web app does not offer yet "
                                    f"({answer.get('ChallengeName')}): sign in with the operator's CLI, "
                                    f"or ask an admin")
        return dict(answer["AuthenticationResult"])

    def refresh(self, refresh_token: str) -> dict[str, Any]:
        """Fresh id and access tokens for a refresh token (REFRESH_TOKEN_AUTH); 401 once it is revoked,
        expired or its user disabled."""
        try:
            answer = self._session_client.initiate_auth(ClientId=self.client_id, AuthFlow="REFRESH_TOKEN_AUTH",
                                                        AuthParameters={"REFRESH_TOKEN": refresh_token})
        except ClientError as error:
            if error.response["Error"]["Code"] in REFUSALS:
                raise Unauthorized("the session has ended: sign in again") from None
            raise provider_trouble(error) or error from None
        except BotoCoreError as error:
            raise provider_trouble(error) or error from None
        return dict(answer["AuthenticationResult"])

    def sign_out(self, access_token: str) -> None:
        """Every refresh token of the person revoked (GlobalSignOut, authorized by their access token);
        one already signed out or expired has nothing left to revoke. Any other failure is a 503: the
        pool could not be told, and the person must hear so."""
        try:
            self._session_client.global_sign_out(AccessToken=access_token)
        except ClientError as error:
            if error.response["Error"]["Code"] != "NotAuthorizedException":
                trouble = provider_trouble(error)
                raise trouble or IdentityProviderUnreachable(
                    f"the identity provider refused GlobalSignOut: {error.response['Error']['Code']}") from None
        except BotoCoreError as error:
            raise provider_trouble(error) or error from None

    def invite(self, email: str, name: str | None) -> str:
        email = email.strip().lower()
        attributes = [{"Name": "email", "Value": email}, {"Name": "email_verified", "Value": "true"}]
        if name:
            attributes.append({"Name": "name", "Value": name})
        try:
            response = self._cognito.admin_create_user(UserPoolId=self.pool_id, Username=email,
                                                       UserAttributes=attributes, DesiredDeliveryMediums=["EMAIL"])
        except ClientError as error:
            code = error.response["Error"]["Code"]
            if code == "UsernameExistsException":
                return self._invited_again(email)
            if code == "InvalidParameterException":
                raise BadRequest(f"the identity provider refused the email {email!r}: "
                                 f"{error.response['Error'].get('Message', 'invalid')}") from None
            raise
        return self._sub_of(response["User"]["Attributes"], email)

    def find(self, email: str) -> str | None:
        try:
            held = self._cognito.admin_get_user(UserPoolId=self.pool_id, Username=email.strip().lower())
        except ClientError as error:
            if error.response["Error"]["Code"] == "UserNotFoundException":
                return None
            raise
        return self._sub_of(held["UserAttributes"], email)

    def _invited_again(self, email: str) -> str:
        """A retried invite, or an invite of someone the pool already holds: the same user. Their
        invitation is sent again while they have not signed in yet (the first may be lost or its
        temporary password expired); a user the pool holds disabled is refused, not quietly linked."""
        held = self._cognito.admin_get_user(UserPoolId=self.pool_id, Username=email)
        if not held.get("Enabled", True):
            raise Conflict(f"the identity provider holds {email} disabled: enable that user instead of inviting them")
        if held.get("UserStatus") == "FORCE_CHANGE_PASSWORD":
            self._cognito.admin_create_user(UserPoolId=self.pool_id, Username=email, MessageAction="RESEND",
                                            DesiredDeliveryMediums=["EMAIL"])
        return self._sub_of(held["UserAttributes"], email)

    def disable(self, idp_user_id: str) -> None:
        username = self._username_of(idp_user_id)
        # Signed out first: Cognito refuses admin calls on a disabled user, so a retried disable finds
        # them disabled already and has nothing left to sign out. Their refresh tokens stop working at
        # once; tokens already issued expire within the hour.
        try:
            self._cognito.admin_user_global_sign_out(UserPoolId=self.pool_id, Username=username)
        except ClientError as error:
            if error.response["Error"]["Code"] != "NotAuthorizedException":  # disabled already
                raise
        self._cognito.admin_disable_user(UserPoolId=self.pool_id, Username=username)

    def enable(self, idp_user_id: str) -> None:
        self._cognito.admin_enable_user(UserPoolId=self.pool_id, Username=self._username_of(idp_user_id))

    def verify(self, token: str) -> VerifiedToken:
        return self._verifier.verify(token)

    def _username_of(self, idp_user_id: str) -> str:
        """The pool's username of the user whose `sub` this is: a person invited by email has their
        sub for username, a federated one `<provider>_<their id there>`; a filter finds both."""
        if '"' in idp_user_id or "\\" in idp_user_id:
            raise NotFound(f"the identity provider holds no user {idp_user_id!r}")
        users = self._cognito.list_users(UserPoolId=self.pool_id, Filter=f'sub = "{idp_user_id}"', Limit=1)["Users"]
        if not users:
            raise NotFound(f"the identity provider holds no user {idp_user_id!r}")
        return str(users[0]["Username"])

    @staticmethod
    def _sub_of(attributes: list[dict[str, str]], email: str) -> str:
        sub = next((a["Value"] for a in attributes if a["Name"] == "sub"), None)
        if not sub:
            raise RuntimeError(f"the identity provider gave no sub for {email}")
        return sub
