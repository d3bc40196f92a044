"""Reconciliations (stream usages, edits refused while a run holds the slot, exception refresh
marks) and their rules (priorities unique per reconciliation)."""
from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from chalicelib.adapters.dynamodb.table import ConditionFailed
from chalicelib.domain.errors import BadRequest, Conflict, NotFound
from chalicelib.domain.reconciliations import ReconciliationRunning, RunType, StreamUser
from chalicelib.domain.rules import RuleSource, RuleStatus
from tests.contract.builders import ENV, OTHER_ENV, T0, T0_MS, reconciliation, rule


def edited(previous, clock, **changes):
    return previous.changed(clock.now, **changes)


class TestReconciliationRepository:
    def test_add_then_get_reads_what_was_stored(self, reconciliations):
        added = reconciliation(3, side_a=("bank", "card"), side_b=("ledger",), current_run_id=None,
                               exceptions_refresh_requests=4, deleting=True)
        reconciliations.add(added)
        assert reconciliations.get(ENV, 3) == replace(added, created_at=T0_MS, updated_at=T0_MS,
                                                       exceptions_refresh_requests=0, deleting=False)
        assert reconciliations.find_including_deleting(ENV, 4) is None
        with pytest.raises(NotFound):
            reconciliations.get(OTHER_ENV, 3)
        with pytest.raises(ConditionFailed):
            reconciliations.add(reconciliation(3))
        assert reconciliations.next_id(ENV) == 1

    def test_list_page_is_newest_first_and_leaves_out_those_being_deleted(self, reconciliations):
        for reconciliation_id in (1, 2, 3, 4):
            reconciliations.add(reconciliation(reconciliation_id))
        reconciliations.mark_deleting(ENV, 3)
        items, cursor = reconciliations.list_page(ENV, 2, None)
        assert [r.id for r in items] == [4, 2]
        items, cursor2 = reconciliations.list_page(ENV, 2, cursor)
        assert ([r.id for r in items], cursor2) == ([1], None)
        with pytest.raises(BadRequest):
            reconciliations.list_page(OTHER_ENV, 2, cursor)

    def test_names_and_visible_leave_out_missing_and_deleting(self, reconciliations):
        for reconciliation_id in (1, 2, 3):
            reconciliations.add(reconciliation(reconciliation_id))
        reconciliations.mark_deleting(ENV, 2)
        assert reconciliations.names(ENV, [1, 2, 3, 9]) == {1: "Reconciliation 1", 3: "Reconciliation 3"}
        assert sorted(reconciliations.visible(ENV, [3, 2])) == [3]

    def test_save_needs_the_next_version(self, reconciliations, clock):
        reconciliations.add(reconciliation(1))
        previous = reconciliations.get(ENV, 1)
        updated = edited(previous, clock, name="Renamed", run_type=RunType.CONTINUOUS, side_b=["ledger", "fees"],
                         exception_after_days=9)
        reconciliations.save(updated, previous)
        stored = reconciliations.get(ENV, 1)
        assert (stored.name, stored.run_type, stored.side_b_stream_keys, stored.exception_after_days,
                stored.version, stored.updated_at, stored.created_at) == (
            "Renamed", RunType.CONTINUOUS, ("ledger", "fees"), 9, 2, clock.now.replace(microsecond=123000), T0_MS)
        with pytest.raises(Conflict) as refused:
            reconciliations.save(updated, previous)  # version 2 again
        assert type(refused.value) is Conflict
        with pytest.raises(NotFound):
            reconciliations.save(reconciliation(8, version=2), reconciliation(8))

    def test_no_edit_nor_delete_while_a_run_holds_the_slot(self, reconciliations, runs, clock):
        reconciliations.add(reconciliation(1))
        assert runs.claim_slot(ENV, 1, 50)
        previous = reconciliations.get(ENV, 1)
        with pytest.raises(ReconciliationRunning):
            reconciliations.save(edited(previous, clock, name="New"), previous)
        with pytest.raises(ReconciliationRunning):
            reconciliations.mark_deleting(ENV, 1)
        runs.release_slot(ENV, 1, 50)
        deleting = reconciliations.mark_deleting(ENV, 1)
        assert (deleting.deleting, deleting.last_run_id, deleting.current_run_id) == (True, 50, None)
        assert reconciliations.mark_deleting(ENV, 1).deleting  # repeating it is allowed
        with pytest.raises(NotFound):
            reconciliations.get(ENV, 1)
        with pytest.raises(NotFound):
            reconciliations.save(edited(deleting, clock, name="Late"), deleting)
        with pytest.raises(NotFound):
            reconciliations.mark_deleting(ENV, 2)

    def test_usages_follow_the_sides(self, reconciliations, clock):
        reconciliations.add(reconciliation(1, side_a=("bank",), side_b=("ledger",)))
        reconciliations.add(reconciliation(2, side_a=("card",), side_b=("ledger",)))
        assert reconciliations.users_of_stream(ENV, "ledger") == [
            StreamUser(1, "Reconciliation 1"), StreamUser(2, "Reconciliation 2")]
        previous = reconciliations.get(ENV, 1)
        reconciliations.save(edited(previous, clock, side_b=["fees"]), previous)
        assert reconciliations.users_of_stream(ENV, "ledger") == [StreamUser(2, "Reconciliation 2")]
        assert reconciliations.users_of_stream(ENV, "fees") == [StreamUser(1, "Reconciliation 1")]
        assert reconciliations.users_of_stream(ENV, "NOT A KEY") == []
        assert reconciliations.users_of_stream(OTHER_ENV, "fees") == []

    def test_streams_taken_out_are_leaving_until_said_left_and_ask_a_refresh(self, reconciliations, clock):
        reconciliations.add(reconciliation(1, side_a=("bank", "card"), side_b=("ledger",)))
        previous = reconciliations.get(ENV, 1)
        reconciliations.save(edited(previous, clock, name="Renamed"), previous)
        renamed = reconciliations.get(ENV, 1)
        assert (renamed.leaving_stream_keys, renamed.exceptions_refresh_requests) == (frozenset(), 0)

        reconciliations.save(edited(renamed, clock, side_a=["card"], side_b=["fees"]), renamed)
        edited_once = reconciliations.get(ENV, 1)
        assert edited_once.leaving_stream_keys == {"bank", "ledger"}
        assert edited_once.exceptions_refresh_pending and edited_once.exceptions_refresh_requests == 1
        reconciliations.save(edited(edited_once, clock, side_a=["fees2"], side_b=["fees"]), edited_once)
        assert reconciliations.get(ENV, 1).leaving_stream_keys == {"bank", "ledger", "card"}

        reconciliations.streams_left(ENV, 1, ["bank", "card"])
        reconciliations.streams_left(ENV, 1, ["bank"])  # said again
        reconciliations.streams_left(ENV, 1, [])
        reconciliations.streams_left(ENV, 9, ["bank"])  # gone: nothing to say
        assert reconciliations.get(ENV, 1).leaving_stream_keys == {"ledger"}
        reconciliations.streams_left(ENV, 1, ["ledger"])
        assert reconciliations.get(ENV, 1).leaving_stream_keys == frozenset()

    def test_a_usage_left_by_a_refused_edit_holds_its_stream_until_stale(self, reconciliations, runs, clock):
        reconciliations.add(reconciliation(1))
        runs.claim_slot(ENV, 1, 7)
        previous = reconciliations.get(ENV, 1)
        with pytest.raises(ReconciliationRunning):
            reconciliations.save(edited(previous, clock, side_b=["fees"]), previous)
        assert reconciliations.users_of_stream(ENV, "fees") == [StreamUser(1, "Reconciliation 1")]
        clock.advance(minutes=2, seconds=1)
        assert reconciliations.users_of_stream(ENV, "fees") == []
        assert reconciliations.users_of_stream(ENV, "ledger") == [StreamUser(1, "Reconciliation 1")]

    def test_a_reconciliation_being_deleted_or_removed_holds_nothing(self, reconciliations):
        reconciliations.add(reconciliation(1))
        reconciliations.add(reconciliation(2, side_a=("card",)))
        reconciliations.mark_deleting(ENV, 1)
        assert reconciliations.users_of_stream(ENV, "bank") == []
        reconciliations.remove(reconciliations.find_including_deleting(ENV, 1))
        assert reconciliations.find_including_deleting(ENV, 1) is None
        assert reconciliations.users_of_stream(ENV, "ledger") == [StreamUser(2, "Reconciliation 2")]
        reconciliations.remove_usages_of_stream(ENV, "ledger")
        assert reconciliations.users_of_stream(ENV, "ledger") == []
        assert reconciliations.users_of_stream(ENV, "card") == [StreamUser(2, "Reconciliation 2")]

    def test_the_usages_of_a_stream_are_read_consistently(self, backend, reconciliations):
        """A stream delete marks first and reads the usages after: a usage written a moment before
        the mark must be seen, so the query of the stream's usages is a consistent read."""
        if backend.name == "fake":
            pytest.skip("the fake reads what was written a moment ago: only the adapter's query to check")
        from chalicelib.adapters.dynamodb import keys
        reconciliations.add(reconciliation(1))
        partition = keys.data_stream(ENV, "ledger")["pk"]
        queries = []

        def note(params, **_):
            if params["ExpressionAttributeValues"][":p"] == {"S": partition}:
                queries.append(params.get("ConsistentRead", False))
        events = backend.reconciliations._table._client.meta.events
        events.register("provide-client-params.dynamodb.Query", note)
        try:
            assert reconciliations.users_of_stream(ENV, "ledger") == [StreamUser(1, "Reconciliation 1")]
            reconciliations.remove_usages_of_stream(ENV, "ledger")
        finally:
            events.unregister("provide-client-params.dynamodb.Query", note)
        assert queries == [True, True]

    def test_due_for_exception_refresh_across_environments(self, reconciliations):
        reconciliations.add(reconciliation(2, environment=OTHER_ENV))
        reconciliations.add(reconciliation(10))
        reconciliations.add(reconciliation(9, exceptions_refreshed_at=T0))
        reconciliations.add(reconciliation(3))
        reconciliations.mark_deleting(ENV, 3)
        assert reconciliations.due_for_exception_refresh(T0_MS) == [(ENV, 10), (OTHER_ENV, 2)]
        # Stored to the millisecond, a refresh at T0 reads as before T0 itself.
        assert reconciliations.due_for_exception_refresh(T0) == [(ENV, 9), (ENV, 10), (OTHER_ENV, 2)]
        reconciliations.mark_exceptions_refreshed(ENV, 10, T0 + timedelta(minutes=1))
        assert reconciliations.get(ENV, 10).exceptions_refreshed_at == T0_MS + timedelta(minutes=1)
        assert reconciliations.due_for_exception_refresh(T0 + timedelta(seconds=1)) == [(ENV, 9), (OTHER_ENV, 2)]

    def test_a_refresh_request_stays_until_a_refresh_that_saw_it(self, reconciliations):
        reconciliations.add(reconciliation(1, exceptions_refreshed_at=T0))
        reconciliations.request_exceptions_refresh(ENV, 1)
        requested = reconciliations.get(ENV, 1)
        assert (requested.exceptions_refreshed_at, requested.exceptions_refresh_requests) == (None, 1)
        assert requested.exceptions_refresh_pending
        reconciliations.mark_exceptions_refreshed(ENV, 1, T0, seen_requests=0)  # read before the request
        assert reconciliations.get(ENV, 1).exceptions_refresh_pending
        reconciliations.request_exceptions_refresh(ENV, 1)
        reconciliations.mark_exceptions_refreshed(ENV, 1, T0, seen_requests=2)
        marked = reconciliations.get(ENV, 1)
        assert (marked.exceptions_refreshed_at, marked.exceptions_refresh_requests) == (T0_MS, 2)
        reconciliations.request_exceptions_refresh(ENV, 5)  # missing: ignored
        reconciliations.mark_exceptions_refreshed(ENV, 5, T0)
        assert reconciliations.find_including_deleting(ENV, 5) is None

    def test_never_requested_any_seen_count_marks(self, reconciliations):
        reconciliations.add(reconciliation(1))
        reconciliations.mark_exceptions_refreshed(ENV, 1, T0, seen_requests=3)
        assert reconciliations.get(ENV, 1).exceptions_refreshed_at == T0_MS


