"""A chunk whose execution died after writing some of its records, before its results were saved
(services/ingestion/chunk.py), on the fakes: a retry, in whichever process, owns the records that are in
the table and writes only the missing ones (a claim made on one meanwhile survives); a job that
ends before any retry owns them too, even with its payload gone, and releases the external_ids
its rows claimed without writing their records. Either way each record is counted once, totals add
up and a stream's records_count is the records in the table. While the job may still write, its
records cannot be deleted: a retried chunk would write them again."""
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from chalicelib.domain.errors import Conflict
from chalicelib.domain.ingestion import BULK_CHUNK_ROWS, FILE_CHUNK_ROWS, ItemStatus, JobSource, JobStatus, OnConflict
from chalicelib.domain.record_changes import change_blocks
from chalicelib.domain.records import RecordStatus
from chalicelib.services.data_streams import sweep_recounts
from chalicelib.services.ingestion import files
from chalicelib.services.ingestion.bulk import process_job, submit_bulk
from chalicelib.services.ingestion.lifecycle import fail
from chalicelib.services.reconciliation_rules import create_rule
from chalicelib.services.records import delete_record
from tests.services.conftest import ENV, matched_by_a_run

# Write to the end whatever the machine's load: a real task budget could run out on a busy CI core.
WHOLE_FILE = timedelta(hours=1)

RULE = {"name": "Amount", "priority": 1, "conditions": [{"field": "amount", "operator": "equals"}]}
ITEMS = 2 * BULK_CHUNK_ROWS + 100  # three chunks; the second dies
KEPT = 100  # records of the second chunk written before it died
# In the second chunk, among its first KEPT rows, both bank's: DUPLICATE repeats ITS_FIRST's external_id,
# and is skipped.
DUPLICATE, ITS_FIRST = BULK_CHUNK_ROWS + 50, BULK_CHUNK_ROWS + 12


class Died(Exception):
    pass


class DiesWriting:
    """A records port whose `call`-th put_many writes its first `keep` records, then the process dies.
    Records whose put was asked for are kept in `put`."""

    def __init__(self, records, call: int = 0, keep: int = 0) -> None:
        self.records, self.call, self.keep, self.calls, self.put = records, call, keep, 0, []

    def __getattr__(self, name):
        return getattr(self.records, name)

    def put_many(self, records):
        records = list(records)
        self.calls += 1
        if self.calls == self.call:
            self.records.put_many(records[:self.keep])
            raise Died(f"put_many call {self.call}")
        self.put += [r.id for r in records]
        return self.records.put_many(records)

    def put_absent(self, records):
        self.put += [r.id for r in records]
        return self.records.put_absent(records)


def item(n: int) -> dict:
    stream = "bank" if n % 2 == 0 else "ledger"
    external_id = f"x-{ITS_FIRST if n == DUPLICATE else n}"
    return {"data_stream_key": stream, "external_id": external_id, "date": "2026-11-02", "direction": "credit",
            "amount": -1 if n % 50 == 7 else 1000 + n}  # every 50th item fails validation


INVALID = {n for n in range(ITEMS) if n % 50 == 7}


def stored(ports) -> dict[int, object]:
    """The record items in the table, by id (one item per id: a record written twice is still one)."""
    return {record_id: row for (env, record_id), row in ports.records.store.rows.items() if env == ENV}


def assert_streams_count_their_records(ports):
    rows = stored(ports).values()
    for stream in ("bank", "ledger"):
        in_table = sum(1 for row in rows if row.record.data_stream_key == stream)
        assert ports.data_streams.get(ENV, stream).records_count == in_table > 0


def assert_totals_add_up(job):
    assert job.successful_items + job.failed_items + job.skipped_items == job.processed_items == job.total_items


