"""People: an admin invites them (the provider sends the invitation), changes their role and
deactivates them; a person's token is verified against the provider's keys, audience and expiry,
and names an active user, whose actions the audit trail names `user:<id>`. API keys in Settings.
One world for the module: each test makes the people it needs."""
from __future__ import annotations

import base64
import json
import uuid

import pytest
from botocore.exceptions import ClientError

from chalicelib.adapters.identity import KeySetFetcher
from chalicelib.adapters.identity_tokens import TokenVerifier
from chalicelib.domain.users import Role, UserStatus
from tests.fakes.identity import FakeIdentityProvider
from tests.support.people import add_user
from tests.support.tokens import TokenIssuer, unreachable_url


@pytest.fixture(scope="module")
def identity(module_services) -> FakeIdentityProvider:
    """The provider of the tests' container (tests/conftest.py): a fake pool our verifier checks."""
    return module_services.identity


@pytest.fixture
def person(module_services, identity):
    """A new active user of `environment` with `role`, and their token."""
    def person(role: Role = Role.ADMIN, environment: str = "acme", status: UserStatus = UserStatus.ACTIVE):
        user = add_user(module_services.users, environment, f"sub-{uuid.uuid4().hex[:12]}", role, status=status)
        return user, identity.token_for(user.idp_user_id)
    return person


def bearer(token: str) -> dict:
    return {"key": None, "headers": {"Authorization": f"Bearer {token}"}}


# Tokens ---------------------------------------------------------------------------------

def test_a_users_token_lets_them_in_and_the_first_request_makes_them_active(module_api, module_services, person):
    user, token = person(Role.VIEWER, status=UserStatus.INVITED)
    response = module_api.get(f"/v1/users/{user.id}", **bearer(token))
    assert response.status_code == 200, response.json_body
    stored = module_services.users.get("acme", user.id)
    assert stored.status is UserStatus.ACTIVE and stored.last_sign_in_at is not None


@pytest.mark.parametrize("spoil", ["expired", "another_pool", "another_audience", "tampered", "unsigned"])
def test_a_token_the_provider_did_not_issue_to_us_now_is_401(module_api, identity, person, spoil):
    user, _ = person()
    token = {
        "expired": lambda: identity.token_for(user.idp_user_id, expires_in=-120),
        "another_pool": lambda: TokenIssuer(issuer="https://cognito-idp.us-east-1.amazonaws.com/other").token(
            user.idp_user_id),
        "another_audience": lambda: identity.token_for(user.idp_user_id, aud="another-client"),
        "tampered": lambda: tampered(identity.token_for("sub-someone-else"), user.idp_user_id),
        "unsigned": lambda: unsigned(user.idp_user_id),
    }[spoil]()
    response = module_api.get("/v1/data_streams", **bearer(token))
    assert response.status_code == 401, response.json_body
    assert set(response.json_body) == {"message"} and token not in response.json_body["message"]


def tampered(token: str, subject: str) -> str:
    """The token with its payload's subject changed, the signature kept."""
    header, payload, signature = token.split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    claims["sub"] = subject
    forged = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    return f"{header}.{forged}.{signature}"


def unsigned(subject: str) -> str:
    def part(value: dict) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()
    return f"{part({'alg': 'none'})}.{part({'sub': subject, 'token_use': 'id'})}."


def test_an_unreachable_identity_provider_is_503_saying_only_to_try_again(module_api, identity, person,
                                                                         monkeypatch):
    _, token = person()
    fetcher = KeySetFetcher(f"{unreachable_url()}/.well-known/jwks.json")
    monkeypatch.setattr(identity, "verifier", TokenVerifier(identity.issuer.issuer, identity.issuer.client_id, fetcher))
    response = module_api.get("/v1/data_streams", **bearer(token))
    assert response.status_code == 503
    assert response.json_body == {"message": "the identity provider cannot be reached; try again"}


