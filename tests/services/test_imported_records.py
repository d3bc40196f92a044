"""When the analytics mirror may stand for the table in a run's load: the stream's records all as
imported, and every import that may have written into it published whole."""
from __future__ import annotations

from dataclasses import replace

import pytest

from chalicelib.domain.clock import utc_now
from chalicelib.domain.ingestion import IngestionJob, JobSource, JobStatus, OnConflict
from chalicelib.domain.record_changes import CHANGE_BLOCK_IDS, change_block
from chalicelib.domain.records import Direction, Record, RecordStatus
from chalicelib.services import imported_records
from chalicelib.services.reconciliation_rules import create_rule
from chalicelib.services.records import delete_record
from tests.services.conftest import ENV, matched_by_a_run, record, streams


def _open_ids(ports, stream_key="bank", reconciliation_id=1, limit=None):
    """The ids `open_pages` gives (None: the mirror does not answer), as an adopted stream's."""
    pages = imported_records.open_pages(ports, ENV, stream_key, reconciliation_id, True, False, limit)
    return None if pages is None else sorted(i for page in pages for i in _ids_of(page))


def _ids_of(page):
    return page["id"].to_list() if hasattr(page["id"], "to_list") else list(page["id"])


def _another_import(ports, status: JobStatus, chunks_begun: int | None, settled: bool = False,
                    first_record_id: int | None = None) -> IngestionJob:
    """An import of the bank stream in `status` that created no record, as its job item would say it."""
    job = IngestionJob(ENV, 900, JobSource.CSV, status, 10, OnConflict.SKIP, utc_now(), data_stream_key="bank")
    ports.ingestion_jobs.add(job)
    row = ports.ingestion_jobs.rows[(ENV, job.id)]
    row.job = replace(row.job, chunks_begun=chunks_begun, counts_rolled_up=settled, first_record_id=first_record_id)
    return row.job


def test_every_completed_import_of_an_untouched_stream_comes_from_the_mirror(ports, ingest, reconciliation):
    first = ingest(record("bank", 1, 100), record("bank", 2, 200))
    second = ingest(record("bank", 3, 300), record("ledger", 1, 100))
    assert _open_ids(ports) == sorted(first + second[:1])
    assert _open_ids(ports, "ledger") == second[1:]


@pytest.mark.parametrize("status, chunks_begun, settled, answers", [
    (JobStatus.PENDING, None, False, True),  # left out of a run either way
    (JobStatus.PROCESSING, 0, False, True),
    (JobStatus.REPLICATING, 0, False, True),  # published: its marker decides
    (JobStatus.FAILED, None, False, True),  # ended before it wrote anything
    (JobStatus.CANCELLED, None, False, True),
    (JobStatus.FAILED, 0, True, True),  # ended early, settled: published
    (JobStatus.FAILED, 0, False, False),  # ended early, not settled: what it wrote is not published yet
    (JobStatus.CANCELLED, 3, False, False),
])
def test_an_import_that_may_hold_unpublished_records_sends_the_stream_to_the_table(
        ports, ingest, reconciliation, status, chunks_begun, settled, answers):
    written = ingest(record("bank", 1, 100))
    _another_import(ports, status, chunks_begun, settled)
    assert _open_ids(ports) == (written if answers else None)


def test_a_listed_import_still_writing_is_read_again_before_it_is_left_out(ports, ingest, reconciliation):
    ingest(record("bank", 1, 100))
    listed = _another_import(ports, JobStatus.PROCESSING, 0)
    stored = ports.ingestion_jobs.rows[(ENV, listed.id)]
    stale = ports.ingestion_jobs.list_of_stream

    def listing_of_before(*args):  # as an index's copy lagging behind the job's item
        jobs, cursor = stale(*args)
        return [listed if job.id == listed.id else job for job in jobs], cursor
    ports.ingestion_jobs.list_of_stream = listing_of_before
    stored.job = replace(stored.job, status=JobStatus.FAILED)  # ended early since: not settled
    assert _open_ids(ports) is None


def test_an_import_the_mirror_holds_part_of_sends_the_stream_to_the_table(ports, ingest, reconciliation):
    ingest(record("bank", 1, 100), record("bank", 2, 200))
    job = ports.ingestion_jobs.list_of_stream(ENV, "bank", 10, None)[0][0]
    row = ports.ingestion_jobs.rows[(ENV, job.id)]
    row.job = replace(row.job, created_per_stream={"bank": 3})  # a part the mirror never got
    assert _open_ids(ports) is None


def test_a_record_written_late_by_an_import_that_counted_none_in_the_stream_comes_from_the_table(
        ports, ingest, reconciliation):
    # Given an import of the stream, and another that ended (settled) having counted no record there,
    # whose slow execution wrote one after: a late write, its block noted
    written = ingest(record("bank", 1, 100))
    first_id = ports.counters.next_ids(ENV, "record", CHANGE_BLOCK_IDS).start  # its ids in a block of their own
    late = _another_import(ports, JobStatus.FAILED, chunks_begun=0, settled=True, first_record_id=first_id)
    ports.data_streams.note_records_changed(ENV, {"bank": [first_id]})
    ports.records.put_many([Record(ENV, first_id, "bank", ports.data_streams.get(ENV, "bank").id, "2026-11-02", 300,
                                   Direction.CREDIT, "USD", 2, RecordStatus.UNRECONCILED, utc_now(),
                                   file_import_id=late.id)])

    # Then a run finds it (in the table), beside the mirror's
    assert _open_ids(ports) == [*written, first_id]