@pytest.fixture
def crashed(ports, reconciliation):
    """A bulk job whose second chunk died with KEPT of its records written, its results never saved."""
    job = submit_bulk(ports, ENV, [item(n) for n in range(ITEMS)], OnConflict.SKIP, None)
    with pytest.raises(Died):
        process_job(replace(ports, records=DiesWriting(ports.records, call=2, keep=KEPT)), ENV, job.id)
    job = ports.ingestion_jobs.get(ENV, job.id)
    assert job.done_chunks == {0} and job.status is JobStatus.PROCESSING
    written = sorted(i for i in stored(ports) if i >= job.record_id(BULK_CHUNK_ROWS))
    assert len(written) == KEPT
    return job, written


def test_a_retried_chunk_owns_the_records_it_wrote_and_a_claim_made_meanwhile_survives(ports, reconciliation,
                                                                                       crashed):
    job, written = crashed
    # Meanwhile a run matches one of them (bank, ITS_FIRST) with a ledger record of the first chunk.
    claimed = job.record_id(ITS_FIRST)
    assert claimed in written
    rule = create_rule(ports, ENV, reconciliation.id, RULE)
    match = matched_by_a_run(ports, reconciliation, rule, [claimed], [job.record_id(1)])

    retry = DiesWriting(ports.records)  # another delivery, in another process: it dies nowhere
    done = process_job(replace(ports, records=retry), ENV, job.id)

    assert done.status is JobStatus.COMPLETED
    assert not set(retry.put) & set(written)  # nothing in the table is written over
    row = ports.records.store.row(ENV, claimed)
    assert row.match_ids == {reconciliation.id: match.id} and row.record.status is RecordStatus.RECONCILED
    results = ports.ingestion_jobs.results(ENV, job.id)
    assert [r.index for r in results] == list(range(ITEMS))
    for n, result in enumerate(results):
        if n in INVALID:
            assert (result.status, result.record_id) == (ItemStatus.FAILED, None)
        elif n == DUPLICATE:
            assert (result.status, result.record_id) == (ItemStatus.SKIPPED, claimed)
        else:
            assert (result.status, result.record_id, result.external_id) == (
                ItemStatus.SUCCESSFUL, job.record_id(n), f"x-{n}")
    successful = {r.record_id for r in results if r.status is ItemStatus.SUCCESSFUL}
    assert set(stored(ports)) == successful  # each record once, none without a result
    assert (done.successful_items, done.failed_items, done.skipped_items) == (
        ITEMS - len(INVALID) - 1, len(INVALID), 1)
    assert_totals_add_up(done)
    assert done.created_per_stream == {
        stream: sum(1 for row in stored(ports).values() if row.record.data_stream_key == stream)
        for stream in ("bank", "ledger")}
    assert done.aggregates.total.count == len(successful)
    assert_streams_count_their_records(ports)


def test_a_job_failed_with_its_payload_gone_owns_the_records_its_unfinished_chunk_wrote(ports, crashed):
    job, written = crashed
    del ports.payloads.objects[job.payload_key]  # lost: every redelivery fails reading it
    with pytest.raises(Exception, match="NoSuchKey"):
        process_job(ports, ENV, job.id)

    ended = fail(ports, ENV, job.id, Died("payload lost"), attempts=3)

    assert ended.status is JobStatus.FAILED
    results = ports.ingestion_jobs.results(ENV, job.id)
    assert [r.index for r in results] == list(range(ITEMS))
    owned = [r for r in results if r.index >= BULK_CHUNK_ROWS and r.status is ItemStatus.SUCCESSFUL]
    assert sorted(r.record_id for r in owned) == written
    records = stored(ports)
    assert all(r.record_id == job.record_id(r.index) and r.external_id == records[r.record_id].record.external_id
               for r in owned)
    not_processed = [r for r in results if r.index >= BULK_CHUNK_ROWS and r.status is not ItemStatus.SUCCESSFUL]
    assert len(not_processed) == ITEMS - BULK_CHUNK_ROWS - KEPT
    assert all(r.status is ItemStatus.FAILED and r.error.startswith("not processed") for r in not_processed)
    successful = {r.record_id for r in results if r.status is ItemStatus.SUCCESSFUL}
    assert set(records) == successful
    assert ended.successful_items == len(successful)
    assert_totals_add_up(ended)
    assert ended.aggregates.total.count == len(records)
    assert_streams_count_their_records(ports)


