"""The identity provider: the fake (tests/fakes/identity.py), and CognitoIdentity on the user pool
and app client that infra/template.yaml defines, made on a moto server: its JWKS is fetched over
HTTP as on AWS, and its tokens come from a real sign-in (invitation, temporary password, new
password). A person invited once is one user, invited again until they sign in; a disabled one
cannot sign in nor be invited again; a token of another pool is refused."""
from __future__ import annotations

import uuid

import pytest

from chalicelib.adapters.aws import AwsClients
from chalicelib.adapters.identity import CognitoIdentity, SignInRefused, password_sign_in
from chalicelib.domain.errors import BadRequest, Conflict, NotFound, Unauthorized
from chalicelib.local.provision import load_template, provision
from chalicelib.settings import Settings
from tests.conftest import REGION
from tests.fakes.identity import FakeIdentityProvider
from tests.support.tokens import TokenIssuer

# What the invitation's mail carries, and what the person chooses (the template's policy: 12+, mixed case, digits).
TEMPORARY_PASSWORD = "Temporary-Pass-1"
CHOSEN_PASSWORD = "Chosen-Password-2"


def identity_template(stage: str) -> dict:
    """infra/template.yaml's user pool and app client alone, with their outputs."""
    template = load_template()
    template["Resources"] = {k: v for k, v in template["Resources"].items()
                             if v["Type"] in ("AWS::Cognito::UserPool", "AWS::Cognito::UserPoolClient")}
    template["Outputs"] = {k: template["Outputs"][k] for k in ("UserPoolId", "UserPoolClientId")}
    return template


class FakeIdentityBackend:
    def __init__(self) -> None:
        self.identity = FakeIdentityProvider()

    def invitations_to(self, email: str) -> int:
        return self.identity.invitations.count(email)

    def sign_in(self, email: str) -> dict[str, str]:
        token = self.identity.sign_in(email)
        sub = self.identity.verify(token).subject
        return {"IdToken": token, "AccessToken": self.identity.token_for(sub, token_use="access")}

    def other_pools_token(self) -> str:
        other = FakeIdentityProvider(TokenIssuer(issuer="https://cognito-idp.us-east-1.amazonaws.com/us-east-1_Other",
                                                 client_id=self.identity.issuer.client_id))
        return other.token_for(other.invite("ana@example.com", None))


class CognitoBackend:
    """A fresh pool per test on the shared moto server: provision reuses a pool by its name, so each
    test names its own stage. The pool's mails are the AdminCreateUser calls the adapter makes
    (moto sends none), seen on the client's wire."""

    def __init__(self, endpoint: str) -> None:
        self.clients = AwsClients(Settings(region=REGION, local_mode=True, aws_endpoint=endpoint))
        self.cognito = self.clients.client("cognito-idp")
        self.mails: list[dict] = []  # each AdminCreateUser the pool accepted (a refused one sends nothing)
        asked: list[dict] = []
        events = self.cognito.meta.events
        events.register("provide-client-params.cognito-idp.AdminCreateUser",
                        lambda params, **_: asked.append(dict(params)))
        events.register("after-call.cognito-idp.AdminCreateUser",
                        lambda http_response, **_: self.mails.append(asked.pop()) if http_response.status_code == 200
                        else asked.pop())
        stage = f"c-{uuid.uuid4().hex[:12]}"
        outputs = provision(self.clients, {"Stage": stage}, REGION, template=identity_template(stage),
                            log=lambda _: None)
        self.pool_id, self.client_id = outputs["UserPoolId"], outputs["UserPoolClientId"]
        self.identity = CognitoIdentity.for_pool(self.cognito, REGION, self.pool_id, self.client_id,
                                                 aws_endpoint=endpoint)
        self.endpoint = endpoint

    def invitations_to(self, email: str) -> int:
        return sum(1 for mail in self.mails if mail["Username"] == email and mail.get("MessageAction") != "SUPPRESS")

    def sign_in(self, email: str) -> dict[str, str]:
        # The pool mailed a temporary password; moto mails nothing, so the test sets the one it "sent".
        self.cognito.admin_set_user_password(UserPoolId=self.pool_id, Username=email, Password=TEMPORARY_PASSWORD,
                                             Permanent=False)
        return password_sign_in(self.cognito, self.pool_id, self.client_id, email, TEMPORARY_PASSWORD,
                                new_password=CHOSEN_PASSWORD)

    def other_pools_token(self) -> str:
        # moto signs every pool's tokens with one key: only the issuer tells them apart, as on AWS the keys do too.
        other = CognitoBackend(self.endpoint)
        other.identity.invite("ana@example.com", None)
        return other.sign_in("ana@example.com")["IdToken"]


