"""Reconciliation use cases: pair data streams on two sides, change them, delete them."""
from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

from chalicelib.domain.clock import utc_now
from chalicelib.domain.errors import NotFound
from chalicelib.domain.reconciliations import Reconciliation, RunType, check_sides, missing_streams
from chalicelib.observability import logger
from chalicelib.services import audit, period_closes
from chalicelib.services.matches import reconcile_left_behind, unmatch
from chalicelib.services.paging import every
from chalicelib.services.ports import Ports
from chalicelib.services.reconciliation_exceptions import REFRESH_EVERY
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
    partially reconciled are reconciled; its exceptions resolve at the next refresh (within a
    minute: the save requests it). That follow-up is kept on the reconciliation with the save:
    an edit that stopped after it is finished by the next edit, or by the sweeper."""
    current = ports.reconciliations.get(environment, reconciliation_id)
    if current.leaving_stream_keys:  # before any stream can come back
        finish_leaving(ports, current)
    updated = current.changed(utc_now(), name=name, run_type=run_type, side_a=side_a, side_b=side_b,
                              exception_after_days=exception_after_days)
    added = [k for k in updated.stream_keys if not current.uses(k)]
    if added:
        existing = set(ports.data_streams.get_many(environment, added)) | set(current.stream_keys)
        missing_streams(side_a or (), side_b or (), existing)
    period_closes.refuse_dropping_streams(ports, environment, current, updated)
    ports.reconciliations.save(updated, previous=current)
    audit.note_change(current, updated)
    dropped = frozenset(k for k in current.stream_keys if not updated.uses(k))
    finish_leaving(ports, replace(updated, leaving_stream_keys=dropped))
    return updated


# An edit's own follow-up runs within its request; the sweeper takes over one left this long.
LEAVING_LEFT_AFTER = timedelta(minutes=15)


def finish_leaving(ports: Ports, reconciliation: Reconciliation) -> None:
    """The follow-up of the streams an edit took out (`leaving_stream_keys`), each step safe to
    repeat: their adoptions forgotten, the records this reconciliation alone left partially
    reconciled reconciled; then they are no longer leaving. A stream used again (an edit racing
    this one brought it back) is only taken off the list."""
    environment, reconciliation_id = reconciliation.environment, reconciliation.id
    gone = [k for k in sorted(reconciliation.leaving_stream_keys) if not reconciliation.uses(k)]
    ports.claims.forget_adoptions(environment, reconciliation_id, gone)
    reconcile_left_behind(ports, environment, reconciliation_id, gone)
    ports.reconciliations.streams_left(environment, reconciliation_id, reconciliation.leaving_stream_keys)


def sweep_leaving(ports: Ports, now: datetime | None = None) -> dict[str, int]:
    """Finish the follow-up of an edit that stopped after its save (its request died). Looked for
    among the reconciliations due an exceptions refresh (the save requested one, and each is due
    every hour), once the edit is LEAVING_LEFT_AFTER old. One failure stops no other (each is
    logged and counted in `errors`, which fails the sweep step)."""
    now = now or utc_now()
    finished = errors = 0
    for environment, reconciliation_id in ports.reconciliations.due_for_exception_refresh(now - REFRESH_EVERY):
        try:
            reconciliation = ports.reconciliations.get(environment, reconciliation_id)
            if reconciliation.leaving_stream_keys and reconciliation.updated_at <= now - LEAVING_LEFT_AFTER:
                finish_leaving(ports, reconciliation)
                finished += 1
        except NotFound:
            continue
        except Exception:
            errors += 1
            logger.exception("finishing the streams an edit took out failed",
                             extra={"environment": environment, "reconciliation_id": reconciliation_id})
    return {"finished": finished, "errors": errors}


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
    streams = sorted(set(reconciliation.stream_keys) | reconciliation.leaving_stream_keys)  # an edit's unfinished too
    reconcile_left_behind(ports, environment, reconciliation_id, streams)
    ports.claims.forget_adoptions(environment, reconciliation_id, streams)
    ports.reconciliation_rules.remove_all_of_reconciliation(environment, reconciliation_id)
    ports.tallies.remove_all_of_reconciliation(environment, reconciliation_id)
    ports.reconciliations.remove(reconciliation)
