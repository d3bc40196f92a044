"""Ingestion jobs: moves along JOB_STATUSES, chunks counted once, idempotency keys, the stream
listings, the active jobs, cancellation and restarts."""
from __future__ import annotations

from dataclasses import replace

import pytest

from chalicelib.domain.errors import BadRequest, NotFound, TransitionRefused
from chalicelib.domain.ingestion import (
    CANCELLABLE,
    CHUNKS_IN_FLIGHT,
    ChunkOutcome,
    ImportTotals,
    ItemResult,
    ItemStatus,
    JobSource,
    JobStatus,
    StreamTotals,
)
from tests.contract.builders import ENV, OTHER_ENV, T0_MS, job


def ok(index: int, record_id: int | None = None) -> ItemResult:
    return ItemResult(index, ItemStatus.SUCCESSFUL, f"ext-{index}", record_id or 1000 + index, None, None)


def failed(index: int, line: int | None = None) -> ItemResult:
    return ItemResult(index, ItemStatus.FAILED, None, None, "amount: must be an integer", line)


def skipped(index: int) -> ItemResult:
    return ItemResult(index, ItemStatus.SKIPPED, f"ext-{index}", None, "external_id exists", None)


def processing(jobs, job_id: int = 1, **kw):
    jobs.add(job(job_id, **kw))
    return jobs.move(jobs.get(ENV, job_id), JobStatus.PROCESSING)