@pytest.fixture(scope="module")
def moto_server():
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture(params=["fake", pytest.param("moto", marks=pytest.mark.moto)])
def provider(request):
    if request.param == "fake":
        return FakeIdentityBackend()
    return CognitoBackend(request.getfixturevalue("moto_server"))


class TestIdentityProvider:
    def test_an_invited_person_signs_in_and_their_tokens_verify_to_their_id(self, provider):
        sub = provider.identity.invite("Ana@Example.com", "Ana")
        tokens = provider.sign_in("ana@example.com")
        by_id = provider.identity.verify(tokens["IdToken"])
        by_access = provider.identity.verify(tokens["AccessToken"])
        assert (by_id.subject, by_id.token_use, by_id.email) == (sub, "id", "ana@example.com")
        assert (by_access.subject, by_access.token_use) == (sub, "access")

    def test_inviting_again_is_the_same_person(self, provider):
        first = provider.identity.invite("ana@example.com", "Ana")
        assert provider.identity.invite("ANA@example.com ", None) == first
        assert provider.identity.invite("bo@example.com", None) != first

    def test_inviting_again_resends_the_invitation_until_they_sign_in(self, provider):
        sub = provider.identity.invite("ana@example.com", "Ana")
        assert provider.identity.invite("ana@example.com", "Ana") == sub
        assert provider.invitations_to("ana@example.com") == 2
        assert provider.identity.verify(provider.sign_in("ana@example.com")["IdToken"]).subject == sub
        assert provider.identity.invite("ana@example.com", "Ana") == sub
        assert provider.invitations_to("ana@example.com") == 2  # they chose their password: nothing to resend

    def test_finding_a_person_sends_nothing_and_changes_nothing(self, provider):
        assert provider.identity.find("ana@example.com") is None
        sub = provider.identity.invite("ana@example.com", "Ana")
        assert provider.identity.find(" ANA@example.com") == sub
        provider.identity.disable(sub)
        assert provider.identity.find("ana@example.com") == sub  # held disabled: found all the same
        assert provider.invitations_to("ana@example.com") == 1
        with pytest.raises(SignInRefused):
            provider.sign_in("ana@example.com")

    def test_a_person_held_disabled_is_not_invited_again(self, provider):
        sub = provider.identity.invite("ana@example.com", None)
        provider.identity.disable(sub)
        with pytest.raises(Conflict, match="ana@example.com disabled"):
            provider.identity.invite("ana@example.com", None)
        provider.identity.enable(sub)
        assert provider.identity.invite("ana@example.com", None) == sub

    def test_a_disabled_person_cannot_sign_in_until_enabled(self, provider):
        sub = provider.identity.invite("ana@example.com", None)
        provider.identity.disable(sub)
        provider.identity.disable(sub)  # a retried disable
        with pytest.raises(SignInRefused):
            provider.sign_in("ana@example.com")
        provider.identity.enable(sub)
        provider.identity.enable(sub)
        assert provider.identity.verify(provider.sign_in("ana@example.com")["IdToken"]).subject == sub

    def test_a_token_of_another_pool_is_refused(self, provider):
        with pytest.raises(Unauthorized, match="invalid token"):  # its issuer, or its key
            provider.identity.verify(provider.other_pools_token())

    def test_a_token_not_of_a_provider_is_refused(self, provider):
        with pytest.raises(Unauthorized, match="not a signed JSON web token"):
            provider.identity.verify("not-a-token")

    def test_an_unknown_person_cannot_be_disabled_and_a_bad_email_is_refused(self, provider):
        with pytest.raises(NotFound):
            provider.identity.disable("00000000-0000-0000-0000-000000000000")
        with pytest.raises(BadRequest, match="not-an-email"):
            provider.identity.invite("not-an-email", None)
