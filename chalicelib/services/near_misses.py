"""Near misses of an exception's records: for each, under each active rule of its reconciliation,
the closest candidate of the other side and the conditions that pair fails (the columnar work
is domain/matching/near_misses.py; a dry run's are in reconciliation_runs.dry_run).

Asked for (GET /v1/reconciliation_exceptions/{id}?near_misses=true), never computed by default:
it reads every open record of the reconciliation, as a dry run does, and is refused past the
same `dry_run_records` limit (an answer saying so, not an error: the rest of the detail stands).
"""
from __future__ import annotations

from typing import Any

from chalicelib.domain.reconciliation_exceptions import ReconciliationException
from chalicelib.services import reconciliation_runs
from chalicelib.services.ports import Ports

EXCEPTION_RECORDS = 20  # the exception's records explained: its newest (highest ids) first


def of_exception(ports: Ports, environment: str, exception: ReconciliationException,
                 limit: int = EXCEPTION_RECORDS) -> dict[str, Any]:
    """The near misses of the exception's `limit` newest records still open (its records open in
    the reconciliation first, then the newest of those; see the module docstring)."""
    from chalicelib.domain.matching.near_misses import records_near_misses

    reconciliation = ports.reconciliations.visible(environment, {exception.reconciliation_id}).get(
        exception.reconciliation_id)
    if reconciliation is None:  # deleted, or being deleted: its exceptions stay readable
        return {"side": "a", "records": 0, "rules": [], "data": [],
                "refused": f"reconciliation {exception.reconciliation_id} no longer exists"}
    side = "a" if exception.data_stream_key in reconciliation.side_a_stream_keys else "b"
    record_ids = sorted((r.record_id for r in ports.exceptions.records(exception)), reverse=True)  # still open: below
    rules = reconciliation_runs.active_rules(ports, environment, reconciliation.id)
    answer: dict[str, Any] = {"side": side, "records": 0, "rules": [], "data": [], "refused": None}
    if not record_ids or not rules:
        return answer
    try:
        side_a, side_b = reconciliation_runs.open_frames(ports, environment, reconciliation, rules, None,
                                                         limit=ports.limits.dry_run_records)
    except reconciliation_runs.TooManyOpenRecords:
        return {**answer, "refused": (f"reconciliation {reconciliation.id} has more than "
                                      f"{ports.limits.dry_run_records:,} open records, more than near misses read "
                                      "within the API's time limit")}
    return {**records_near_misses(side_a, side_b, rules, side, record_ids, limit), "refused": None}
