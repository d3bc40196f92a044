"""Runs: moves along RUN_STATUSES, the plan and chunks fixed once, restarts, and the
reconciliation's run slot and pending work."""
from __future__ import annotations

from dataclasses import replace

import pytest

from chalicelib.adapters.dynamodb.table import ConditionFailed
from chalicelib.domain.errors import BadRequest, NotFound, TransitionRefused
from chalicelib.domain.runs import RunKind, RunStatus, RunTrigger
from tests.contract.builders import ENV, OTHER_ENV, T0_MS, reconciliation, run

PLAN = {"first_match_id": 100, "matches_count": 40, "chunk_starts": [0, 15, 30], "total_records": 90,
        "rule_summary": {"1": {"matches": 40}}}


def running(runs, run_id: int = 1, reconciliation_id: int = 1):
    runs.add(run(run_id, reconciliation_id))
    return runs.move(runs.get(ENV, run_id), RunStatus.RUNNING)


class TestRunRepository:
    def test_add_then_get_reads_what_add_writes(self, runs):
        added = run(3, 2, kind=RunKind.CONTINUOUS, trigger=RunTrigger.RECORDS_INGESTED, new_record_jobs=(4, 5),
                    whole_pool=True, total_records=8, chunks=2, restarts=1, error_message="x")
        runs.add(added)
        assert runs.get(ENV, 3) == replace(added, created_at=T0_MS, chunks=None, restarts=0, error_message=None)
        with pytest.raises(NotFound):
            runs.get(OTHER_ENV, 3)
        with pytest.raises(ConditionFailed):
            runs.add(run(3))
        assert sorted(runs.get_many(ENV, [3, 4, 3])) == [3]

    def test_list_page_is_newest_first_per_reconciliation(self, runs):
        for run_id, reconciliation_id in ((1, 1), (2, 2), (3, 1), (4, 1)):
            runs.add(run(run_id, reconciliation_id))
        items, cursor = runs.list_page(ENV, 1, 2, None)
        assert [r.id for r in items] == [4, 3]
        items, last = runs.list_page(ENV, 1, 2, cursor)
        assert ([r.id for r in items], last) == ([1], None)
        with pytest.raises(BadRequest):
            runs.list_page(ENV, 2, 2, cursor)

    def test_moves_follow_the_status_table_and_beat_the_heartbeat(self, runs, clock):
        runs.add(run(1))
        started = runs.move(runs.get(ENV, 1), RunStatus.RUNNING, started_at=clock.now)
        now_ms = clock.now.replace(microsecond=123000)
        assert (started.status, started.started_at, started.last_progress_at) == (RunStatus.RUNNING, now_ms, now_ms)
        with pytest.raises(TransitionRefused):  # no move leads back to pending
            runs.move(started, RunStatus.PENDING)
        failed = runs.move(started, RunStatus.FAILED, error_message="boom", completed_at=clock.now)
        assert (failed.error_message, failed.completed_at, failed.finished) == ("boom", now_ms, True)
        with pytest.raises(TransitionRefused):
            runs.move(failed, RunStatus.COMPLETED)
        with pytest.raises(TransitionRefused):
            runs.move(run(9), RunStatus.RUNNING)

    def test_a_cancel_is_asked_only_of_the_statuses_given_and_a_repeat_moves_its_time(self, runs, clock):
        runs.add(run(1))
        answered = (RunStatus.PENDING, RunStatus.RUNNING, RunStatus.CANCELLED)
        asked = runs.request_cancellation(runs.get(ENV, 1), answered)
        now_ms = clock.now.replace(microsecond=123000)
        assert (asked.status, asked.cancellation_requested_at) == (RunStatus.PENDING, now_ms)
        assert runs.get(ENV, 1).cancellation_requested_at == now_ms
        assert not asked.finished and asked.cancel_requested
        ended = runs.end_pending(asked, RunStatus.CANCELLED, completed_at=clock.now)
        assert (ended.status, ended.finished, ended.cancel_requested) == (RunStatus.CANCELLED, True, False)
        assert [r.id for r in runs.active()] == []
        clock.advance(seconds=5)
        again = runs.request_cancellation(ended, answered)
        assert again.cancellation_requested_at > now_ms and again.status is RunStatus.CANCELLED
        runs.add(run(2))
        failed = runs.move(runs.move(runs.get(ENV, 2), RunStatus.RUNNING), RunStatus.FAILED)
        with pytest.raises(TransitionRefused) as refused:
            runs.request_cancellation(failed, answered)
        assert "is failed" in refused.value.message and runs.get(ENV, 2).cancellation_requested_at is None

    def test_only_a_pending_run_is_ended_by_end_pending(self, runs):
        started = running(runs)
        with pytest.raises(TransitionRefused):
            runs.end_pending(started, RunStatus.CANCELLED)
        assert runs.get(ENV, 1).status is RunStatus.RUNNING
        assert runs.move(started, RunStatus.CANCELLED).status is RunStatus.CANCELLED

    def test_the_slot_is_claimed_by_one_run_and_released_by_it(self, runs, reconciliations):
        reconciliations.add(reconciliation(1))
        assert runs.claim_slot(ENV, 1, 10)
        assert runs.claim_slot(ENV, 1, 10)  # the holder again
        assert not runs.claim_slot(ENV, 1, 11)
        runs.release_slot(ENV, 1, 11)  # not the holder: nothing
        assert reconciliations.get(ENV, 1).current_run_id == 10
        runs.release_slot(ENV, 1, 10)
        freed = reconciliations.get(ENV, 1)
        assert (freed.current_run_id, freed.last_run_id) == (None, 10)
        assert runs.claim_slot(ENV, 1, 11)
        assert not runs.claim_slot(ENV, 2, 12)  # no such reconciliation
        assert reconciliations.find_including_deleting(ENV, 2) is None

    def test_releasing_the_slot_gives_the_runs_work_back_once(self, runs, reconciliations):
        reconciliations.add(reconciliation(1))
        runs.claim_slot(ENV, 1, 10)
        runs.add_pending_jobs(ENV, 1, [3])
        assert not runs.release_slot(ENV, 1, 11, jobs=[4], whole_pool=True)  # not the holder: nothing
        assert runs.pending_work(ENV, 1) == ([3], None)
        assert runs.release_slot(ENV, 1, 10, jobs=[4, 5], whole_pool=True)
        assert runs.pending_work(ENV, 1) == ([3, 4, 5], 1)
        assert reconciliations.get(ENV, 1).current_run_id is None
        runs.drop_pending_jobs(ENV, 1, [4, 5])  # a next run took them
        assert not runs.release_slot(ENV, 1, 10, jobs=[4, 5], whole_pool=True)  # a repeated end: given back once
        assert runs.pending_work(ENV, 1) == ([3], 1)
        runs.claim_slot(ENV, 1, 12)
        assert runs.release_slot(ENV, 1, 12)  # nothing to give back
        assert runs.pending_work(ENV, 1) == ([3], 1)

    def test_the_slot_is_taken_over_only_from_its_holder(self, runs, reconciliations):
        reconciliations.add(reconciliation(1))
        runs.claim_slot(ENV, 1, 10)
        assert not runs.take_over_slot(ENV, 1, 9, 11)
        assert runs.take_over_slot(ENV, 1, 10, 11)
        assert reconciliations.get(ENV, 1).current_run_id == 11
        runs.release_slot(ENV, 1, 11)
        assert not runs.take_over_slot(ENV, 1, 11, 12)  # free: claim it instead

    def test_taking_over_the_slot_gives_back_what_its_holder_did_not(self, runs, reconciliations):
        reconciliations.add(reconciliation(1))
        runs.claim_slot(ENV, 1, 10)
        assert not runs.take_over_slot(ENV, 1, 9, 11, jobs=[4], whole_pool=True)
        assert runs.pending_work(ENV, 1) == ([], None)
        assert runs.take_over_slot(ENV, 1, 10, 11, jobs=[4], whole_pool=True)
        assert runs.pending_work(ENV, 1) == ([4], 1)
        assert not runs.release_slot(ENV, 1, 10, jobs=[4], whole_pool=True)  # the holder's own end, late: once
        assert runs.pending_work(ENV, 1) == ([4], 1)

    def test_no_slot_on_a_reconciliation_being_deleted(self, runs, reconciliations):
        reconciliations.add(reconciliation(1))
        reconciliations.mark_deleting(ENV, 1)
        assert not runs.claim_slot(ENV, 1, 10)
        assert reconciliations.find_including_deleting(ENV, 1).current_run_id is None

    def test_pending_work_is_kept_on_the_reconciliation(self, runs, reconciliations):
        reconciliations.add(reconciliation(1))
        assert runs.pending_work(ENV, 1) == ([], None)
        runs.add_pending_jobs(ENV, 1, [7, 3])
        runs.add_pending_jobs(ENV, 1, [5, 3])
        assert runs.pending_jobs(ENV, 1) == [3, 5, 7]
        runs.drop_pending_jobs(ENV, 1, [3, 7, 9])
        assert runs.pending_work(ENV, 1) == ([5], None)
        runs.drop_pending_jobs(ENV, 1, [5])
        assert runs.pending_jobs(ENV, 1) == []
        runs.add_pending_jobs(ENV, 2, [1])  # no such reconciliation: ignored
        assert runs.pending_work(ENV, 2) == ([], None)

    def test_a_whole_pool_request_made_meanwhile_survives_the_drop(self, runs, reconciliations):
        reconciliations.add(reconciliation(1))
        runs.request_whole_pool(ENV, 1)
        seen = runs.pending_work(ENV, 1)[1]
        assert seen == 1
        runs.request_whole_pool(ENV, 1)
        runs.drop_whole_pool_request(ENV, 1, seen)
        assert runs.pending_work(ENV, 1) == ([], 2)
        runs.drop_whole_pool_request(ENV, 1, 2)
        assert runs.pending_work(ENV, 1) == ([], None)
        runs.request_whole_pool(ENV, 2)
        assert runs.pending_work(ENV, 2) == ([], None)

    def test_the_plan_is_fixed_once_while_running(self, runs, clock):
        runs.add(run(1))
        assert runs.save_plan(runs.get(ENV, 1), **PLAN).chunks is None  # pending: not yet
        started = runs.move(runs.get(ENV, 1), RunStatus.RUNNING)
        clock.advance(seconds=3)
        planned = runs.save_plan(started, **PLAN)
        assert (planned.first_match_id, planned.matches_count, planned.chunks, planned.total_records,
                planned.processed_records, planned.rule_summary, planned.last_progress_at, planned.progress) == (
            100, 40, 3, 90, 90, {"1": {"matches": 40}}, clock.now.replace(microsecond=123000), 40.0)
        assert (planned.chunk_starts, planned.chunk_match_ids(0), planned.chunk_match_ids(2)) == (
            (0, 15, 30), range(100, 115), range(130, 140))  # known from the run alone, the plan's files unread
        assert runs.save_plan(started, **{**PLAN, "first_match_id": 500, "chunk_starts": [0, 5]}) == planned
        with pytest.raises(NotFound):
            runs.save_plan(run(9), **PLAN)

    def test_a_chunk_is_counted_once_while_running(self, runs):
        started = running(runs)
        runs.save_plan(started, **PLAN)
        counted = runs.save_chunk(started, 1, 10, 2)
        assert runs.save_chunk(started, 1, 10, 2) == counted
        counted = runs.save_chunk(started, 0, 6, 0)
        assert (counted.done_chunks, counted.matched_records, counted.next_chunk(), counted.progress) == (
            frozenset({0, 1}), 16, 2, 80.0)
        done = runs.move(counted, RunStatus.COMPLETED)
        assert runs.save_chunk(done, 2, 4, 0).matched_records == 16

    def test_discard_and_save_loaded_refuse_the_wrong_status(self, runs):
        runs.add(run(1))
        runs.discard(runs.get(ENV, 1))
        with pytest.raises(NotFound):
            runs.get(ENV, 1)
        with pytest.raises(ConditionFailed):
            runs.discard(run(1))  # gone
        started = running(runs, 2)
        with pytest.raises(ConditionFailed):
            runs.discard(started)
        runs.save_loaded(started, 1234)
        assert runs.get(ENV, 2).total_records == 1234
        runs.add(run(3))
        with pytest.raises(ConditionFailed):
            runs.save_loaded(runs.get(ENV, 3), 5)

    def test_active_runs_of_every_environment_until_finished(self, runs):
        for run_id, environment in ((2, OTHER_ENV), (11, ENV), (3, ENV), (4, ENV)):
            runs.add(run(run_id, environment=environment))
        runs.move(runs.get(ENV, 3), RunStatus.FAILED)
        runs.move(runs.get(ENV, 4), RunStatus.RUNNING)
        assert [(r.environment, r.id) for r in runs.active()] == [(ENV, 4), (ENV, 11), (OTHER_ENV, 2)]

    def test_a_restart_is_claimed_once_per_heartbeat(self, runs, clock):
        runs.add(run(1))
        pending = runs.get(ENV, 1)
        assert runs.count_restart(pending)
        assert not runs.count_restart(pending)
        restarted = runs.get(ENV, 1)
        assert (restarted.restarts, restarted.last_progress_at) == (1, clock.now.replace(microsecond=123000))
        clock.advance(minutes=80)
        assert runs.count_restart(restarted)
        assert runs.get(ENV, 1).restarts == 2
        done = runs.move(running(runs, 2), RunStatus.COMPLETED)
        assert not runs.count_restart(done)

    def test_a_resume_moves_the_heartbeat_but_not_the_restarts(self, runs, clock):
        runs.add(run(1))
        pending = runs.get(ENV, 1)
        assert runs.count_restart(pending, counted=False)
        assert not runs.count_restart(pending, counted=False)  # claimed once: the heartbeat moved
        resumed = runs.get(ENV, 1)
        assert (resumed.restarts, resumed.last_progress_at) == (0, clock.now.replace(microsecond=123000))
        clock.advance(minutes=80)
        assert runs.count_restart(resumed)
        assert runs.get(ENV, 1).restarts == 1