CSV_ROWS = FILE_CHUNK_ROWS + 200


def file_import(ports, rows: int = CSV_ROWS):
    """An uploaded CSV import of `rows` rows into bank, prepared into its chunks."""
    job, _ = files.create_import(ports, ENV, "bank", filename="nov.csv", source=JobSource.CSV,
                                        on_conflict=OnConflict.SKIP, column_mapping={}, date_format="YYYY-MM-DD",
                                        decimal_places=None)
    data = "date,amount,external_id\n" + "".join(f"2026-11-01,{n}.00,f-{n}\n" for n in range(rows))
    ports.payloads.objects[job.import_file_key] = (data.encode(), datetime.now(UTC))
    assert files.prepare(ports, ENV, job.id) == "chunk"
    return ports.ingestion_jobs.get(ENV, job.id)


def test_a_file_import_chunk_retried_by_a_new_task_writes_only_its_missing_records(ports, reconciliation):
    job = file_import(ports)
    with pytest.raises(Died):
        files.write_chunks(replace(ports, records=DiesWriting(ports.records, call=2, keep=KEPT)), ENV, job.id)
    claimed = job.record_id(FILE_CHUNK_ROWS + 5)  # by a run, meanwhile
    assert ports.claims.claim_record(ENV, claimed, reconciliation.id, 77, frozenset({reconciliation.id}))

    retry = DiesWriting(ports.records)
    assert files.write_chunks(replace(ports, records=retry), ENV, job.id, budget=WHOLE_FILE) == "finish"
    files.finish(ports, ENV, job.id)

    done = ports.ingestion_jobs.get(ENV, job.id)
    assert (done.status, done.successful_items, done.processed_items) == (JobStatus.COMPLETED, CSV_ROWS, CSV_ROWS)
    assert len(retry.put) == CSV_ROWS - FILE_CHUNK_ROWS - KEPT
    row = ports.records.store.row(ENV, claimed)
    assert row.match_ids == {reconciliation.id: 77} and row.record.status is RecordStatus.RECONCILED
    assert len(stored(ports)) == CSV_ROWS == ports.data_streams.get(ENV, "bank").records_count


def test_a_failed_file_import_whose_files_are_gone_owns_what_its_unfinished_chunk_wrote(ports, reconciliation):
    job = file_import(ports)
    with pytest.raises(Died):
        files.write_chunks(replace(ports, records=DiesWriting(ports.records, call=2, keep=KEPT)), ENV, job.id)
    ports.payloads.objects.clear()  # the upload and the chunk files

    assert files.give_up(ports, ENV, job.id, {"Error": "NoSuchKey", "Cause": "chunk file lost"}) == "stop"

    ended = ports.ingestion_jobs.get(ENV, job.id)
    assert ended.status is JobStatus.FAILED
    assert (ended.successful_items, ended.failed_items) == (FILE_CHUNK_ROWS + KEPT, CSV_ROWS - FILE_CHUNK_ROWS - KEPT)
    assert_totals_add_up(ended)
    problems = ports.ingestion_jobs.results(ENV, job.id, problems_only=True)
    assert [r.index for r in problems] == list(range(FILE_CHUNK_ROWS + KEPT, CSV_ROWS))
    assert len(stored(ports)) == ended.successful_items == ports.data_streams.get(ENV, "bank").records_count
    assert ended.aggregates.total.count == ended.successful_items


def test_a_worker_that_finds_its_job_ended_meanwhile_writes_no_more_records(ports, reconciliation):
    job = submit_bulk(ports, ENV, [item(n) for n in range(ITEMS)], OnConflict.SKIP, None)

    class FailedBySweeperAfterTheFirstChunk(DiesWriting):
        def put_many(self, records):
            written = super().put_many(records)
            if self.calls == 1:
                fail(ports, ENV, job.id, Died("no progress"), attempts=3)
            return written

    ended = process_job(replace(ports, records=FailedBySweeperAfterTheFirstChunk(ports.records)), ENV, job.id)

    assert ended.status is JobStatus.FAILED
    assert all(i < ended.record_id(BULK_CHUNK_ROWS) for i in stored(ports))  # nothing after its end
    assert ended.successful_items == len(stored(ports))
    assert_totals_add_up(ended)
    assert_streams_count_their_records(ports)


