"""Period closes in DynamoDB: one item per close (the sign-off, what was open at close, a reopen),
listed per reconciliation in gsi1, and one item per reconciliation holding its periods closed now
(`closed_periods`), which every guard reads and every close and reopen writes conditionally on its
version: two closes racing cannot both land overlapping periods.

Without transactions, a close is written in an order a crash leaves harmless: its item first, then
the closed periods (the close is in force, and listed, from that write on); an item the closed
periods never took is an abandoned attempt, shown nowhere. A reopen marks the item first, then takes
the period out of the closed periods; a reopen repeated after a crash between the two finishes it.
"""
from __future__ import annotations

from collections.abc import Iterable
from datetime import date, datetime
from typing import Any

from chalicelib.adapters.dynamodb import keys
from chalicelib.adapters.dynamodb.event_ledger import owes
from chalicelib.adapters.dynamodb.table import ConditionFailed, DynamoTable
from chalicelib.domain.clock import iso, parse_iso, parse_optional_iso
from chalicelib.domain.errors import NotFound
from chalicelib.domain.period_closes import (
    ClosedPeriod,
    ClosedPeriodsChanged,
    CloseStatus,
    OpenException,
    OpenMoney,
    Period,
    PeriodClose,
)

WRITER_PREFIX = "writer_"  # an attribute per writer registered behind the closing fence: its lease's end
HELD_MATCH_PREFIX = "held_match_"  # an attribute per match whose change is under way (`hold_match`)
HELD_CHUNK_PREFIX = "held_run_chunk_"  # one per run chunk whose claims are not all settled: <run>_<chunk>
SWEPT_WRITERS = 50  # expired registrations a close removes at most (its expression stays small; the next sweeps on)