def test_a_throttled_lookup_of_whom_a_token_names_is_503(module_api, module_services, person, monkeypatch):
    _, token = person()

    def throttled(subject):
        raise ClientError({"Error": {"Code": "ProvisionedThroughputExceededException", "Message": "slow down"}},
                          "GetItem")
    monkeypatch.setattr(module_services.users, "find_by_subject", throttled)
    response = module_api.get("/v1/data_streams", **bearer(token))
    assert (response.status_code, response.json_body) == (503, {"message": "the service is busy; try again"})


def test_a_deactivated_users_token_is_401_and_a_stranger_s_too(module_api, identity, person):
    user, token = person(status=UserStatus.DEACTIVATED)
    response = module_api.get("/v1/data_streams", **bearer(token))
    assert response.status_code == 401 and "deactivated" in response.json_body["message"]
    stranger = module_api.get("/v1/data_streams", **bearer(identity.token_for("sub-of-no-user")))
    assert stranger.status_code == 401 and "not a user" in stranger.json_body["message"]


def test_a_token_of_another_environment_reaches_only_its_own(module_api, person):
    """A person is a user of one environment: their token names it, and acme's data is not theirs."""
    assert module_api.post("/v1/data_streams", {"key": "acme-only", "name": "Acme"}).status_code == 201
    _, token = person(Role.ADMIN, environment="globex")
    assert module_api.get("/v1/data_streams/acme-only", **bearer(token)).status_code == 404
    listed = module_api.get("/v1/data_streams", **bearer(token)).json_body
    assert "acme-only" not in [s["key"] for s in listed["data"]]


# Users -----------------------------------------------------------------------------------

def test_an_admin_invites_changes_a_role_and_deactivates(module_api, module_services, identity, person):
    admin, token = person(Role.ADMIN)
    invited = module_api.post("/v1/users", {"email": " Grace@Example.com", "name": "Grace", "role": "preparer"},
                              **bearer(token))
    assert invited.status_code == 201, invited.json_body
    grace = invited.json_body
    assert (grace["email"], grace["role"], grace["status"], grace["last_sign_in_at"]) == (
        "grace@example.com", "preparer", "invited", None)
    assert identity.invitations[-1] == "grace@example.com" and grace["idp_user_id"] == identity.users[
        "grace@example.com"]
    again = module_api.post("/v1/users", {"email": "grace@example.com", "role": "viewer"}, **bearer(token))
    assert again.status_code == 409 and f"user {grace['id']}" in again.json_body["message"]

    assert module_api.get(f"/v1/users/{grace['id']}", **bearer(token)).json_body == grace
    listed = module_api.get("/v1/users?limit=200", **bearer(token)).json_body
    assert grace in listed["data"] and listed["data"][0]["id"] >= grace["id"]

    grace_token = identity.sign_in("grace@example.com")
    assert module_api.get("/v1/data_streams", **bearer(grace_token)).status_code == 200
    promoted = module_api.patch(f"/v1/users/{grace['id']}", {"role": "approver"}, **bearer(token))
    assert promoted.status_code == 200 and promoted.json_body["role"] == "approver"
    assert promoted.json_body["status"] == "active" and promoted.json_body["name"] == "Grace"

    gone = module_api.delete(f"/v1/users/{grace['id']}", **bearer(token))
    assert gone.status_code == 200 and gone.json_body["status"] == "deactivated"
    assert grace["idp_user_id"] in identity.disabled
    assert module_api.get("/v1/data_streams", **bearer(grace_token)).status_code == 401

    back = module_api.patch(f"/v1/users/{grace['id']}", {"status": "active"}, **bearer(token))
    assert back.status_code == 200 and back.json_body["status"] == "active"
    assert grace["idp_user_id"] not in identity.disabled
    assert module_api.get("/v1/data_streams", **bearer(grace_token)).status_code == 200

    # The audit trail names the person who acted.
    trail = module_api.get(f"/v1/audit_events?actor=user:{admin.id}", **bearer(token)).json_body["data"]
    assert [(e["action"], e["resource_id"]) for e in trail][::-1] == [
        ("user.invited", str(grace["id"])), ("user.updated", str(grace["id"])),
        ("user.deactivated", str(grace["id"])), ("user.updated", str(grace["id"]))]
    assert "grace@example.com" not in json.dumps(trail)


