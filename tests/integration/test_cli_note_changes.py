"""`python -m chalicelib.cli streams note-changes`: the blocks a stream made before changed blocks
has changed, found once; refused where functions may still change records without noting them.
The CLI's own entry point is run against moto."""
from __future__ import annotations

from datetime import timedelta

import pytest

from chalicelib.adapters.dynamodb import keys
from chalicelib.cli import main
from chalicelib.domain.record_changes import change_block
from chalicelib.services import changed_blocks
from tests.integration.conftest import record


@pytest.fixture
def old_streams(services, api):
    """Streams bank and ledger as a release before changed blocks made them, a bank record deleted since."""
    for key in ("bank", "ledger"):
        assert api.post("/v1/data_streams", {"key": key, "name": key.title()}).status_code == 201
        services.table.update(keys.data_stream("acme", key), "REMOVE changes_noted")
    return services


def test_the_command_notes_the_blocks_of_every_stream_made_before(old_streams, ingest, api, monkeypatch, tmp_path,
                                                                   capsys):
    # Given an old stream with a record deleted since its import
    services = old_streams
    deleted, kept = ingest(record("bank", 1, 100), record("bank", 2, 200))
    assert api.delete(f"/v1/records/{deleted}").status_code == 204
    assert services.ports.data_streams.changed_since_import("acme", "bank") is None
    monkeypatch.setenv("RECON_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("RECON_NOTE_CHANGED_BLOCKS", "true")  # the operator's word for a table named by RECON_*
    monkeypatch.setattr(changed_blocks, "WRITES_END_WITHIN", timedelta(milliseconds=300))  # (16 minutes on a stage)

    # When an operator runs the command
    assert main(["streams", "note-changes", "--environment", "acme"]) == 0, capsys.readouterr().err

    # Then it reported its wait and what it noted, and the stream's changed block is trusted
    printed = capsys.readouterr().out
    assert "data stream(s) marked" in printed
    assert "noted the changes of 2 data stream(s) (1 block(s) changed)" in printed
    assert services.ports.data_streams.changed_since_import("acme", "bank") == {change_block(kept)}
    assert services.ports.data_streams.changed_since_import("acme", "ledger") == frozenset()


@pytest.mark.parametrize("given, refusal", [
    ("false", "RECON_NOTE_CHANGED_BLOCKS is off"),
    (None, "functions cannot be checked: name the stage with --stage"),  # a table named by RECON_* alone
])
def test_the_command_is_refused_while_functions_may_change_records_without_noting(
        old_streams, monkeypatch, tmp_path, capsys, given, refusal):
    monkeypatch.setenv("RECON_DATA_DIR", str(tmp_path))
    monkeypatch.delenv("RECON_NOTE_CHANGED_BLOCKS", raising=False)
    if given is not None:
        monkeypatch.setenv("RECON_NOTE_CHANGED_BLOCKS", given)

    assert main(["streams", "note-changes"]) == 1

    assert refusal in capsys.readouterr().err
    assert "changes_noting" not in old_streams.table.get(keys.data_stream("acme", "bank"))  # no stream marked


def test_on_a_stage_every_function_must_say_it_notes_changes(moto_aws, monkeypatch, tmp_path, capsys):
    # Given a deployed stage whose API function notes changes and whose bulk worker is of a release before
    import boto3

    from chalicelib.cli import _check_every_function_notes_changes
    from chalicelib.domain.errors import Conflict
    from chalicelib.settings import Settings
    from tests.integration.test_cli_stage import _deployed_stage

    monkeypatch.setenv("RECON_DATA_DIR", str(tmp_path))
    _deployed_stage(TableName="recon-prod-table")
    settings = Settings()
    role = boto3.client("iam", region_name=settings.region).create_role(
        RoleName="r", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
    lam = boto3.client("lambda", region_name=settings.region)
    for name, variables in (("recon-prod", {"RECON_NOTE_CHANGED_BLOCKS": "true"}),
                            ("recon-prod-bulk_worker", {"RECON_NOTE_CHANGED_BLOCKS": "false"}),
                            ("recon-other-bulk_worker", {})):  # another stage's: not looked at
        lam.create_function(FunctionName=name, Runtime="python3.12", Role=role, Handler="app.app",
                            Code={"ZipFile": b"PK\x05\x06" + bytes(18)}, Environment={"Variables": variables})

    # Then the command is refused, naming the function
    assert main(["--stage", "prod", "streams", "note-changes"]) == 1
    assert "recon-prod-bulk_worker" in capsys.readouterr().err
    # And once that function says so too, the check passes (a stage with no function does not)
    lam.update_function_configuration(FunctionName="recon-prod-bulk_worker",
                                      Environment={"Variables": {"RECON_NOTE_CHANGED_BLOCKS": "true"}})
    _check_every_function_notes_changes(settings, "prod", "stage prod")
    with pytest.raises(Conflict, match="none deployed"):
        _check_every_function_notes_changes(settings, "staging", "stage staging")


def test_a_stream_that_fails_is_named_and_the_command_says_so_in_its_exit_status(old_streams, ingest, monkeypatch,
                                                                                 tmp_path, capsys):
    ingest(record("bank", 1, 100), record("ledger", 1, 100))
    monkeypatch.setenv("RECON_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("RECON_NOTE_CHANGED_BLOCKS", "true")
    monkeypatch.setattr(changed_blocks, "WRITES_END_WITHIN", timedelta(milliseconds=100))
    found = changed_blocks.changed_blocks
    monkeypatch.setattr(changed_blocks, "changed_blocks", lambda ports, env, key: (
        found(ports, env, key) if key == "ledger" else (_ for _ in ()).throw(OSError("the object is gone"))))

    assert main(["streams", "note-changes", "--environment", "acme"]) == 1

    printed = capsys.readouterr().out
    assert "1 failed (acme/bank: failed (OSError: the object is gone))" in printed
    assert "noted the changes of 1 data stream(s)" in printed  # the ledger's, after the bank's failure


@pytest.mark.parametrize("recorded, refused", [(None, True), (True, False), (False, False)])
def test_beside_a_local_stack_its_own_record_of_the_setting_decides(tmp_path, monkeypatch, recorded, refused):
    """The command's own RECON_NOTE_CHANGED_BLOCKS says nothing of a running local service: its stack file
    does. One written by a release from before the record (no such field) may not note; any later one does."""
    import json
    import os
    from dataclasses import asdict

    from chalicelib.cli import _check_every_function_notes_changes
    from chalicelib.domain.errors import Conflict
    from chalicelib.local.stack import STACK_FILE, StackInfo
    from chalicelib.settings import Settings

    info = asdict(StackInfo(pid=os.getpid(), dynamodb_endpoint="http://127.0.0.1:1", aws_endpoint="http://127.0.0.1:2",
                            table_name="t", bucket_name="b", bulk_queue_name="q", note_changed_blocks=recorded))
    if recorded is None:
        del info["note_changed_blocks"]  # as such a release wrote it
    info["written_by_a_later_release"] = "a field this one does not know"  # read past, not refused
    (tmp_path / STACK_FILE).write_text(json.dumps(info))
    monkeypatch.setenv("RECON_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("RECON_NOTE_CHANGED_BLOCKS", "true")  # the command's own word: not the service's
    settings = Settings()

    if refused:
        with pytest.raises(Conflict, match="started by a release that may change records without noting"):
            _check_every_function_notes_changes(settings, None, "local stack")
    else:
        _check_every_function_notes_changes(settings, None, "local stack")