def test_a_stream_without_imports_is_left_to_the_table(ports, reconciliation):
    assert _open_ids(ports) is None


def test_a_claim_or_a_delete_sends_its_block_alone_to_the_table(ports, ingest, reconciliation):
    # Given a match that claimed a record of each stream, then an import whose ids begin a block
    streams(ports, "fees")
    bank, ledger, fee, kept_fee = ingest(record("bank", 1, 100), record("ledger", 1, 100), record("fees", 1, 5),
                                         record("fees", 2, 6))
    rule = create_rule(ports, ENV, reconciliation.id, {"name": "Same amount",
                                                       "conditions": [{"field": "amount", "operator": "equals"}]})
    matched_by_a_run(ports, reconciliation, rule, [bank], [ledger])
    ports.counters.next_ids(ENV, "record", CHANGE_BLOCK_IDS)
    new_bank, new_ledger = ingest(record("bank", 2, 200), record("ledger", 2, 200))
    assert {change_block(i) for i in (bank, kept_fee)} == {0}
    assert {change_block(i) for i in (new_bank, new_ledger)} == {1}

    # When the open records are read, each read watched
    mirrored, from_table = _watched_reads(ports)

    # Then the claimed block comes from the table (its record no longer open), the new import from the mirror
    assert _open_ids(ports, reconciliation_id=reconciliation.id) == [new_bank]
    assert _open_ids(ports, "ledger", reconciliation_id=reconciliation.id) == [new_ledger]
    assert from_table == [((bank, kept_fee),)] * 2  # the changed block's ids of the first import
    assert mirrored == [{new_bank}, {new_ledger}]  # the first import's block was not read there

    # And a delete does the same to its stream alone: the other record comes from the table
    del mirrored[:], from_table[:]
    assert _open_ids(ports, "fees") == [fee, kept_fee]
    assert from_table == [] and len(mirrored) == 1
    delete_record(ports, ENV, fee)
    assert _open_ids(ports, "fees") == [kept_fee]
    assert from_table == [((bank, kept_fee),)]


def test_an_import_across_two_blocks_reads_only_the_changed_one_from_the_table(ports, ingest, reconciliation):
    # Given an import whose ids cross into a new block, and a match of two records of that block
    next_id = ports.counters.next_ids(ENV, "record", 1).start + 1
    ports.counters.next_ids(ENV, "record", CHANGE_BLOCK_IDS - 1 - next_id)
    kept, claimed, ledger, open_after = ingest(record("bank", 1, 100), record("bank", 2, 200), record("ledger", 1, 200),
                                               record("bank", 3, 300))
    assert (change_block(kept), change_block(claimed), change_block(open_after)) == (0, 1, 1)
    rule = create_rule(ports, ENV, reconciliation.id, {"name": "Same amount",
                                                       "conditions": [{"field": "amount", "operator": "equals"}]})
    matched_by_a_run(ports, reconciliation, rule, [claimed], [ledger])

    # When the bank stream's open records are read
    _, from_table = _watched_reads(ports)
    open_ids = _open_ids(ports, reconciliation_id=reconciliation.id)

    # Then the first block's record comes from the mirror, the changed block's open one from the table
    assert open_ids == [kept, open_after]
    assert from_table == [((claimed, open_after),)]


def test_the_limit_counts_the_records_of_imports_read_from_the_mirror(ports, ingest, reconciliation):
    # Given an import a run matched whole, then a new one of blocks of its own
    bank, ledger = ingest(record("bank", 1, 100), record("ledger", 1, 100))
    rule = create_rule(ports, ENV, reconciliation.id, {"name": "Same amount",
                                                       "conditions": [{"field": "amount", "operator": "equals"}]})
    matched_by_a_run(ports, reconciliation, rule, [bank], [ledger])
    ports.counters.next_ids(ENV, "record", CHANGE_BLOCK_IDS)
    new_bank, new_other = ingest(record("bank", 2, 200), record("bank", 3, 300))

    # Then a limit of the new import's records lets the mirror answer (the matched one counts what it left open)
    assert _open_ids(ports, reconciliation_id=reconciliation.id, limit=2) == [new_bank, new_other]
    assert _open_ids(ports, reconciliation_id=reconciliation.id, limit=1) is None


def _watched_reads(ports):
    """The ids of each import page the mirror gives, and the id ranges of each table read, from now on."""
    mirrored, from_table = [], []
    import_rows, open_record_columns = ports.mirror.import_rows, ports.claims.open_record_columns

    def watched_import_rows(*args):
        rows = import_rows(*args)
        if rows is not None:
            mirrored.append(set(rows.collect()["id"].to_list()))
        return rows

    def watched_open_record_columns(*args, id_ranges=None, **kwargs):
        from_table.append(None if id_ranges is None else tuple(id_ranges))
        return open_record_columns(*args, id_ranges=id_ranges, **kwargs)
    ports.mirror.import_rows = watched_import_rows
    ports.claims.open_record_columns = watched_open_record_columns
    return mirrored, from_table