# Claims of rows never written, and deletes while a chunk may be retried ---------------------------

OTHER_JOBS = {600: "job:999:0", 602: "job:998:3"}  # rows of the second chunk whose ids another job holds


def guard(ports, n: int, stream: str | None = None, prefix: str = "x"):
    """The claim of item n's external_id (a CSV row's: prefix "f", in bank)."""
    stream = stream or ("bank" if n % 2 == 0 else "ledger")
    return ports.records.store.guards.get((ENV, stream, f"{prefix}-{n}"))


def test_a_failed_job_releases_the_claims_of_the_rows_its_unfinished_chunk_never_wrote(ports, reconciliation):
    for n, owner in OTHER_JOBS.items():
        ports.records.claim_external_id(ENV, "bank", f"x-{n}", owner=owner, record_id=90_000 + n)
    job = submit_bulk(ports, ENV, [item(n) for n in range(ITEMS)], OnConflict.ERROR, None)
    with pytest.raises(Died):  # the second chunk claimed every id it carries, then wrote KEPT records
        process_job(replace(ports, records=DiesWriting(ports.records, call=2, keep=KEPT)), ENV, job.id)
    job = ports.ingestion_jobs.get(ENV, job.id)
    second = range(BULK_CHUNK_ROWS, 2 * BULK_CHUNK_ROWS)
    claimed = [n for n in second if n not in INVALID and n != DUPLICATE and n not in OTHER_JOBS]
    assert all(guard(ports, n).owner == f"job:{job.id}:{n}" for n in claimed)

    ended = fail(ports, ENV, job.id, Died("no progress"), attempts=3)

    assert ended.status is JobStatus.FAILED
    records = stored(ports)
    written = [n for n in claimed if job.record_id(n) in records]
    released = [n for n in claimed if job.record_id(n) not in records]
    assert len(written) == KEPT and ITS_FIRST in written and released
    assert all(guard(ports, n).record_id == job.record_id(n) for n in written)  # their records hold them
    assert all(guard(ports, n) is None for n in released)
    for n, owner in OTHER_JOBS.items():  # another job's claim stays as it was
        assert (guard(ports, n).owner, guard(ports, n).record_id) == (owner, 90_000 + n)
    assert_totals_add_up(ended)

    again = submit_bulk(ports, ENV, [item(n) for n in released + list(OTHER_JOBS)], OnConflict.ERROR, None)
    done = process_job(ports, ENV, again.id)
    results = ports.ingestion_jobs.results(ENV, again.id)
    assert [r.status for r in results[:len(released)]] == [ItemStatus.SUCCESSFUL] * len(released)
    assert all(guard(ports, n).record_id == r.record_id == done.record_id(r.index) and r.record_id in stored(ports)
               for n, r in zip(released, results))
    assert [(r.status, r.error) for r in results[len(released):]] == [
        (ItemStatus.FAILED, f"external_id: 'x-{n}' already exists in data stream 'bank'") for n in OTHER_JOBS]
    assert_streams_count_their_records(ports)


def test_a_cancelled_file_import_releases_the_claims_of_its_unwritten_rows(ports, reconciliation):
    job = file_import(ports)
    with pytest.raises(Died):
        files.write_chunks(replace(ports, records=DiesWriting(ports.records, call=2, keep=KEPT)), ENV, job.id)
    ports.ingestion_jobs.request_cancellation(ports.ingestion_jobs.get(ENV, job.id), (JobStatus.PROCESSING,))
    assert files.write_chunks(ports, ENV, job.id) == "stop"

    ended = ports.ingestion_jobs.get(ENV, job.id)
    assert ended.status is JobStatus.CANCELLED
    kept = FILE_CHUNK_ROWS + KEPT
    assert all(guard(ports, n, "bank", "f").record_id == job.record_id(n) for n in range(kept))
    assert all(guard(ports, n, "bank", "f") is None for n in range(kept, CSV_ROWS))

    again = file_import(ports)  # the same file: the rows written before are skipped, the others written
    assert files.write_chunks(ports, ENV, again.id, budget=WHOLE_FILE) == "finish"
    files.finish(ports, ENV, again.id)
    done = ports.ingestion_jobs.get(ENV, again.id)
    assert (done.status, done.successful_items, done.skipped_items) == (JobStatus.COMPLETED, CSV_ROWS - kept, kept)
    assert len(stored(ports)) == CSV_ROWS == ports.data_streams.get(ENV, "bank").records_count


