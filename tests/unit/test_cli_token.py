"""`python -m chalicelib.cli token`: what it says when it cannot sign anyone in, on stderr with
no traceback, and that a password starting with "-" passes as `--password=VALUE`."""
from __future__ import annotations

import boto3
import pytest

from chalicelib.cli import main
from tests.conftest import REGION

TEMPORARY = "-Temporary-Pass-1"  # as a generated password may: it starts with "-"


@pytest.fixture
def no_local_stack(tmp_path, monkeypatch):
    for name in ("RECON_USER_POOL_ID", "RECON_USER_POOL_CLIENT_ID"):
        monkeypatch.delenv(name, raising=False)
    return ["--data-dir", str(tmp_path)]


def test_no_pool_configured_is_a_clear_message_and_exit_2(no_local_stack, capsys):
    assert main([*no_local_stack, "token", "--email", "ana@example.com", "--password=x"]) == 2
    error = capsys.readouterr().err
    assert "no identity provider is configured" in error and "--stage" in error and "Traceback" not in error


@pytest.fixture
def pool(moto_aws, no_local_stack, monkeypatch):
    cognito = boto3.client("cognito-idp", region_name=REGION)
    pool_id = cognito.create_user_pool(PoolName="recon-test", UsernameAttributes=["email"], Policies={
        "PasswordPolicy": {"MinimumLength": 12, "RequireSymbols": False}})["UserPool"]["Id"]
    client_id = cognito.create_user_pool_client(UserPoolId=pool_id, ClientName="api",
                                                ExplicitAuthFlows=["ALLOW_ADMIN_USER_PASSWORD_AUTH"]
                                                )["UserPoolClient"]["ClientId"]
    cognito.admin_create_user(UserPoolId=pool_id, Username="ana@example.com", TemporaryPassword=TEMPORARY,
                              MessageAction="SUPPRESS")
    monkeypatch.setenv("RECON_USER_POOL_ID", pool_id)
    monkeypatch.setenv("RECON_USER_POOL_CLIENT_ID", client_id)
    return no_local_stack


def test_a_new_password_the_pool_refuses_is_a_clear_message(pool, capsys):
    code = main([*pool, "token", "--email", "ana@example.com", f"--password={TEMPORARY}", "--new-password=short"])
    error = capsys.readouterr().err
    assert code == 1 and "refused the new password" in error and "short" not in error  # nor the password


def test_a_password_starting_with_a_dash_signs_in(pool, capsys):
    code = main([*pool, "token", "--email", "ana@example.com", f"--password={TEMPORARY}",
                 "--new-password=Chosen-Password-2"])
    assert code == 0 and capsys.readouterr().out.count(".") == 2  # one signed JWT
