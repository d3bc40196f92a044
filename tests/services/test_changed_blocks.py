"""A stream made before changed blocks were noted gets the blocks its past changed, found once, and
is then read from the analytics mirror but for them, as a stream made since."""
from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from chalicelib.domain.clock import utc_now
from chalicelib.domain.ingestion import IngestionJob, JobSource, JobStatus, OnConflict
from chalicelib.domain.record_changes import CHANGE_BLOCK_IDS, change_block
from chalicelib.services.changed_blocks import WRITES_END_WITHIN, note_past_changes
from chalicelib.services.reconciliation_rules import create_rule
from chalicelib.services.records import delete_record
from tests.services.conftest import ENV, matched_by_a_run, record
from tests.services.test_imported_records import _open_ids


def _made_before_the_blocks(ports, *keys):
    """As the stream items of a release before the blocks, or of a stage that did not note them yet."""
    for key in keys:
        row = ports.data_streams.rows[(ENV, key)]
        row.changes_noted, row.changed_blocks = False, set()


def _table_open_ids(ports, reconciliation_id, stream_key="bank"):
    return sorted(r.id for r in ports.claims.open_records(ENV, stream_key, reconciliation_id, True))


class _Clock:
    """`now` and `wait` for note_past_changes: a wait moves time on."""
    def __init__(self):
        self.at, self.waited = utc_now(), []

    def now(self):
        return self.at

    def wait(self, seconds):
        self.waited.append(seconds)
        self.at += timedelta(seconds=seconds)


def test_the_blocks_a_streams_past_changed_are_found_and_its_runs_read_the_rest_from_the_mirror(
        ports, ingest, reconciliation):
    # Given old streams: an import whose record a run claimed (block 0), one with a record deleted
    # since (block 1), one nothing touched (block 2), and one whose record is deleted while the
    # changes are found, after the table was read (block 3)
    claimed, ledger, kept = ingest(record("bank", 1, 100), record("ledger", 1, 100), record("bank", 2, 150))
    ports.counters.next_ids(ENV, "record", CHANGE_BLOCK_IDS)
    deleted, kept_too = ingest(record("bank", 3, 300), record("bank", 4, 400))
    ports.counters.next_ids(ENV, "record", CHANGE_BLOCK_IDS)
    untouched = ingest(record("bank", 5, 500))
    ports.counters.next_ids(ENV, "record", CHANGE_BLOCK_IDS)
    deleted_later, kept_last = ingest(record("bank", 6, 600), record("bank", 7, 700))
    assert [change_block(i) for i in (claimed, kept, deleted, kept_too, *untouched, deleted_later, kept_last)] \
        == [0, 0, 1, 1, 2, 3, 3]
    _made_before_the_blocks(ports, "bank", "ledger")
    rule = create_rule(ports, ENV, reconciliation.id, {"name": "Same amount",
                                                       "conditions": [{"field": "amount", "operator": "equals"}]})
    matched_by_a_run(ports, reconciliation, rule, [claimed], [ledger])
    delete_record(ports, ENV, deleted)
    assert ports.data_streams.changed_since_import(ENV, "bank") is None  # read from the table whole

    # When their changes are found, a record deleted right after the table was read (its delete notes its block)
    read_table = ports.records.ids_since_import

    def read_then_delete(environment, stream_key):
        found = read_table(environment, stream_key)
        if stream_key == "bank":
            delete_record(ports, ENV, deleted_later)
        return found
    ports.records.ids_since_import = read_then_delete
    clock, lines = _Clock(), []
    outcome = note_past_changes(ports, [ENV], wait=clock.wait, progress=lines.append, now=clock.now)

    # Then the blocks changed before and after are noted, once the calls begun before the mark had ended
    assert timedelta(seconds=sum(clock.waited)) > WRITES_END_WITHIN - timedelta(milliseconds=1)  # (the mark's ms)
    assert ports.data_streams.changed_since_import(ENV, "bank") == {0, 1, 3}
    assert ports.data_streams.changed_since_import(ENV, "ledger") == {0}
    assert sorted(outcome.noted) == [(ENV, "bank"), (ENV, "ledger")] and outcome.waiting == []
    assert "noted the changes of 2 data stream(s)" in outcome.describe() and lines
    # And a run reads the same records as from the table, the untouched block from the mirror
    assert _open_ids(ports, reconciliation_id=reconciliation.id) == _table_open_ids(ports, reconciliation.id) \
        == sorted([kept, kept_too, *untouched, kept_last])
    # And a second pass has nothing to do
    assert note_past_changes(ports, [ENV], wait=clock.wait, progress=lines.append, now=clock.now).noted == []