def test_a_record_of_a_job_that_may_still_write_cannot_be_deleted_until_it_has_finished(ports, reconciliation,
                                                                                         crashed, clock):
    job, written = crashed
    record_id = written[-1]
    with pytest.raises(Conflict, match=f"record {record_id} belongs to import {job.id}, which is still writing"):
        delete_record(ports, ENV, record_id)
    assert ports.records.get(ENV, record_id).id == record_id  # not hidden either

    done = process_job(ports, ENV, job.id)  # the chunk's retry: nothing of it was deleted meanwhile
    assert done.status is JobStatus.COMPLETED
    delete_record(ports, ENV, record_id)
    assert record_id not in stored(ports)
    clock.advance(minutes=1)  # the sweeper comes by within a minute
    assert sweep_recounts(ports) == 1
    assert_streams_count_their_records(ports)


class EndedWhileWriting:
    """A records port whose second put_many is overtaken: the job is failed (the sweeper, another
    delivery) after the chunk claimed its ids and before it writes; `meanwhile` runs then too."""

    def __init__(self, ports, job_id: int, meanwhile=lambda: None) -> None:
        self.records, self.ports, self.job_id, self.meanwhile, self.calls = ports.records, ports, job_id, meanwhile, 0

    def __getattr__(self, name):
        return getattr(self.records, name)

    def put_many(self, records):
        records = list(records)
        self.calls += 1
        if self.calls == 2:
            fail(self.ports, ENV, self.job_id, RuntimeError("stuck"), 3)  # releases the rows' claims
            self.meanwhile()
        return self.records.put_many(records)


def fee(n):
    return {"data_stream_key": "bank", "external_id": f"x-{n}", "date": "2026-11-02", "direction": "credit",
            "amount": 1000 + n}


def test_a_late_writer_whose_job_ended_claims_back_what_it_wrote_and_never_leaves_a_duplicate(ports, reconciliation):
    job = submit_bulk(ports, ENV, [fee(n) for n in range(2 * BULK_CHUNK_ROWS)], OnConflict.ERROR, None)
    taken = BULK_CHUNK_ROWS + 7

    def another_job_takes_one():  # its claim was released: someone else ingests that id meanwhile
        other = submit_bulk(ports, ENV, [fee(taken)], OnConflict.ERROR, None)
        assert process_job(ports, ENV, other.id).successful_items == 1

    late = replace(ports, records=EndedWhileWriting(ports, job.id, another_job_takes_one))
    assert ports.data_streams.changed_since_import(ENV, "bank") == frozenset()
    process_job(late, ENV, job.id)

    assert ports.ingestion_jobs.get(ENV, job.id).status is JobStatus.FAILED
    assert _blocks_noted(ports, job.id, chunk=1)  # late records: counted nowhere
    for n in (BULK_CHUNK_ROWS, BULK_CHUNK_ROWS + 50, taken):
        again = submit_bulk(ports, ENV, [fee(n)], OnConflict.ERROR, None)
        assert process_job(ports, ENV, again.id).failed_items == 1  # each id is held: never a second record
        held = [r for r in ports.records.store.rows.values() if r.record.external_id == f"x-{n}"]
        assert len(held) == 1, n


