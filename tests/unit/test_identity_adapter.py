"""CognitoIdentity's calls where moto is more lenient than Cognito, scripted at the wire with
botocore's Stubber: Cognito refuses AdminUserGlobalSignOut on a user already disabled, so a retried
disable must still end with the user disabled."""
from __future__ import annotations

import boto3
import pytest
from botocore.stub import Stubber

from chalicelib.adapters.identity import CognitoIdentity

POOL, SUB = "eu-west-1_Pool", "5f0c2b1e-0000-4000-8000-000000000001"


@pytest.fixture
def cognito():
    client = boto3.client("cognito-idp", region_name="eu-west-1", aws_access_key_id="x", aws_secret_access_key="x")
    with Stubber(client) as stubber:
        yield client, stubber
        stubber.assert_no_pending_responses()


def expect_user_lookup(stubber: Stubber) -> None:
    stubber.add_response("list_users", {"Users": [{"Username": SUB}]},
                         {"UserPoolId": POOL, "Filter": f'sub = "{SUB}"', "Limit": 1})


def test_disable_signs_out_before_disabling(cognito):
    client, stubber = cognito
    expect_user_lookup(stubber)
    stubber.add_response("admin_user_global_sign_out", {}, {"UserPoolId": POOL, "Username": SUB})
    stubber.add_response("admin_disable_user", {}, {"UserPoolId": POOL, "Username": SUB})
    CognitoIdentity(client, POOL, "client", verifier=None).disable(SUB)  # type: ignore[arg-type]


def test_a_retried_disable_disables_though_the_pool_refuses_to_sign_out_a_disabled_user(cognito):
    client, stubber = cognito
    expect_user_lookup(stubber)
    stubber.add_client_error("admin_user_global_sign_out", "NotAuthorizedException", "User is disabled.")
    stubber.add_response("admin_disable_user", {}, {"UserPoolId": POOL, "Username": SUB})
    CognitoIdentity(client, POOL, "client", verifier=None).disable(SUB)  # type: ignore[arg-type]


def test_other_sign_out_failures_are_not_swallowed(cognito):
    client, stubber = cognito
    expect_user_lookup(stubber)
    stubber.add_client_error("admin_user_global_sign_out", "TooManyRequestsException", "slow down")
    with pytest.raises(client.exceptions.TooManyRequestsException):
        CognitoIdentity(client, POOL, "client", verifier=None).disable(SUB)  # type: ignore[arg-type]
