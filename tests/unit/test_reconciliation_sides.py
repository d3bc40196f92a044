"""The rules about a reconciliation's sides and about the usage items that hold its streams."""
from datetime import UTC, datetime, timedelta

import pytest

from chalicelib.domain.errors import ValidationFailed
from chalicelib.domain.reconciliations import (
    STALE_USAGE_AGE,
    Reconciliation,
    RunType,
    check_sides,
    usage_holds_stream,
)

NOW = datetime(2026, 11, 1, 12, tzinfo=UTC)


def reconciliation(**fields):
    return Reconciliation(**{"environment": "acme", "id": 1, "name": "R", "run_type": RunType.CONTINUOUS,
                             "side_a_stream_keys": ("bank",), "side_b_stream_keys": ("ledger",),
                             "exception_after_days": 3, "created_at": NOW, "updated_at": NOW, **fields})


def fields_of(error: ValidationFailed) -> list[str]:
    return [e.field for e in error.errors]


def test_sides_that_are_disjoint_and_without_duplicates_pass():
    check_sides(["bank", "psp"], ["ledger"])


def test_every_problem_of_the_sides_is_reported_with_its_path():
    with pytest.raises(ValidationFailed) as error:
        check_sides(["bank", "bank"], ["ledger", "bank"])
    assert fields_of(error.value) == ["side_a_stream_keys[1]", "side_b_stream_keys[1]"]


def test_an_overlap_is_reported_on_the_side_the_client_changed():
    with pytest.raises(ValidationFailed) as error:
        reconciliation().changed(NOW, side_a=["ledger"])
    assert fields_of(error.value) == ["side_a_stream_keys[0]"]


def test_a_change_keeps_what_it_does_not_name_and_bumps_the_version():
    changed = reconciliation(current_run_id=None, last_run_id=4).changed(NOW + timedelta(1), name="New")
    assert (changed.name, changed.side_a_stream_keys, changed.last_run_id, changed.version) == (
        "New", ("bank",), 4, 2)


def test_a_usage_holds_its_stream_while_the_reconciliation_uses_it_however_old():
    assert usage_holds_stream(reconciliation(), "bank", NOW - timedelta(days=30), NOW)


def test_a_usage_without_its_reconciliation_holds_only_until_stale():
    assert usage_holds_stream(None, "bank", NOW - STALE_USAGE_AGE + timedelta(seconds=1), NOW)
    assert not usage_holds_stream(None, "bank", NOW - STALE_USAGE_AGE, NOW)


def test_a_usage_of_a_reconciliation_being_deleted_holds_nothing():
    assert not usage_holds_stream(reconciliation(deleting=True), "bank", NOW, NOW)
