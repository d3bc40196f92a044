"""The local stack's Secrets Manager journal (chalicelib/local/secrets_journal.py): what moto's
Secrets Manager holds when the stack stops or dies comes back when its AWS server starts again on
the same data directory, and what was deleted stays deleted.

In-process, a restart is moto's Secrets Manager backend emptied (as a new server process starts)
and the journal opened again on the same file; the last test restarts the real AWS server
process, killed with SIGKILL, on the same file. The calls are those of the browser agents'
secrets adapter (chalicelib/adapters/secrets.py) and of an operator's CLI."""
from __future__ import annotations

import os
import signal
import stat
import sys
from pathlib import Path

import boto3
import pytest
from moto import mock_aws
from moto.secretsmanager.models import SecretsManagerBackend, secretsmanager_backends

from chalicelib.local import processes
from chalicelib.local.aws_server import S3RVER_PACKAGE
from chalicelib.local.secrets_journal import CHANGES, SecretsJournal, journaled_secrets

ACCOUNT, REGION = "123456789012", "us-east-1"
NAME = "recon-local/acme/agents/portal-bot/credentials"


class Stack:
    """moto's Secrets Manager with the journal, restartable."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.client = boto3.client("secretsmanager", region_name=REGION)

    def start(self) -> Stack:
        self.journal = SecretsJournal(self.path)
        self._journaled = journaled_secrets(self.journal)
        self._journaled.__enter__()
        return self

    def crash(self) -> None:
        """The process dies: moto's memory is gone, the journal's file stays as it was."""
        secretsmanager_backends[ACCOUNT][REGION].reset()
        self._journaled.__exit__(None, None, None)
        self.journal.close()

    def restart(self) -> Stack:
        self.crash()
        return self.start()

    def value(self, name: str) -> str | None:
        try:
            return self.client.get_secret_value(SecretId=name)["SecretString"]
        except self.client.exceptions.ResourceNotFoundException:
            return None


@pytest.fixture
def stack(tmp_path):
    with mock_aws():
        running = Stack(tmp_path / "secrets.sqlite3").start()
        yield running
        running.crash()


def test_a_secret_put_comes_back_after_a_restart_as_it_was(stack):
    created = stack.client.create_secret(Name=NAME, SecretString='{"username": "ops", "password": "first"}',
                                         Description="portal login")
    stack.client.put_secret_value(SecretId=NAME, SecretString='{"username": "ops", "password": "second"}')
    described = stack.client.describe_secret(SecretId=NAME)

    stack.restart()

    assert stack.value(NAME) == '{"username": "ops", "password": "second"}'
    assert stack.client.get_secret_value(SecretId=NAME, VersionStage="AWSPREVIOUS")["SecretString"] == \
        '{"username": "ops", "password": "first"}'
    again = stack.client.describe_secret(SecretId=NAME)
    assert again["ARN"] == created["ARN"] and again["Description"] == "portal login"
    assert (again["CreatedDate"], again["VersionIdsToStages"]) == (described["CreatedDate"],
                                                                  described["VersionIdsToStages"])
    assert stack.value(created["ARN"]) is not None  # found by its ARN too


def test_a_secret_deleted_without_recovery_stays_deleted_and_one_marked_deleted_stays_marked(stack):
    stack.client.create_secret(Name=NAME, SecretString="gone")
    stack.client.create_secret(Name="recon-local/acme/agents/other/credentials", SecretString="marked")
    stack.client.delete_secret(SecretId=NAME, ForceDeleteWithoutRecovery=True)
    stack.client.delete_secret(SecretId="recon-local/acme/agents/other/credentials", RecoveryWindowInDays=7)

    stack.restart()

    assert stack.value(NAME) is None
    with pytest.raises(stack.client.exceptions.ResourceNotFoundException):
        stack.client.describe_secret(SecretId=NAME)
    marked = stack.client.describe_secret(SecretId="recon-local/acme/agents/other/credentials")
    assert "DeletedDate" in marked and marked["DeletedDate"] is not None
    stack.client.restore_secret(SecretId="recon-local/acme/agents/other/credentials")
    stack.restart()
    assert stack.value("recon-local/acme/agents/other/credentials") == "marked"


def test_the_browser_agents_secrets_adapter_finds_its_secrets_after_a_restart(stack):
    from chalicelib.adapters.secrets import SecretsManagerBrowserSecrets
    from chalicelib.domain.agents.browser import Credentials

    secrets = SecretsManagerBrowserSecrets(stack.client, "recon-local")
    secrets.put_credentials("acme", "portal-bot", Credentials("ops", "s3cret"))
    assert secrets.put_context("acme", "portal-bot", "saved", {"cookies": [{"name": "sid", "value": "x"}]})
    secrets.put_credentials("acme", "gone-bot", Credentials("old", "old"))
    secrets.delete_agent("acme", "gone-bot")

    stack.restart()

    assert secrets.credentials("acme", "portal-bot") == Credentials("ops", "s3cret")
    assert secrets.context("acme", "portal-bot", "saved") == {"cookies": [{"name": "sid", "value": "x"}]}
    assert secrets.credentials("acme", "gone-bot") is None


def test_only_the_versions_that_carry_a_label_are_journaled(stack):
    """A saved browser context is put again at every run: the journal keeps its current and previous
    values, as AWS keeps the versions it can still name, rather than every value ever put."""
    stack.client.create_secret(Name=NAME, SecretString="v0")
    for n in range(1, 20):
        stack.client.put_secret_value(SecretId=NAME, SecretString=f"v{n}")

    stack.restart()

    [secret] = stack.journal.secrets()
    assert sorted(version["secret_string"] for version in secret.versions.values()) == ["v18", "v19"]
    assert stack.value(NAME) == "v19"


def test_the_journal_is_readable_by_its_owner_only(tmp_path):
    loose = tmp_path / "secrets.sqlite3"
    loose.touch(mode=0o644)
    os.chmod(loose, 0o644)
    for path in (tmp_path / "new.sqlite3", loose):
        SecretsJournal(path).close()
        assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_the_hooks_are_undone_on_leaving(tmp_path):
    before = {name: getattr(SecretsManagerBackend, name) for name in CHANGES}
    with journaled_secrets(SecretsJournal(tmp_path / "secrets.sqlite3")):
        assert all(getattr(SecretsManagerBackend, name) is not before[name] for name in CHANGES)
    assert {name: getattr(SecretsManagerBackend, name) for name in CHANGES} == before


@pytest.mark.skipif(not S3RVER_PACKAGE.exists(), reason="s3rver is not installed (npm ci)")
def test_the_local_aws_server_keeps_secrets_across_a_kill_and_a_restart_on_the_same_data_dir(tmp_path):
    def start_server():
        port = processes.free_port()
        log = tmp_path / "aws_server.log"
        server = processes.start(
            [sys.executable, "-m", "chalicelib.local.aws_server", "--port", str(port),
             "--journal", str(tmp_path / "sqs.sqlite3"), "--secrets", str(tmp_path / "secrets.sqlite3"),
             "--s3-port", str(processes.free_port()), "--s3-directory", str(tmp_path / "s3"), "--s3-log",
             str(tmp_path / "s3rver.log")], log, cwd=Path(__file__).resolve().parents[2])
        processes.wait_for_port(port, server, "AWS server", log)
        client = boto3.client("secretsmanager", endpoint_url=f"http://{processes.LOOPBACK}:{port}",
                              region_name=REGION, aws_access_key_id="local", aws_secret_access_key="local")
        return server, client

    server, client = start_server()
    try:
        client.create_secret(Name=NAME, SecretString="kept")
        client.create_secret(Name=f"{NAME}-old", SecretString="dropped")
        client.delete_secret(SecretId=f"{NAME}-old", ForceDeleteWithoutRecovery=True)
    finally:
        os.kill(server.pid, signal.SIGKILL)  # no chance to write anything after its answers
        server.wait(10)

    server, client = start_server()
    try:
        assert client.get_secret_value(SecretId=NAME)["SecretString"] == "kept"
        with pytest.raises(client.exceptions.ResourceNotFoundException):
            client.get_secret_value(SecretId=f"{NAME}-old")
    finally:
        processes.stop([server])