class TestIngestionJobRepository:
    def test_add_writes_a_new_job_once_with_zeroed_progress(self, jobs):
        added = job(1, payload_key="bulk/1.json", body_hash="abc", idempotency_key="k1", data_stream_ids=(3, 4),
                    processed_items=9, first_record_id=77, restarts=2, options={"delimiter": ";"}, bulk_chunk_rows=500,
                    file_chunk_rows=120)
        jobs.add(added)
        jobs.add(replace(added, total_items=1))  # a retried request: nothing changes
        assert jobs.get(ENV, 1) == replace(added, created_at=T0_MS, processed_items=0, first_record_id=None,
                                           restarts=0)
        assert jobs.find(ENV, 2) is None
        with pytest.raises(NotFound):
            jobs.get(OTHER_ENV, 1)

    def test_an_idempotency_key_binds_once_until_it_expires(self, jobs, clock):
        assert jobs.claim_idempotency_key(ENV, "key-1", 10, "hash-a") == (10, "hash-a")
        assert jobs.claim_idempotency_key(ENV, "key-1", 11, "hash-b") == (10, "hash-a")
        assert jobs.claim_idempotency_key(OTHER_ENV, "key-1", 12, "hash-c") == (12, "hash-c")
        clock.advance(hours=47)
        assert jobs.claim_idempotency_key(ENV, "key-1", 13, "hash-d") == (10, "hash-a")
        clock.advance(hours=1, seconds=2)
        assert jobs.claim_idempotency_key(ENV, "key-1", 14, "hash-e") == (14, "hash-e")
        assert jobs.claim_idempotency_key(ENV, "key-1", 15, "hash-f") == (14, "hash-e")

    def test_moves_follow_the_status_table(self, jobs, clock):
        jobs.add(job(1, total_items=0))
        started = jobs.move(jobs.get(ENV, 1), JobStatus.PROCESSING, started_at=clock.now, last_progress_at=clock.now)
        assert (started.status, started.started_at, started.last_progress_at) == (
            JobStatus.PROCESSING, clock.now.replace(microsecond=123000), clock.now.replace(microsecond=123000))
        with pytest.raises(TransitionRefused):  # no move leads back to pending
            jobs.move(started, JobStatus.PENDING)
        assert jobs.get(ENV, 1).status is JobStatus.PROCESSING
        replicating = jobs.move(started, JobStatus.REPLICATING, data_stream_ids=[5, 6])
        assert replicating.data_stream_ids == (5, 6)
        with pytest.raises(TransitionRefused):
            jobs.move(replicating, JobStatus.CANCELLED)
        done = jobs.move(replicating, JobStatus.COMPLETED, error_message=None)
        assert done.finished
        for target in (JobStatus.PROCESSING, JobStatus.FAILED, JobStatus.COMPLETED):
            with pytest.raises(TransitionRefused):
                jobs.move(done, target)
        with pytest.raises(TransitionRefused):
            jobs.move(job(9), JobStatus.PROCESSING)  # missing: refused, not created
        assert jobs.find(ENV, 9) is None

    def test_a_move_checks_the_stored_status_not_the_callers_copy(self, jobs):
        jobs.add(job(1, total_items=0))
        stale = jobs.get(ENV, 1)
        jobs.move(stale, JobStatus.CANCELLED)
        with pytest.raises(TransitionRefused):
            jobs.move(stale, JobStatus.PROCESSING)
        assert jobs.get(ENV, 1).status is JobStatus.CANCELLED

    def test_active_lists_unfinished_jobs_of_every_environment(self, jobs):
        for job_id, environment in ((3, ENV), (1, OTHER_ENV), (12, ENV), (2, ENV)):
            jobs.add(job(job_id, environment, total_items=0))
        jobs.move(jobs.get(ENV, 2), JobStatus.CANCELLED)
        jobs.move(jobs.get(ENV, 12), JobStatus.PROCESSING)
        jobs.move(jobs.get(ENV, 12), JobStatus.REPLICATING)
        assert [(j.environment, j.id, j.status) for j in jobs.active()] == [
            (ENV, 3, JobStatus.PENDING), (ENV, 12, JobStatus.REPLICATING), (OTHER_ENV, 1, JobStatus.PENDING)]

    def test_active_in_lists_one_environment_s_unfinished_jobs(self, jobs):
        for job_id, environment in ((3, ENV), (1, OTHER_ENV), (12, ENV), (2, ENV), (5, ENV + "x")):
            jobs.add(job(job_id, environment, total_items=0))
        jobs.move(jobs.get(ENV, 2), JobStatus.CANCELLED)
        jobs.move(jobs.get(ENV, 12), JobStatus.PROCESSING)
        assert [(j.id, j.status) for j in jobs.active_in(ENV)] == [(3, JobStatus.PENDING), (12, JobStatus.PROCESSING)]
        assert [j.id for j in jobs.active_in(ENV + "x")] == [5]

    def test_a_finished_status_needs_final_counts(self, jobs):
        # Given a job of 300 items with only its first chunk counted
        processing(jobs, total_items=300)
        jobs.save_chunk(jobs.get(ENV, 1), ChunkOutcome(0, tuple(ok(i) for i in range(250)), {"bank": 250}))
        # When it is moved to a finished status, Then that is refused: 250 of 300 is not final
        for target in (JobStatus.CANCELLED, JobStatus.FAILED):
            with pytest.raises(TransitionRefused):
                jobs.move(jobs.get(ENV, 1), target)
        assert jobs.get(ENV, 1).status is JobStatus.PROCESSING
        # Once every item is counted, it may finish
        jobs.save_chunk(jobs.get(ENV, 1), ChunkOutcome(1, tuple(failed(i) for i in range(250, 300)), {}))
        assert jobs.move(jobs.get(ENV, 1), JobStatus.FAILED).status is JobStatus.FAILED

    def test_an_ending_is_marked_once_and_the_job_then_moves_only_to_it(self, jobs):
        # Given a processing job of 300 items with its first chunk counted
        processing(jobs, total_items=300)
        jobs.save_chunk(jobs.get(ENV, 1), ChunkOutcome(0, tuple(ok(i) for i in range(250)), {"bank": 250}))
        # When it begins to end cancelled, and a failure comes second
        ending = jobs.begin_ending(jobs.get(ENV, 1), JobStatus.CANCELLED, {"error_message": None})
        second = jobs.begin_ending(ending, JobStatus.FAILED, {"error_message": "boom"})
        # Then the first ending holds, with its fields; the status still says processing
        assert (second.status, second.ending, second.ending_fields) == (
            JobStatus.PROCESSING, JobStatus.CANCELLED, {"error_message": None})
        # no worker counts or prepares any more, nor may the job replicate, complete or fail
        late = ChunkOutcome(1, (ok(250),) + tuple(skipped(i) for i in range(251, 300)), {"bank": 1})
        assert jobs.save_chunk(second, late).processed_items == 250
        for target in (JobStatus.REPLICATING, JobStatus.FAILED):
            with pytest.raises(TransitionRefused):
                jobs.move(jobs.get(ENV, 1), target)
        # the end counts what it never reached (what a late execution stored, as stored), then moves
        counted = jobs.save_chunk(second, ChunkOutcome(1, tuple(failed(i) for i in range(250, 300)), {}),
                                  unprocessed=True)
        assert (counted.processed_items, counted.successful_items, counted.skipped_items, counted.failed_items) == (
            300, 251, 49, 0)
        done = jobs.move(counted, JobStatus.CANCELLED)
        assert (done.status, done.processed_items) == (JobStatus.CANCELLED, 300)
        # A finished job is marked no more
        assert jobs.begin_ending(done, JobStatus.FAILED, {}).ending is JobStatus.CANCELLED
        jobs.add(job(2, source=JobSource.CSV, total_items=0, data_stream_key="bank"))
        ending_file = jobs.begin_ending(jobs.get(ENV, 2), JobStatus.FAILED, {"error_details": {"attempts": 3}})
        assert ending_file.ending_fields == {"error_details": {"attempts": 3}}
        assert jobs.record_preparation(ending_file, 3, 1200, 500).chunk_count is None

    def test_a_chunk_is_counted_once_while_processing(self, jobs, clock):
        processing(jobs)
        outcome = ChunkOutcome(0, (ok(0), failed(1), skipped(2), ok(3)), {"bank": 2, "fees": 0})
        counted = jobs.save_chunk(jobs.get(ENV, 1), outcome)
        again = jobs.save_chunk(jobs.get(ENV, 1), outcome)
        assert again == counted
        assert (counted.processed_items, counted.successful_items, counted.failed_items, counted.skipped_items,
                counted.done_chunks, counted.created_per_stream, counted.last_progress_at) == (
            4, 2, 1, 1, frozenset({0}), {"bank": 2, "fees": 0}, clock.now.replace(microsecond=123000))
        after = jobs.save_chunk(counted, ChunkOutcome(1, (ok(250), ok(251)), {"bank": 2}))
        assert (after.processed_items, after.created_per_stream, after.done_chunks) == (
            6, {"bank": 4, "fees": 0}, frozenset({0, 1}))

    def test_a_chunk_saved_outside_processing_is_stored_but_not_counted(self, jobs):
        jobs.add(job(1))
        pending = jobs.save_chunk(jobs.get(ENV, 1), ChunkOutcome(0, (ok(0), failed(1)), {"bank": 1}))
        assert (pending.processed_items, pending.done_chunks, pending.created_per_stream) == (0, frozenset(), {})
        assert jobs.results(ENV, 1) == [ok(0), failed(1)]
        missing = job(5)
        with pytest.raises(NotFound):
            jobs.save_chunk(missing, ChunkOutcome(0, (ok(0),), {}))

    def test_a_job_that_ended_early_counts_the_chunks_it_never_reached_once(self, jobs):
        processing(jobs, total_items=500)
        jobs.save_chunk(jobs.get(ENV, 1), ChunkOutcome(0, (ok(0),), {"bank": 1}))
        ended = jobs.begin_ending(jobs.get(ENV, 1), JobStatus.FAILED, {})
        unreached = ChunkOutcome(1, (failed(250), failed(251)), {})
        counted = jobs.save_chunk(ended, unreached, unprocessed=True)
        assert (counted.processed_items, counted.failed_items, counted.done_chunks) == (3, 2, frozenset({0, 1}))
        assert jobs.save_chunk(counted, unreached, unprocessed=True) == counted
        # A late execution of that chunk neither overwrites the results nor counts.
        late = jobs.save_chunk(counted, ChunkOutcome(1, (ok(250), ok(251)), {"bank": 2}))
        assert late == counted
        assert [r.status for r in jobs.results(ENV, 1)] == [ItemStatus.SUCCESSFUL, ItemStatus.FAILED,
                                                           ItemStatus.FAILED]

    def test_a_chunk_is_begun_once_and_a_chunk_up_to_the_highest_begun_may_have_begun_before(self, jobs):
        processing(jobs)
        assert jobs.begin_chunk(jobs.get(ENV, 1), 0) is False  # the first pass
        assert jobs.begin_chunk(jobs.get(ENV, 1), 0) is True  # a retry, from any process
        assert jobs.begin_chunk(jobs.get(ENV, 1), 2) is False
        assert jobs.begin_chunk(jobs.get(ENV, 1), 1) is True  # chunks begin in order: 1 may have
        begun = jobs.get(ENV, 1)
        assert begun.chunks_begun == 2
        assert [begun.may_have_written(n) for n in range(4)] == [True, True, True, False]
        assert begun.chunks_begun_again == {0, 1}  # an execution that began them first is not alone
        assert jobs.chunks_begun_again(ENV, 1) == {0, 1} and jobs.chunks_begun_again(ENV, 7) is None
        assert not jobs.get(ENV, 1).done_chunks and jobs.get(ENV, 1).processed_items == 0
        assert jobs.begin_chunk(job(7), 0) is None  # a missing job: nothing written, nothing created
        assert jobs.find(ENV, 7) is None

    @pytest.mark.parametrize("end", ["ending", "ended"])
    def test_a_chunk_of_a_job_no_longer_running_is_not_begun(self, jobs, end):
        # An execution that read the job while it ran, and reaches a chunk after its end was marked:
        # the end noted the blocks of the chunks begun before it, and this one must write nothing.
        processing(jobs, total_items=2)
        read_while_running = jobs.begin_chunk(jobs.get(ENV, 1), 0) is False and jobs.get(ENV, 1)
        ended = jobs.begin_ending(jobs.get(ENV, 1), JobStatus.FAILED, {})
        if end == "ended":
            ended = jobs.save_chunk(ended, ChunkOutcome(0, (failed(0), failed(1)), {}), unprocessed=True)
            assert jobs.move(ended, JobStatus.FAILED).status is JobStatus.FAILED
        assert jobs.begin_chunk(read_while_running, 1) is None
        assert jobs.begin_chunk(read_while_running, 0) is None  # nor begun again
        stored = jobs.get(ENV, 1)
        assert (stored.chunks_begun, stored.chunks_begun_again) == (0, frozenset())

    def test_saving_a_chunk_marks_the_one_in_flight_after_it_begun_for_the_saver_alone(self, jobs):
        processing(jobs, total_items=1000)
        # Given chunks 0 and 1 begun at once (the chunks one execution has in flight),
        assert jobs.begin_chunk(jobs.get(ENV, 1), 0, through=CHUNKS_IN_FLIGHT - 1) is False
        assert jobs.get(ENV, 1).chunks_begun == CHUNKS_IN_FLIGHT - 1
        # and two executions of chunk 0, when both save it and begin the chunk CHUNKS_IN_FLIGHT ahead,
        saved, marked = jobs.save_chunk_and_begin_ahead(jobs.get(ENV, 1), ChunkOutcome(0, (ok(0),), {"bank": 1}))
        late, late_marked = jobs.save_chunk_and_begin_ahead(saved, ChunkOutcome(0, (ok(0),), {"bank": 1}))
        # then the first counted the chunk and began that one; the second did neither.
        assert (marked, saved.chunks_begun, saved.done_chunks, saved.processed_items) == (
            True, CHUNKS_IN_FLIGHT, frozenset({0}), 1)
        assert (late_marked, late.processed_items) == (False, 1)
        # The second reads what the chunks in flight may have written.
        assert all(jobs.begin_chunk(jobs.get(ENV, 1), n) is True for n in range(1, CHUNKS_IN_FLIGHT + 1))

    def test_the_end_of_a_job_counts_the_records_it_finds_of_a_chunk_a_late_execution_stored(self, jobs):
        processing(jobs)
        jobs.begin_ending(jobs.get(ENV, 1), JobStatus.FAILED, {})
        jobs.save_chunk(jobs.get(ENV, 1), ChunkOutcome(0, (ok(0), ok(1), failed(2)), {"bank": 2}))
        # The end of the job finds the records of rows 0 and 1 in the table; the stored results stand.
        unfinished = ItemResult(2, ItemStatus.FAILED, None, None, "not processed", None)
        ended = jobs.save_chunk(jobs.get(ENV, 1), ChunkOutcome(0, (ok(0), ok(1), unfinished), {"bank": 2}),
                                unprocessed=True)
        assert (ended.processed_items, ended.successful_items, ended.failed_items, ended.created_per_stream) == (
            3, 2, 1, {"bank": 2})
        assert jobs.results(ENV, 1) == [ok(0), ok(1), failed(2)]

    def test_the_end_of_a_job_counts_what_a_late_execution_stored(self, jobs):
        processing(jobs)
        jobs.begin_ending(jobs.get(ENV, 1), JobStatus.CANCELLED, {})
        late = jobs.save_chunk(jobs.get(ENV, 1), ChunkOutcome(0, (ok(0), skipped(1)), {"bank": 1}))
        assert late.processed_items == 0  # stored, not counted: the job ended
        ended = jobs.save_chunk(late, ChunkOutcome(0, (failed(0), failed(1)), {}), unprocessed=True)
        assert (ended.processed_items, ended.successful_items, ended.skipped_items, ended.failed_items,
                ended.created_per_stream) == (2, 1, 1, 0, {})
        assert jobs.results(ENV, 1) == [ok(0), skipped(1)]

    def test_the_end_keeps_its_results_of_a_chunk_unless_some_are_stored_and_then_learns_which_stand(self, jobs):
        processing(jobs, total_items=1000)
        jobs.begin_ending(jobs.get(ENV, 1), JobStatus.FAILED, {})
        late = ChunkOutcome(0, (ok(0), skipped(1)), {"bank": 1})
        jobs.save_chunk(jobs.get(ENV, 1), late)  # a late execution's, stored (not counted: the job ends)
        mine = ChunkOutcome(0, (failed(0), failed(1)), {})
        assert jobs.keep_unprocessed_results(jobs.get(ENV, 1), mine) == (replace(late, created_per_stream={}), False)
        unreached = ChunkOutcome(1, (failed(500),), {})
        assert jobs.keep_unprocessed_results(jobs.get(ENV, 1), unreached) == (unreached, True)
        assert jobs.keep_unprocessed_results(jobs.get(ENV, 1), unreached) == (unreached, False)  # a retry's
        assert jobs.get(ENV, 1).processed_items == 0  # kept, not counted
        assert jobs.results(ENV, 1) == [ok(0), skipped(1), failed(500)]

    def test_a_file_import_keeps_its_problem_rows_only(self, jobs):
        processing(jobs, source=JobSource.CSV, total_items=1200, data_stream_key="bank")
        file_job = jobs.get(ENV, 1)
        jobs.save_chunk(file_job, ChunkOutcome(1, (ok(500),), {"bank": 1}))
        jobs.save_chunk(file_job, ChunkOutcome(0, (ok(0), failed(1, line=3), ok(2)), {"bank": 2}))
        jobs.begin_ending(jobs.get(ENV, 1), JobStatus.FAILED, {})
        # A late execution stores chunk 2 (rows 1000 to 1199), not counted: the job ended.
        late = ChunkOutcome(2, (skipped(1000),) + tuple(ok(i) for i in range(1001, 1200)), {"bank": 199})
        assert jobs.save_chunk(file_job, late).processed_items == 4
        assert jobs.results(ENV, 1) == []
        assert jobs.results(ENV, 1, problems_only=True) == [failed(1, line=3), skipped(1000)]
        assert list(jobs.result_chunks(file_job, 0)) == [(0, [failed(1, line=3)]), (1, []), (2, [skipped(1000)])]
        assert list(jobs.result_chunks(file_job, 2, page_size=1)) == [(2, [skipped(1000)])]
        # The end of the job counts chunk 2 as stored, rebuilt from its problem rows.
        ended = jobs.save_chunk(jobs.get(ENV, 1), ChunkOutcome(2, tuple(failed(i) for i in range(1000, 1200)), {}),
                                unprocessed=True)
        assert (ended.processed_items, ended.successful_items, ended.skipped_items, ended.failed_items,
                ended.created_per_stream) == (204, 202, 1, 1, {"bank": 3})

    def test_a_bulk_request_keeps_every_row_in_index_order(self, jobs):
        processing(jobs)
        bulk = jobs.get(ENV, 1)
        jobs.save_chunk(bulk, ChunkOutcome(1, (ok(250), failed(251)), {}))
        jobs.save_chunk(bulk, ChunkOutcome(0, (skipped(0), ok(1)), {}))
        assert [r.index for r in jobs.results(ENV, 1)] == [0, 1, 250, 251]
        assert jobs.results(ENV, 1, problems_only=True) == [skipped(0), failed(251)]
        assert list(jobs.result_chunks(bulk, 1)) == [(1, [ok(250), failed(251)])]

    def test_results_cursors_belong_to_their_job_and_listing(self, jobs):
        jobs.add(job(1, total_items=600))
        jobs.add(job(2, total_items=600))
        first, second = jobs.get(ENV, 1), jobs.get(ENV, 2)
        cursor = jobs.results_cursor(first, "failed", 249)
        assert jobs.results_after(first, "failed", cursor) == 249
        for other_job, listing, bad in ((second, "failed", cursor), (first, "all", cursor),
                                        (first, "failed", "garbage"),
                                        (first, "failed", jobs.results_cursor(first, "failed", 600))):
            with pytest.raises(BadRequest):
                jobs.results_after(other_job, listing, bad)

    def test_record_ids_and_preparation_are_fixed_once(self, jobs, clock):
        jobs.add(job(1))
        assert jobs.reserve_record_ids(jobs.get(ENV, 1), 100).first_record_id == 100
        assert jobs.reserve_record_ids(jobs.get(ENV, 1), 200).first_record_id == 100
        jobs.add(job(2, source=JobSource.CSV, total_items=0, data_stream_key="bank"))
        prepared = jobs.record_preparation(jobs.get(ENV, 2), 3, 1200, 500, decimal_places=2)
        assert (prepared.chunk_count, prepared.expected_records_count, prepared.total_items,
                prepared.first_record_id, prepared.decimal_places, prepared.last_progress_at) == (
            3, 1200, 1200, 500, 2, clock.now.replace(microsecond=123000))
        assert jobs.record_preparation(prepared, 9, 9, 9) == prepared

    def test_list_of_stream_shows_file_imports_and_linked_bulk_requests_newest_first(self, jobs):
        jobs.add(job(1, source=JobSource.CSV, data_stream_key="bank"))
        jobs.add(job(2))
        jobs.add(job(3, source=JobSource.CSV, data_stream_key="ledger"))
        jobs.add(job(4))
        jobs.add(job(5, source=JobSource.NACHA, data_stream_key="bank"))
        jobs.link_to_streams(jobs.get(ENV, 2), ["bank", "ledger"])
        jobs.link_to_streams(jobs.get(ENV, 2), ["bank"])  # once per stream
        jobs.link_to_streams(jobs.get(ENV, 4), ["bank"])
        jobs.link_to_streams(job(6), ["bank"])  # a link whose job was never written
        items, cursor = jobs.list_of_stream(ENV, "bank", 2, None)
        assert [j.id for j in items] == [5]  # the missing job 6 takes its place on the page
        items, cursor = jobs.list_of_stream(ENV, "bank", 2, cursor)
        assert [j.id for j in items] == [4, 2]
        items, cursor = jobs.list_of_stream(ENV, "bank", 2, cursor)
        assert ([j.id for j in items], cursor) == ([1], None)
        assert [j.id for j in jobs.list_of_stream(ENV, "ledger", 10, None)[0]] == [3, 2]
        assert jobs.linked_streams(jobs.get(ENV, 2)) == ["bank", "ledger"]
        assert jobs.linked_streams(jobs.get(ENV, 4)) == ["bank"]
        assert jobs.linked_streams(jobs.get(ENV, 1)) == []  # a file import's own stream is on its item
        assert jobs.linked_streams(replace(jobs.get(ENV, 2), environment=OTHER_ENV)) == []
        with pytest.raises(BadRequest):
            jobs.list_of_stream(ENV, "ledger", 2, jobs.list_of_stream(ENV, "bank", 1, None)[1])

    def test_cancellation_is_requested_from_cancellable_statuses_only(self, jobs, clock):
        jobs.add(job(1, total_items=0))
        requested = jobs.request_cancellation(jobs.get(ENV, 1), tuple(CANCELLABLE))
        assert (requested.status, requested.cancellation_requested_at) == (
            JobStatus.PENDING, clock.now.replace(microsecond=123000))
        jobs.move(requested, JobStatus.CANCELLED)
        with pytest.raises(TransitionRefused) as refused:
            jobs.request_cancellation(requested, tuple(CANCELLABLE))
        assert "is cancelled" in refused.value.message
        with pytest.raises(NotFound):
            jobs.request_cancellation(job(9), tuple(CANCELLABLE))

    def test_a_restart_is_claimed_once_per_heartbeat(self, jobs, clock):
        started = processing(jobs, total_items=0)
        assert started.last_progress_at is None
        assert jobs.count_restart(started)
        restarted = jobs.get(ENV, 1)
        assert (restarted.restarts, restarted.last_progress_at) == (1, clock.now.replace(microsecond=123000))
        assert not jobs.count_restart(started)  # restarts moved meanwhile
        clock.advance(minutes=6)
        assert jobs.count_restart(restarted)
        assert not jobs.count_restart(restarted)  # the heartbeat it saw moved
        assert jobs.get(ENV, 1).restarts == 2
        jobs.move(jobs.get(ENV, 1), JobStatus.FAILED)
        assert not jobs.count_restart(jobs.get(ENV, 1))

    def test_a_resume_moves_the_heartbeat_but_not_the_restarts(self, jobs, clock):
        started = processing(jobs)
        assert jobs.count_restart(started, counted=False)
        resumed = jobs.get(ENV, 1)
        assert (resumed.restarts, resumed.last_progress_at) == (0, clock.now.replace(microsecond=123000))
        clock.advance(minutes=6)
        assert not jobs.count_restart(started, counted=False)  # the heartbeat it saw moved
        assert jobs.count_restart(resumed)
        assert jobs.get(ENV, 1).restarts == 1

    def test_a_restart_keeps_how_far_the_job_had_got_and_counts_idle_restarts_until_it_moves(self, jobs, clock):
        # Given a job restarted twice with nothing processed between
        assert jobs.count_restart(processing(jobs, total_items=4))
        clock.advance(minutes=6)
        assert jobs.count_restart(jobs.get(ENV, 1))
        stuck = jobs.get(ENV, 1)
        assert (stuck.restarts, stuck.idle_restarts, stuck.processed_at_restart) == (2, 2, 0)
        # When a chunk is counted, then it is restarted again
        jobs.save_chunk(stuck, ChunkOutcome(0, (ok(0), ok(1)), {"bank": 2}))
        clock.advance(minutes=6)
        assert jobs.count_restart(jobs.get(ENV, 1))
        # Then its idle restarts start again at one, from where it had got
        moved = jobs.get(ENV, 1)
        assert (moved.restarts, moved.idle_restarts, moved.processed_at_restart) == (3, 1, 2)

    def test_aggregates_and_roll_up_marks(self, jobs):
        processing(jobs, total_items=0)
        totals = ImportTotals(StreamTotals(3, 500, 200, "2024-01-01", "2024-01-31", ("EUR", "USD")),
                              {"bank": StreamTotals(2, 500, 0, "2024-01-01", "2024-01-02", ("USD",)),
                               "fees": StreamTotals(1, 0, 200, "2024-01-31", "2024-01-31", ("EUR",))})
        jobs.set_aggregates(jobs.get(ENV, 1), totals)
        jobs.mark_counts_rolled_up(jobs.get(ENV, 1))
        stored = jobs.get(ENV, 1)
        assert (stored.aggregates, stored.counts_rolled_up) == (totals, True)
        done = jobs.move(stored, JobStatus.COMPLETED, aggregates=ImportTotals(StreamTotals(1, 5, 0)))
        assert done.aggregates == ImportTotals(StreamTotals(1, 5, 0))

    def test_an_upload_is_accepted_while_pending_and_later_files_are_kept_once_as_ignored(self, jobs, clock):
        from chalicelib.domain.ingestion import IgnoredUpload

        # Given a pending file import that takes two uploads, then starts
        jobs.add(job(1, source=JobSource.CSV, total_items=0, data_stream_key="bank"))
        jobs.accept_upload(jobs.get(ENV, 1), "a")
        assert jobs.accept_upload(jobs.get(ENV, 1), "b").upload_etag == "b"  # the last while pending
        started = jobs.move(jobs.get(ENV, 1), JobStatus.PROCESSING)
        # When another file comes, its event twice
        assert jobs.accept_upload(started, "c").upload_etag == "b"  # not taken once started
        late = IgnoredUpload.after(JobStatus.PROCESSING, "c", 12, clock.now)
        jobs.note_ignored_upload(started, late)
        kept = jobs.note_ignored_upload(started, late)
        # Then it is kept once, as not imported
        assert kept.ignored_uploads == (replace(late, received_at=clock.now.replace(microsecond=123000)),)
        assert "not imported" in late.message

    def test_the_upload_a_started_import_read_replaces_only_the_etag_it_held(self, jobs):
        jobs.add(job(1, source=JobSource.CSV, total_items=0, data_stream_key="bank"))
        jobs.accept_upload(jobs.get(ENV, 1), "a")
        started = jobs.move(jobs.get(ENV, 1), JobStatus.PROCESSING)
        assert jobs.take_upload_read(started, "b").upload_etag == "b"
        assert jobs.take_upload_read(started, "c").upload_etag == "b"  # read as "a": it changed since