def _blocks_noted(ports, job_id: int, chunk: int) -> bool:
    """Whether the blocks of ids of the job's chunk are noted as changed since their import wrote
    them (services/imported_records.py: runs read them from the table)."""
    job = ports.ingestion_jobs.get(ENV, job_id)
    blocks = change_blocks(job.record_id(index) for index in job.chunk_range(chunk))
    return bool(blocks) and blocks <= (ports.data_streams.changed_since_import(ENV, "bank") or set())


class EndedThenDiesWriting(EndedWhileWriting):
    """As EndedWhileWriting, but the process dies once the late records are in: nothing of the
    chunk's own saving runs (its `written_outcome`)."""

    def put_many(self, records):
        written = super().put_many(records)
        if self.calls == 2:
            raise Died("after the late write")
        return written


def test_a_late_writer_that_dies_after_writing_leaves_no_run_reading_its_stream_from_the_mirror(ports,
                                                                                               reconciliation):
    job = submit_bulk(ports, ENV, [fee(n) for n in range(2 * BULK_CHUNK_ROWS)], OnConflict.ERROR, None)
    assert ports.data_streams.changed_since_import(ENV, "bank") == frozenset()

    with pytest.raises(Died):
        process_job(replace(ports, records=EndedThenDiesWriting(ports, job.id)), ENV, job.id)

    ended = ports.ingestion_jobs.get(ENV, job.id)
    in_table = sum(1 for row in stored(ports).values() if row.record.data_stream_key == "bank")
    assert ended.status is JobStatus.FAILED and ended.created_per_stream["bank"] < in_table  # late: counted nowhere
    assert _blocks_noted(ports, job.id, chunk=1)  # so runs read them from the table, which has them


class OvertakenWhileWriting(EndedWhileWriting):
    """A records port whose second put_many is overtaken by another execution of the job that wrote
    every chunk and moved it to replicating (a restart beside a slow execution)."""

    def put_many(self, records):
        records = list(records)
        self.calls += 1
        if self.calls == 2:
            job = self.ports.ingestion_jobs.get(ENV, self.job_id)
            self.ports.ingestion_jobs.move(job, JobStatus.REPLICATING)
        return self.records.put_many(records)


def test_a_chunk_written_while_another_execution_replicates_its_job_turns_the_mirror_reads_off(ports,
                                                                                              reconciliation):
    job = submit_bulk(ports, ENV, [fee(n) for n in range(2 * BULK_CHUNK_ROWS)], OnConflict.ERROR, None)

    process_job(replace(ports, records=OvertakenWhileWriting(ports, job.id)), ENV, job.id)

    assert _blocks_noted(ports, job.id, chunk=1)  # its writes may land after the mirror's


class LandsWhileReleased(EndedWhileWriting):
    """A records port whose second put_many is overtaken by the job's end, and lands inside it: right
    after the end released the first claim of the chunk, before it looks for records that came; then
    another job claims that id, and the late execution dies."""

    def put_many(self, records):
        records = list(records)
        self.calls += 1
        if self.calls != 2:
            return self.records.put_many(records)
        release, landed = self.records.release_external_id, []

        def released_then_landed(environment, stream_key, external_id, owner):
            dropped = release(environment, stream_key, external_id, owner=owner)
            if dropped and not landed:
                landed.append(external_id)
                self.records.put_many(records)
                assert self.records.claim_external_id(ENV, stream_key, external_id, "job:other:0", 10**9).claimed
            return dropped

        self.records.release_external_id = released_then_landed
        try:
            fail(self.ports, ENV, self.job_id, RuntimeError("stuck"), 3)
        finally:
            self.records.release_external_id = release
        assert landed
        raise Died("after the late write")


def test_a_late_record_whose_id_another_job_took_once_released_is_removed_by_the_end(ports, reconciliation):
    job = submit_bulk(ports, ENV, [fee(n) for n in range(2 * BULK_CHUNK_ROWS)], OnConflict.ERROR, None)

    with pytest.raises(Died):
        process_job(replace(ports, records=LandsWhileReleased(ports, job.id)), ENV, job.id)

    taken = f"x-{BULK_CHUNK_ROWS}"  # the first row of the second chunk: the other job's id now
    assert [r for r in stored(ports).values() if r.record.external_id == taken] == []  # no unguarded duplicate
    for n in (BULK_CHUNK_ROWS + 1, 2 * BULK_CHUNK_ROWS - 1):  # the others that landed keep their ids
        held = [r for r in stored(ports).values() if r.record.external_id == f"x-{n}"]
        again = submit_bulk(ports, ENV, [fee(n)], OnConflict.ERROR, None)
        assert len(held) == 1 and process_job(ports, ENV, again.id).failed_items == 1, n


