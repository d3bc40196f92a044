"""The operator's command line records its changes in the environment's audit trail, as the
operator's (`operator:cli`): keys created and revoked, browser agents created and their logins set.
The CLI's own entry point is run against moto."""
from __future__ import annotations

import io
import json
import sys

import pytest

from chalicelib.cli import main
from chalicelib.domain.audit import AuditQuery
from chalicelib.services import audit

SETTINGS = {
    "login": {"username_selector": "#u", "password_selector": "#p", "submit_selector": "#go"},
    "export": {"steps": [], "download_selector": "#csv"},
    "data_stream_key": "bank",
}


@pytest.fixture
def cli(services, monkeypatch, tmp_path, capsys):
    """Run the command line against the moto the services use (no local stack serves tmp_path)."""
    monkeypatch.setenv("RECON_DATA_DIR", str(tmp_path))

    def run(*argv: str, stdin: str | None = None) -> str:
        if stdin is not None:
            monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
        assert main(list(argv)) == 0, capsys.readouterr().err
        return capsys.readouterr().out
    return run


def trail(services, environment: str) -> list:
    return audit.list_page(services.ports, environment, AuditQuery(), 50, None)[0]


def test_keys_created_and_revoked_on_the_command_line_are_recorded_as_the_operators(services, cli):
    # When an operator creates a key and revokes it
    printed = cli("keys", "create", "--environment", "acme", "--label", "ops")
    key_id, secret = printed.split()[2], printed.strip().splitlines()[-1]
    cli("keys", "revoke", key_id)

    # Then the environment's trail holds both, by the operator, and never the key itself
    revoked, created = trail(services, "acme")
    assert [(e.actor, e.action, e.resource_type, e.resource_id) for e in (created, revoked)] == [
        ("operator:cli", "api_key.created", "api_key", key_id),
        ("operator:cli", "api_key.revoked", "api_key", key_id)]
    assert created.summary["label"] == "ops"
    assert secret not in str([created.summary, revoked.summary])
    assert audit.verify(services.ports, "acme").intact


def test_a_browser_agent_and_its_login_set_on_the_command_line_are_recorded_never_the_password(
        services, api, cli, tmp_path):
    assert api.post("/v1/data_streams", {"key": "bank", "name": "Bank"}).status_code == 201
    settings = tmp_path / "portal.json"
    settings.write_text(json.dumps(SETTINGS))

    agent_id = cli("agents", "create-browser", "--environment", "acme", "--name", "Bank portal", "--automation",
                   "portal_export", "--portal-url", "https://portal.bank.test/", "--settings", str(settings)).strip()
    cli("agents", "set-credentials", agent_id, stdin="ops-user\nS3cret-pa55word\n")

    login, made = [e for e in trail(services, "acme") if e.resource_type == "agent"]
    assert [(e.actor, e.action, e.resource_id) for e in (made, login)] == [
        ("operator:cli", "agent.created", agent_id), ("operator:cli", "agent.credentials_set", agent_id)]
    assert "S3cret-pa55word" not in str(login.summary) and "ops-user" not in str(login.summary)