def test_an_admin_cannot_deactivate_themselves_nor_change_their_own_role(module_api, person):
    admin, token = person(Role.ADMIN)
    assert module_api.delete(f"/v1/users/{admin.id}", **bearer(token)).status_code == 409
    refused = module_api.patch(f"/v1/users/{admin.id}", {"role": "viewer"}, **bearer(token))
    assert refused.status_code == 409 and "another admin" in refused.json_body["message"]
    assert module_api.patch(f"/v1/users/{admin.id}", {"name": "Me"}, **bearer(token)).json_body["name"] == "Me"


def test_a_user_of_another_environment_is_not_found_nor_changed(module_api, module_services, person):
    """An id that is globex's user and no user of acme: acme's admin neither sees nor touches them."""
    _, token = person(Role.ADMIN)
    other, _ = person(Role.ADMIN, environment="globex")
    while module_services.users.get_many("acme", [other.id]):
        other, _ = person(Role.ADMIN, environment="globex")
    assert module_api.get(f"/v1/users/{other.id}", **bearer(token)).status_code == 404
    assert module_api.patch(f"/v1/users/{other.id}", {"role": "viewer"}, **bearer(token)).status_code == 404
    assert module_api.delete(f"/v1/users/{other.id}", **bearer(token)).status_code == 404
    assert module_services.users.get("globex", other.id) == other
    assert other.idp_user_id not in module_services.identity.disabled


def test_an_invitation_needs_an_email_and_a_role(module_api, person):
    _, token = person(Role.ADMIN)
    bad = module_api.post("/v1/users", {"email": "not-an-email", "role": "preparer"}, **bearer(token))
    assert bad.status_code == 422 and bad.json_body["errors"][0]["field"] == "email"
    assert module_api.post("/v1/users", {"email": "a@b.example", "role": "owner"}, **bearer(token)).status_code == 422


# API keys ---------------------------------------------------------------------------------

def test_keys_in_settings_secret_once_read_only_and_revoked(module_api, person):
    _, token = person(Role.ADMIN)
    made = module_api.post("/v1/api_keys", {"label": "reports", "access": "read_only"}, **bearer(token))
    assert made.status_code == 201, made.json_body
    secret, key_id = made.json_body["secret"], made.json_body["id"]
    assert secret.startswith("rk_") and made.json_body["access"] == "read_only"
    listed = module_api.get("/v1/api_keys", **bearer(token)).json_body["data"]
    assert [k for k in listed if k["id"] == key_id] == [{k: v for k, v in made.json_body.items() if k != "secret"}]
    assert secret not in json.dumps(listed)

    assert module_api.get("/v1/data_streams", key=secret).status_code == 200
    refused = module_api.post("/v1/data_streams", {"key": "nope", "name": "No"}, key=secret)
    assert refused.status_code == 403
    assert refused.json_body == {"message": "POST /v1/data_streams needs the admin role or above; yours is viewer"}

    revoked = module_api.delete(f"/v1/api_keys/{key_id}", **bearer(token))
    assert revoked.status_code == 200 and revoked.json_body["revoked_at"]
    assert module_api.get("/v1/data_streams", key=secret).status_code == 401


def test_a_key_cannot_revoke_itself(module_api, person):
    _, token = person(Role.ADMIN)
    made = module_api.post("/v1/api_keys", {"label": "ops"}, **bearer(token)).json_body
    refused = module_api.delete(f"/v1/api_keys/{made['id']}", key=made["secret"])
    assert refused.status_code == 409 and "sent with" in refused.json_body["message"]
    assert module_api.get("/v1/data_streams", key=made["secret"]).status_code == 200


def test_another_environments_key_is_not_found_nor_listed(module_api, module_services, person):
    from chalicelib.services.api_keys import create_key

    other, _ = create_key(module_services.api_keys, "globex")
    _, token = person(Role.ADMIN)
    assert module_api.delete(f"/v1/api_keys/{other.id}", **bearer(token)).status_code == 404
    assert other.id not in [k["id"] for k in module_api.get("/v1/api_keys", **bearer(token)).json_body["data"]]
    assert module_services.api_keys.find_by_hash(other.key_hash).active