class OvertakenBeforeWriting:
    """A records port that, once the first chunk's external_ids are claimed (read, and written when
    new) and before its records go out, lets `meanwhile` run: another execution of the same job
    runs whole, then a run claims one of the records that execution wrote."""

    def __init__(self, records, meanwhile) -> None:
        self.records, self.meanwhile, self.overtaken = records, meanwhile, False

    def __getattr__(self, name):
        return getattr(self.records, name)

    def external_id_claims(self, environment, wanted):
        claims = self.records.external_id_claims(environment, wanted)
        self._overtake()
        return claims

    def put_external_id_guards(self, environment, guards):
        self.records.put_external_id_guards(environment, guards)
        self._overtake()

    def _overtake(self):
        if not self.overtaken:
            self.overtaken = True
            self.meanwhile()


def another_execution_then_a_run(ports, reconciliation, job_id: int, row: int, matches: list):
    """What overtakes the slow execution: the job processed whole by another delivery, then a run
    matching the record of `row` (a bank row) with the first ledger record; its match and record id
    are appended to `matches`."""
    def meanwhile():
        done = process_job(ports, ENV, job_id)
        assert done.status is JobStatus.COMPLETED
        rule = create_rule(ports, ENV, reconciliation.id, RULE)
        claimed = done.record_id(row)
        matches.append((claimed, matched_by_a_run(ports, reconciliation, rule, [claimed], [done.record_id(1)])))
    return meanwhile


def assert_claim_stands(ports, reconciliation, matches: list):
    [(record_id, match)] = matches
    row = ports.records.store.row(ENV, record_id)
    assert row.match_ids == {reconciliation.id: match.id} and row.record.status is RecordStatus.RECONCILED


def test_a_first_execution_overtaken_by_a_second_that_ended_the_job_writes_no_record_over_a_claimed_one(
        ports, reconciliation):
    job = submit_bulk(ports, ENV, [item(n) for n in range(ITEMS)], OnConflict.SKIP, None)
    matches: list = []  # row 2: of the first chunk, which the slow execution alone had begun
    slow = OvertakenBeforeWriting(ports.records, another_execution_then_a_run(ports, reconciliation, job.id, 2, matches))

    process_job(replace(ports, records=slow), ENV, job.id)

    assert slow.overtaken and ports.ingestion_jobs.get(ENV, job.id).chunks_begun_again >= {0}
    assert_claim_stands(ports, reconciliation, matches)
    done = ports.ingestion_jobs.get(ENV, job.id)
    assert done.status is JobStatus.COMPLETED
    assert_totals_add_up(done)
    successful = {r.record_id for r in ports.ingestion_jobs.results(ENV, job.id) if r.status is ItemStatus.SUCCESSFUL}
    assert set(stored(ports)) == successful


def test_a_retried_chunk_overtaken_by_another_retry_that_ended_the_job_writes_no_record_over_a_claimed_one(
        ports, reconciliation, crashed):
    job, written = crashed
    row, matches = BULK_CHUNK_ROWS + 300, []  # a bank row the crash never wrote
    assert job.record_id(row) not in written
    retry = OvertakenBeforeWriting(ports.records,
                                   another_execution_then_a_run(ports, reconciliation, job.id, row, matches))

    process_job(replace(ports, records=retry), ENV, job.id)

    assert retry.overtaken
    assert_claim_stands(ports, reconciliation, matches)
    done = ports.ingestion_jobs.get(ENV, job.id)
    assert done.status is JobStatus.COMPLETED
    assert_totals_add_up(done)
    assert_streams_count_their_records(ports)