class PeriodCloseRepository:
    def __init__(self, table: DynamoTable) -> None:
        self._table = table

    # The periods in force ---------------------------------------------------------------------------

    def closed_periods(self, environment: str, reconciliation_ids: Iterable[int]) -> dict[int, list[ClosedPeriod]]:
        """The periods closed now of each reconciliation (one BatchGetItem for all; none: an empty list)."""
        ids = sorted(set(reconciliation_ids))
        found: dict[int, list[ClosedPeriod]] = {rid: [] for rid in ids}
        if not ids:
            return found
        for item in self._table.get_many([keys.closed_periods(environment, rid) for rid in ids]):
            rid = int(item["reconciliation_id"])
            found[rid] = _closed_of(rid, item)
        return found

    def closed_version(self, environment: str, reconciliation_id: int) -> tuple[list[ClosedPeriod], int]:
        """The periods closed now and the version they were read at (0: none was ever closed)."""
        item = self._table.get(keys.closed_periods(environment, reconciliation_id))
        if item is None:
            return [], 0
        return _closed_of(reconciliation_id, item), int(item.get("version", 0))

    def set_closed(self, environment: str, reconciliation_id: int, closed: list[ClosedPeriod], version: int,
                   pending_event: str | None = None) -> None:
        """Replace the periods closed now, if still at `version` (ClosedPeriodsChanged otherwise); the
        write carries the mark of the event it owes (services/events.py save_and_emit)."""
        owed, owed_values = owes(pending_event)
        try:
            self._table.update(
                keys.closed_periods(environment, reconciliation_id),
                "SET #entity = :entity, reconciliation_id = :rid, closed = :closed, #version = :next" + owed,
                condition="attribute_not_exists(pk) OR #version = :version",
                names={"#entity": "entity", "#version": "version"},
                values={":entity": "closed_periods", ":rid": reconciliation_id, ":next": version + 1,
                        ":version": version, ":closed": [[c.close_id, c.period.start.isoformat(),
                                                          c.period.end.isoformat()] for c in closed],
                        **owed_values})
        except ConditionFailed:
            raise ClosedPeriodsChanged() from None

    # The closing fence (services/period_closes.py `fencing`) ---------------------------------------

    def enter_fence(self, environment: str, reconciliation_id: int, token: str, expires_at: datetime,
                    stale_before: datetime) -> list[ClosedPeriod] | None:
        """Register a writer (its lease till `expires_at`) and read the periods closed now, in one
        write conditional on no close being under way (a `closing` mark newer than `stale_before`):
        None when one is."""
        try:
            item = self._table.update(
                keys.closed_periods(environment, reconciliation_id),
                "SET #entity = :entity, reconciliation_id = :rid, #version = if_not_exists(#version, :zero), "
                "#writer = :expires",
                condition="attribute_not_exists(closing_since) OR closing_since < :stale",
                names={"#entity": "entity", "#version": "version", "#writer": WRITER_PREFIX + token},
                values={":entity": "closed_periods", ":rid": reconciliation_id, ":zero": 0,
                        ":expires": iso(expires_at), ":stale": iso(stale_before)}, return_new=True)
        except ConditionFailed:
            return None
        return _closed_of(reconciliation_id, item)

    def fence_up(self, environment: str, reconciliation_id: int, stale_before: datetime) -> bool:
        """Whether a close is under way (what `enter_fence` would refuse), by a consistent read: what
        a writer waiting at the fence polls, instead of failing conditional writes on the item."""
        item = self._table.get(keys.closed_periods(environment, reconciliation_id)) or {}
        return item.get("closing_since") is not None and str(item["closing_since"]) >= iso(stale_before)

    def leave_fence(self, environment: str, reconciliation_id: int, token: str) -> None:
        self._table.update(keys.closed_periods(environment, reconciliation_id), "REMOVE #writer",
                           names={"#writer": WRITER_PREFIX + token})

    def mark_closing(self, environment: str, reconciliation_id: int, close_id: int, version: int,
                     now: datetime) -> None:
        """Put the fence up (if the closed periods are still at `version`: ClosedPeriodsChanged
        otherwise): from this write on, no writer registers until the close lands or gives up.

        The same write removes the registrations whose lease ended before `now` (requests killed
        mid-way never left: every close would otherwise carry them), each on the condition that its
        lease is still over (or it is gone): a writer that renewed its lease meanwhile keeps it, and
        the fence goes up without that sweep (the next close sweeps)."""
        key = keys.closed_periods(environment, reconciliation_id)
        expired = sorted(name for name, value in (self._table.get(key) or {}).items()
                         if name.startswith(WRITER_PREFIX) and str(value) <= iso(now))[:SWEPT_WRITERS]
        try:
            self._mark_closing(key, reconciliation_id, close_id, version, now, expired)
            return
        except ConditionFailed:
            if not expired:
                raise ClosedPeriodsChanged() from None
        try:  # a swept writer renewed its lease, or the version moved: which one, the plain mark tells
            self._mark_closing(key, reconciliation_id, close_id, version, now, [])
        except ConditionFailed:
            raise ClosedPeriodsChanged() from None

    def _mark_closing(self, key: dict[str, str], reconciliation_id: int, close_id: int, version: int, now: datetime,
                      expired: list[str]) -> None:
        swept = {f"#w{i}": name for i, name in enumerate(expired)}
        self._table.update(
            key,
            "SET #entity = :entity, reconciliation_id = :rid, #version = if_not_exists(#version, :zero), "
            "closing_since = :now, closing_close = :close" + (" REMOVE " + ", ".join(swept) if swept else ""),
            condition="(attribute_not_exists(pk) OR #version = :version)" + "".join(
                f" AND (attribute_not_exists({w}) OR {w} <= :now)" for w in swept),
            names={"#entity": "entity", "#version": "version", **swept},
            values={":entity": "closed_periods", ":rid": reconciliation_id, ":zero": 0, ":now": iso(now),
                    ":close": close_id, ":version": version})

    def clear_closing(self, environment: str, reconciliation_id: int, close_id: int) -> None:
        """Take the fence down, if this close's."""
        try:
            self._table.update(keys.closed_periods(environment, reconciliation_id),
                               "REMOVE closing_since, closing_close", condition="closing_close = :close",
                               values={":close": close_id})
        except ConditionFailed:
            pass

    def live_writers(self, environment: str, reconciliation_id: int, now: datetime) -> int:
        """The writers registered and not yet gone whose lease runs (one strongly consistent read)."""
        item = self._table.get(keys.closed_periods(environment, reconciliation_id)) or {}
        return sum(1 for name, value in item.items() if name.startswith(WRITER_PREFIX) and str(value) > iso(now))

    def hold_match(self, environment: str, reconciliation_id: int, match_id: int, since: datetime) -> None:
        """Note a change of the match under way (no condition: its writer registered behind the fence
        before, so a close under way waits for it or gives up)."""
        self._hold(environment, reconciliation_id, f"{HELD_MATCH_PREFIX}{match_id}", since)

    def let_go_match(self, environment: str, reconciliation_id: int, match_id: int) -> None:
        self._let_go(environment, reconciliation_id, f"{HELD_MATCH_PREFIX}{match_id}")

    def held_matches(self, environment: str, reconciliation_id: int) -> list[int]:
        """The matches whose change is noted under way (one strongly consistent read)."""
        return sorted(int(held) for held in self._held(environment, reconciliation_id, HELD_MATCH_PREFIX))

    def hold_run_chunk(self, environment: str, reconciliation_id: int, run_id: int, chunk: int,
                       since: datetime) -> None:
        """Note a run's chunk about to claim records, as `hold_match` does a match."""
        self._hold(environment, reconciliation_id, f"{HELD_CHUNK_PREFIX}{run_id}_{chunk}", since)

    def let_go_run_chunk(self, environment: str, reconciliation_id: int, run_id: int, chunk: int) -> None:
        self._let_go(environment, reconciliation_id, f"{HELD_CHUNK_PREFIX}{run_id}_{chunk}")

    def held_run_chunks(self, environment: str, reconciliation_id: int) -> list[tuple[int, int]]:
        """The (run, chunk) pairs noted under way (one strongly consistent read)."""
        pairs = (held.split("_") for held in self._held(environment, reconciliation_id, HELD_CHUNK_PREFIX))
        return sorted((int(run_id), int(chunk)) for run_id, chunk in pairs)

    def _hold(self, environment: str, reconciliation_id: int, attribute: str, since: datetime) -> None:
        self._table.update(
            keys.closed_periods(environment, reconciliation_id),
            "SET #entity = :entity, reconciliation_id = :rid, #version = if_not_exists(#version, :zero), "
            "#held = :since",
            names={"#entity": "entity", "#version": "version", "#held": attribute},
            values={":entity": "closed_periods", ":rid": reconciliation_id, ":zero": 0, ":since": iso(since)})

    def _let_go(self, environment: str, reconciliation_id: int, attribute: str) -> None:
        self._table.update(keys.closed_periods(environment, reconciliation_id), "REMOVE #held",
                           names={"#held": attribute})

    def _held(self, environment: str, reconciliation_id: int, prefix: str) -> list[str]:
        """What follows `prefix` in the names of the fence item's attributes that start with it."""
        item = self._table.get(keys.closed_periods(environment, reconciliation_id)) or {}
        return [name.removeprefix(prefix) for name in item if name.startswith(prefix)]

    # The closes -------------------------------------------------------------------------------------

    def add(self, close: PeriodClose) -> None:
        self._table.put_new(_to_item(close))

    def remove(self, close: PeriodClose) -> None:
        """An attempt the closed periods refused (a close raced it): its item goes."""
        self._table.delete(keys.period_close(close.environment, close.id))

    def find(self, environment: str, close_id: int) -> PeriodClose | None:
        item = self._table.get(keys.period_close(environment, close_id))
        return _from_item(item) if item else None

    def get(self, environment: str, close_id: int) -> PeriodClose:
        found = self.find(environment, close_id)
        if found is None:
            raise NotFound(f"period close {close_id} not found")
        return found

    def of_reconciliation(self, environment: str, reconciliation_id: int) -> list[PeriodClose]:
        """Every close item of the reconciliation, newest first (a few a year: one read)."""
        listing = keys.period_closes_of_reconciliation_pk(environment, reconciliation_id)
        items = self._table.query_all(keys.GSI1, listing)
        return sorted((_from_item(i) for i in items), key=lambda c: -c.id)

    def mark_reopened(self, close: PeriodClose) -> PeriodClose:
        """The reopen's reason, who and when, on the item (once: a repeat keeps the first)."""
        assert close.reopened_at is not None and close.reopened_by is not None and close.reopen_reason is not None
        try:
            item = self._table.update(
                keys.period_close(close.environment, close.id),
                "SET #status = :reopened, reopened_by = :by, reopened_at = :at, reopen_reason = :reason",
                condition="attribute_exists(pk) AND #status = :closed", names={"#status": "status"},
                values={":reopened": CloseStatus.REOPENED.value, ":closed": CloseStatus.CLOSED.value,
                        ":by": close.reopened_by, ":at": iso(close.reopened_at), ":reason": close.reopen_reason},
                return_new=True)
            return _from_item(item)
        except ConditionFailed:
            return self.get(close.environment, close.id)


