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
    monkeypatch.setattr(changed_blocks, "WRITES_END_WITHIN", timedelta(milliseconds=300))  # (16 minutes on a stage)

    # When an operator runs the command
    assert main(["streams", "note-changes", "--environment", "acme"]) == 0, capsys.readouterr().err

    # Then it reported its wait and what it noted, and the stream's changed block is trusted
    printed = capsys.readouterr().out
    assert "data stream(s) marked" in printed
    assert "noted the changes of 2 data stream(s) (1 block(s) changed)" in printed
    assert services.ports.data_streams.changed_since_import("acme", "bank") == {change_block(kept)}
    assert services.ports.data_streams.changed_since_import("acme", "ledger") == frozenset()


def test_the_command_is_refused_while_functions_may_change_records_without_noting(old_streams, monkeypatch,
                                                                                  tmp_path, capsys):
    monkeypatch.setenv("RECON_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("RECON_NOTE_CHANGED_BLOCKS", "false")

    assert main(["streams", "note-changes"]) == 1

    assert "RECON_NOTE_CHANGED_BLOCKS is off" in capsys.readouterr().err
    assert "changes_noting" not in old_streams.table.get(keys.data_stream("acme", "bank"))  # no stream marked