class TestReconciliationRuleRepository:
    def test_add_then_get_reads_the_definition_back(self, rules):
        added = rule(5, priority=20, reconciliation_id=2)
        rules.add(added)
        stored = rules.get(ENV, 5)
        assert stored == replace(added, created_at=T0_MS, updated_at=T0_MS)
        assert stored.definition.conditions[0].tolerance_basis_points == 50
        with pytest.raises(NotFound):
            rules.get(ENV, 6)
        assert rules.next_id(ENV) == 1

    def test_list_of_is_by_priority(self, rules):
        for rule_id, priority in ((1, 30), (2, 10), (3, 20)):
            rules.add(rule(rule_id, priority))
        rules.add(rule(4, 5, reconciliation_id=2))
        rules.add(rule(5, 1, environment=OTHER_ENV))
        assert [r.id for r in rules.list_of(ENV, 1)] == [2, 3, 1]
        assert rules.list_of(ENV, 3) == []

    def test_a_priority_is_taken_once_per_reconciliation(self, rules):
        rules.add(rule(1, 10))
        with pytest.raises(Conflict):
            rules.add(rule(2, 10))
        rules.add(rule(3, 10, reconciliation_id=2))
        rules.add(rule(4, 10, environment=OTHER_ENV))
        with pytest.raises(NotFound):
            rules.get(ENV, 2)

    def test_save_moves_the_priority(self, rules, clock):
        rules.add(rule(1, 10))
        rules.add(rule(2, 20))
        previous = rules.get(ENV, 1)
        moved = previous.with_definition(previous.definition.patched({"priority": 15}), clock.now)
        rules.save(moved, previous)
        assert [(r.id, r.definition.priority, r.version) for r in rules.list_of(ENV, 1)] == [(1, 15, 2), (2, 20, 1)]
        rules.add(rule(3, 10))  # the old priority is free
        with pytest.raises(Conflict):
            rules.add(rule(4, 15))
        second = rules.get(ENV, 2)
        with pytest.raises(Conflict):
            rules.save(second.with_definition(second.definition.patched({"priority": 15}), clock.now), second)
        assert rules.get(ENV, 2).definition.priority == 20

    def test_a_stale_save_is_refused_and_frees_the_priority_it_claimed(self, rules, clock):
        rules.add(rule(1, 10))
        previous = rules.get(ENV, 1)
        rules.save(previous.with_definition(previous.definition.patched({"name": "Renamed"}), clock.now), previous)
        with pytest.raises(Conflict) as refused:
            rules.save(previous.with_definition(previous.definition.patched({"priority": 30}), clock.now), previous)
        assert type(refused.value) is Conflict
        rules.add(rule(2, 30))  # the refused save did not keep 30
        with pytest.raises(NotFound):
            rules.save(rule(9, 40, version=2), rule(9, 50))
        rules.add(rule(3, 40))

    def test_remove_frees_the_priority(self, rules):
        rules.add(rule(1, 10))
        rules.remove(rules.get(ENV, 1))
        with pytest.raises(NotFound):
            rules.remove(rule(1, 10))
        rules.add(rule(2, 10))
        assert [r.id for r in rules.list_of(ENV, 1)] == [2]

    def test_remove_all_of_reconciliation(self, rules):
        rules.add(rule(1, 10))
        rules.add(rule(2, 20))
        rules.add(rule(3, 10, reconciliation_id=2))
        rules.remove_all_of_reconciliation(ENV, 1)
        assert rules.list_of(ENV, 1) == []
        assert [r.id for r in rules.list_of(ENV, 2)] == [3]
        rules.add(rule(4, 10))
        rules.add(rule(5, 20))

    def test_a_priority_whose_rule_is_gone_is_reclaimed_once_stale(self, rules, clock):
        rules.add(rule(1, 10))
        rules.remove(rule(1, 99))  # a copy at another priority: the rule goes, its guard of 10 stays
        with pytest.raises(Conflict):
            rules.add(rule(2, 10))
        clock.advance(seconds=61)
        rules.add(rule(2, 10))
        assert [r.id for r in rules.list_of(ENV, 1)] == [2]

    def test_adding_the_same_rule_twice_keeps_the_first(self, rules):
        rules.add(rule(1, 10))
        with pytest.raises(ConditionFailed):
            rules.add(rule(1, 10, created_at=T0 + timedelta(days=1)))
        assert rules.get(ENV, 1).created_at == T0_MS

    def test_a_suggestion_holds_no_priority_until_accepted_and_keeps_its_evidence(self, rules, clock):
        rules.add(rule(1, 10))
        proposed = replace(rule(2, 10), source=RuleSource.LEARNED, proposal=RuleStatus.PROPOSED,
                           evidence={"rank": 1, "decisions_explained": 30})
        rules.add(proposed)  # beside rule 1's priority: a suggestion reserves none
        stored = rules.get(ENV, 2)
        assert (stored.status, stored.source, stored.evidence) == (
            RuleStatus.PROPOSED, RuleSource.LEARNED, {"rank": 1, "decisions_explained": 30})
        assert rules.get(ENV, 1).status is RuleStatus.ACTIVE and rules.get(ENV, 1).evidence is None
        with pytest.raises(Conflict):  # accepting at a taken priority is refused, and changes nothing
            rules.save(replace(stored.with_definition(stored.definition, clock.now), proposal=None), stored)
        assert rules.get(ENV, 2).status is RuleStatus.PROPOSED
        moved = stored.definition.patched({"priority": 20})
        rules.save(replace(stored.with_definition(moved, clock.now), proposal=None), stored)
        assert rules.get(ENV, 2).status is RuleStatus.ACTIVE
        with pytest.raises(Conflict):
            rules.add(rule(3, 20))  # the accepted rule holds 20 now
        rules.add(replace(rule(4, 20), proposal=RuleStatus.DISMISSED))
        rules.remove(rules.get(ENV, 4))  # a suggestion's removal frees nothing it did not hold
        with pytest.raises(Conflict):
            rules.add(rule(5, 20))