def test_a_record_written_after_its_import_was_counted_is_found_in_the_table(ports, ingest, reconciliation):
    # Given an old stream, and an import that ended (settled) having counted no record there, whose
    # slow execution wrote one after: the mirror does not hold it
    written = ingest(record("bank", 1, 100), record("bank", 2, 200))
    _made_before_the_blocks(ports, "bank", "ledger")
    first_id = ports.counters.next_ids(ENV, "record", CHANGE_BLOCK_IDS).start
    late_job = IngestionJob(ENV, 900, JobSource.CSV, JobStatus.FAILED, 10, OnConflict.SKIP, utc_now(),
                            data_stream_key="bank")
    ports.ingestion_jobs.add(late_job)
    row = ports.ingestion_jobs.rows[(ENV, late_job.id)]
    row.job = replace(row.job, chunks_begun=0, counts_rolled_up=True, first_record_id=first_id)
    ports.records.put_many([replace(ports.records.get(ENV, written[1]), id=first_id, file_import_id=late_job.id)])
    clock = _Clock()

    note_past_changes(ports, [ENV], wait=clock.wait, progress=lambda _: None, now=clock.now)

    # Then its block is noted, and a run finds it in the table beside the mirror's
    assert ports.data_streams.changed_since_import(ENV, "bank") == {change_block(first_id)}
    assert _open_ids(ports, reconciliation_id=reconciliation.id) == [*written, first_id]


def test_a_stream_whose_import_still_writes_waits_for_a_later_pass(ports, ingest, reconciliation):
    ingest(record("bank", 1, 100))
    _made_before_the_blocks(ports, "bank", "ledger")
    ports.ingestion_jobs.add(IngestionJob(ENV, 900, JobSource.CSV, JobStatus.PROCESSING, 10, OnConflict.SKIP,
                                          utc_now(), data_stream_key="bank"))
    clock = _Clock()

    outcome = note_past_changes(ports, [ENV], wait=clock.wait, progress=lambda _: None, now=clock.now)

    assert outcome.noted == [(ENV, "ledger")] and outcome.waiting == [(ENV, "bank", "an import still writes "
                                                                               "(or ended early, not settled yet)")]
    assert "acme/bank: an import still writes" in outcome.describe()
    assert ports.data_streams.changed_since_import(ENV, "bank") == frozenset()  # still as imported: the mirror's
    assert ports.data_streams.rows[(ENV, "bank")].changes_noting is not None  # its changes noted meanwhile


def test_a_stream_with_records_of_no_listed_import_is_left_to_the_table(ports, ingest, reconciliation):
    # Given an old stream holding a record no import of it lists (a bulk request of a release before
    # requests were linked to their streams), and a claim since
    written = ingest(record("bank", 1, 100), record("bank", 2, 200))
    _made_before_the_blocks(ports, "bank", "ledger")
    stray = replace(ports.records.get(ENV, written[1]), id=written[1] + 5 * CHANGE_BLOCK_IDS, file_import_id=None)
    ports.records.put_many([stray])
    delete_record(ports, ENV, written[0])
    clock = _Clock()

    outcome = note_past_changes(ports, [ENV], wait=clock.wait, progress=lambda _: None, now=clock.now)

    # Then its blocks are not trusted (a run reading the mirror would never read the stray), and why is said
    assert outcome.waiting == [(ENV, "bank", f"1 record(s) of no listed import, such as {stray.id}: left to the "
                                             "table")]
    assert ports.data_streams.changed_since_import(ENV, "bank") is None
    assert outcome.noted == [(ENV, "ledger")]


def test_a_stream_whose_mirror_fails_to_read_is_named_and_the_others_go_on(ports, ingest, reconciliation):
    ingest(record("bank", 1, 100), record("ledger", 1, 100))
    _made_before_the_blocks(ports, "bank", "ledger")
    import_rows = ports.mirror.import_rows

    def failing_for_bank(environment, stream_key, job_id):
        if stream_key == "bank":
            raise OSError("the object is gone")
        return import_rows(environment, stream_key, job_id)
    ports.mirror.import_rows = failing_for_bank
    clock = _Clock()

    outcome = note_past_changes(ports, [ENV], wait=clock.wait, progress=lambda _: None, now=clock.now)

    assert outcome.failed == [(ENV, "bank", "failed (OSError: the object is gone)")] and outcome.waiting == []
    assert outcome.noted == [(ENV, "ledger")]
    assert ports.data_streams.rows[(ENV, "bank")].changes_noting is not None  # still marked: a rerun goes on
    assert not ports.data_streams.rows[(ENV, "bank")].changes_noted
