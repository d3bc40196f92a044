"""Investigations: moves along INVESTIGATION_STATUSES, listed per exception, accepted once."""
from __future__ import annotations

from dataclasses import replace

import pytest

from chalicelib.adapters.dynamodb.table import ConditionFailed
from chalicelib.domain.errors import NotFound, TransitionRefused
from chalicelib.domain.investigations.investigation import InvestigationStatus
from tests.contract.builders import ENV, OTHER_ENV, T0_MS, investigation


class TestInvestigationRepository:
    def test_add_then_get_reads_what_add_writes(self, investigations):
        added = investigation(4, exception_id=9, filter_params={"days": 5}, candidate_records_searched=3,
                              accepted_match_id=8, confidence_score=0.5)
        investigations.add(added)
        assert investigations.get(ENV, 4) == replace(added, created_at=T0_MS, candidate_records_searched=0,
                                                     accepted_match_id=None, confidence_score=None)
        with pytest.raises(NotFound):
            investigations.get(OTHER_ENV, 4)
        with pytest.raises(ConditionFailed):
            investigations.add(investigation(4))

    def test_of_exception_is_its_newest_first(self, investigations):
        for investigation_id, exception_id in ((1, 7), (2, 8), (3, 7), (4, 7)):
            investigations.add(investigation(investigation_id, exception_id))
        investigations.add(investigation(5, 7, environment=OTHER_ENV))
        assert [i.id for i in investigations.of_exception(ENV, 7, 2)] == [4, 3]
        assert [i.id for i in investigations.of_exception(ENV, 7, 10)] == [4, 3, 1]
        assert investigations.of_exception(ENV, 9, 10) == []

    def test_moves_follow_the_status_table(self, investigations, clock):
        investigations.add(investigation(1))
        started = investigations.move(investigations.get(ENV, 1), InvestigationStatus.RUNNING)
        assert started.status is InvestigationStatus.RUNNING
        done = investigations.move(
            started, InvestigationStatus.COMPLETED, completed_at=clock.now, candidate_records_searched=120,
            suggested_record_ids=[31, 30], target_record_ids=[5], suggested_difference=-20, confidence_score=0.875,
            recommendation_text="Match 5 with 30 and 31")
        assert done == replace(started, status=InvestigationStatus.COMPLETED,
                               completed_at=clock.now.replace(microsecond=123000), candidate_records_searched=120,
                               suggested_record_ids=(31, 30), target_record_ids=(5,), suggested_difference=-20,
                               confidence_score=0.875, recommendation_text="Match 5 with 30 and 31")
        assert investigations.get(ENV, 1) == done
        with pytest.raises(TransitionRefused):
            investigations.move(done, InvestigationStatus.FAILED)
        with pytest.raises(TransitionRefused):
            investigations.move(investigation(2), InvestigationStatus.RUNNING)

    def test_a_pending_investigation_may_fail_but_not_complete(self, investigations):
        investigations.add(investigation(1))
        with pytest.raises(TransitionRefused):
            investigations.move(investigations.get(ENV, 1), InvestigationStatus.COMPLETED)
        failed = investigations.move(investigations.get(ENV, 1), InvestigationStatus.FAILED, error_message="x")
        assert (failed.status, failed.error_message, failed.finished) == (InvestigationStatus.FAILED, "x", True)

    def test_active_until_finished(self, investigations):
        for investigation_id, environment in ((2, OTHER_ENV), (10, ENV), (3, ENV)):
            investigations.add(investigation(investigation_id, environment=environment))
        investigations.move(investigations.get(ENV, 3), InvestigationStatus.RUNNING)
        investigations.move(investigations.get(ENV, 10), InvestigationStatus.FAILED)
        assert [(i.environment, i.id, i.status) for i in investigations.active()] == [
            (ENV, 3, InvestigationStatus.RUNNING), (OTHER_ENV, 2, InvestigationStatus.PENDING)]

    def test_an_investigation_is_accepted_once(self, investigations):
        investigations.add(investigation(1))
        investigations.mark_accepted(investigations.get(ENV, 1), 55)
        with pytest.raises(TransitionRefused):
            investigations.mark_accepted(investigations.get(ENV, 1), 56)
        assert investigations.get(ENV, 1).accepted_match_id == 55
