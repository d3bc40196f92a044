"""Reconciliation use cases: pair data streams on two sides, change them, delete them."""
from __future__ import annotations

from chalicelib.domain.clock import utc_now
from chalicelib.domain.reconciliations import Reconciliation, RunType, check_sides, missing_streams
from chalicelib.observability import logger
from chalicelib.services import audit, period_closes
from chalicelib.services.matches import reconcile_left_behind, unmatch
from chalicelib.services.paging import every
from chalicelib.services.ports import Ports
from chalicelib.services.stories import confirm_unless_in_a_story


def create_reconciliation(ports: Ports, environment: str, *, name: str, run_type: RunType, side_a: list[str],
                          side_b: list[str], exception_after_days: int) -> Reconciliation:
    check_sides(side_a, side_b)
    missing_streams(side_a, side_b, set(ports.data_streams.get_many(environment, side_a + side_b)))
    now = utc_now()
    reconciliation = Reconciliation(
        environment=environment, id=ports.reconciliations.next_id(environment), name=name, run_type=run_type,
        side_a_stream_keys=tuple(side_a), side_b_stream_keys=tuple(side_b),
        exception_after_days=exception_after_days, created_at=now, updated_at=now,
        # Its first run refreshes its exceptions; until then the sweeper leaves it an hour, so
        # records about to be matched are not first held by exceptions and let go again.
        exceptions_refreshed_at=now,
    )
    ports.reconciliations.add(reconciliation)
    return reconciliation


def update_reconciliation(ports: Ports, environment: str, reconciliation_id: int, *, name: str | None = None,
                          run_type: RunType | None = None, side_a: list[str] | None = None,
                          side_b: list[str] | None = None, exception_after_days: int | None = None) -> Reconciliation:
    """Apply a PATCH; refused (409) while a run is current, or when another edit came first. A
    stream it stops using is no longer adopted: should it come back, its first run reads it whole
    again (records may have been reconciled elsewhere meanwhile); its records it alone left
    partially reconciled are reconciled."""
    current = ports.reconciliations.get(environment, reconciliation_id)
    updated = current.changed(utc_now(), name=name, run_type=run_type, side_a=side_a, side_b=side_b,
                              exception_after_days=exception_after_days)
    added = [k for k in updated.stream_keys if not current.uses(k)]
    if added:
        existing = set(ports.data_streams.get_many(environment, added)) | set(current.stream_keys)
        missing_streams(side_a or (), side_b or (), existing)
    period_closes.refuse_dropping_streams(ports, environment, current, updated)
    ports.reconciliations.save(updated, previous=current)
    audit.note_change(current, updated)
    dropped = [k for k in current.stream_keys if not updated.uses(k)]
    ports.claims.forget_adoptions(environment, reconciliation_id, dropped)
    reconcile_left_behind(ports, environment, reconciliation_id, dropped)
    if dropped:  # their exceptions resolve at the next refresh (within a minute, not the hour)
        try:
            ports.reconciliations.request_exceptions_refresh(environment, reconciliation_id)
        except Exception:  # the change is saved: the hourly refresh resolves them
            logger.exception("requesting an exceptions refresh after an edit failed",
                             extra={"reconciliation_id": reconciliation_id})
    return updated


UNMATCH_PAGE = 100


def delete_reconciliation(ports: Ports, environment: str, reconciliation_id: int) -> None:
    """Hide it (refused while a run is current), unmatch its matches (their records no longer
    wait on it), reconcile the records it alone left partially reconciled, remove its rules, then
    it and its stream usages. A crash part-way leaves it hidden; repeating the DELETE finishes the
    work.

    Refused (409) while a story chains it: the stories are read after the mark (a story's save
    holds it before its last check), and the mark is taken back then."""
    period_closes.refuse_deleting_reconciliation(ports, environment, reconciliation_id)
    reconciliation = ports.reconciliations.mark_deleting(environment, reconciliation_id)
    users = ports.stories.users_of_reconciliation(environment, reconciliation_id)
    confirm_unless_in_a_story(ports.reconciliations, environment, reconciliation_id, users,
                              f"reconciliation {reconciliation_id}")
    for match in every(lambda cursor: ports.matches.list_page(environment, reconciliation_id, UNMATCH_PAGE, cursor,
                                                              include_unmatching=True)):
        if match.unmatched_at is None:
            unmatch(ports, environment, match.id)
    reconcile_left_behind(ports, environment, reconciliation_id, reconciliation.stream_keys)
    ports.claims.forget_adoptions(environment, reconciliation_id, reconciliation.stream_keys)
    ports.reconciliation_rules.remove_all_of_reconciliation(environment, reconciliation_id)
    ports.tallies.remove_all_of_reconciliation(environment, reconciliation_id)
    ports.reconciliations.remove(reconciliation)