def _closed_of(reconciliation_id: int, item: dict[str, Any]) -> list[ClosedPeriod]:
    return [ClosedPeriod(int(close_id), reconciliation_id, Period(date.fromisoformat(start), date.fromisoformat(end)))
            for close_id, start, end in item.get("closed") or ()]


def _money(m: OpenMoney) -> list[Any]:
    return [m.currency, m.decimal_places, m.count, m.credits, m.debits]


def _money_of(row: list[Any]) -> OpenMoney:
    return OpenMoney(str(row[0]), int(row[1]), int(row[2]), int(row[3]), int(row[4]))


def _to_item(close: PeriodClose) -> dict[str, Any]:
    return {
        **keys.period_close(close.environment, close.id),
        **keys.period_close_index(close.environment, close.reconciliation_id, close.id),
        "entity": "period_close", "environment": close.environment, "id": close.id,
        "reconciliation_id": close.reconciliation_id, "period_start": close.period.start.isoformat(),
        "period_end": close.period.end.isoformat(), "status": close.status.value, "note": close.note,
        "closed_by": close.closed_by, "closed_at": iso(close.closed_at),
        "unmatched": [_money(m) for m in close.unmatched],
        "open_exceptions": [{"id": e.id, "status": e.status, "title": e.title, "data_stream_key": e.data_stream_key,
                             "record_count": e.record_count, "money": [_money(m) for m in e.money],
                             "explanation": e.explanation, "explained_by": e.explained_by}
                            for e in close.open_exceptions],
    }


def _from_item(item: dict[str, Any]) -> PeriodClose:
    return PeriodClose(
        environment=item["environment"], id=int(item["id"]), reconciliation_id=int(item["reconciliation_id"]),
        period=Period(date.fromisoformat(item["period_start"]), date.fromisoformat(item["period_end"])),
        status=CloseStatus(item["status"]), note=item["note"], closed_by=item["closed_by"],
        closed_at=parse_iso(item["closed_at"]),
        unmatched=tuple(_money_of(r) for r in item.get("unmatched") or ()),
        open_exceptions=tuple(OpenException(
            id=int(e["id"]), status=e["status"], title=e["title"], data_stream_key=e["data_stream_key"],
            record_count=int(e["record_count"]), money=tuple(_money_of(r) for r in e.get("money") or ()),
            explanation=e["explanation"], explained_by=e["explained_by"]) for e in item.get("open_exceptions") or ()),
        reopened_by=item.get("reopened_by"), reopened_at=parse_optional_iso(item.get("reopened_at")),
        reopen_reason=item.get("reopen_reason"))
