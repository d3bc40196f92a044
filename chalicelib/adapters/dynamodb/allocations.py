"""Partial payments on the record items: the shares of a record that matches of a reconciliation hold
(domain/allocation.py), taken and given back by conditional writes.

A record matched in parts in reconciliation R keeps two attributes beside `match_<R>`:
- `share_<R>`, a map from match id (as text) to the share of the record's amount that match holds;
- `allocated_<R>`, their total: the version a writer conditions on. Two matches taking a share at
  once both read the same total; the first write changes it and the second fails and reads again,
  so the shares never add up to more than the record's amount (tests/integration/test_partial_payments.py
  races them on threads).
While the shares leave something over, the record stays open in R (no `match_<R>`, not in
`matched_in`, its status and open-index entry unchanged). The share that covers the rest claims it as
a whole match does (ClaimRepository.claim_record): `match_<R>` names that last match, `matched_in` gains R,
the status moves. Giving a share back (unmatch, a rejected proposal, an undone write) removes it and
lowers the total; a record that was covered opens again. Both attributes go when the last share does.
A whole claim (`claim_record` without a share) refuses a record holding shares, so a run that read it
before it was paid in part never takes it whole.

Each record paid in part in R is also listed in R's partial-payments partition
(`partly_paid_key`), written before its first share and deleted after its last share goes: what
the exception refresh reads to count the remaining amounts (the open-records index, which it reads
the records from, does not project the shares). A listed record whose write then failed is read
and found without shares: harmless. Each listing carries a token: the release of a last share reads
it before its write and deletes the entry only if it is still that one, so a first share another
match takes meanwhile (listed anew before its own write) keeps the record listed.

A record stored before partial payments has neither attribute: it reads as not allocated while open
and as allocated whole to the match holding it once matched (domain.allocation.coverage_of).
"""
from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from chalicelib.adapters.dynamodb import keys
from chalicelib.adapters.dynamodb.table import ConditionFailed, DynamoTable
from chalicelib.domain.allocation import AllocationRefused, Coverage
from chalicelib.domain.matches import record_status

SHARE_PREFIX = "share_"
ALLOCATED_PREFIX = "allocated_"
ATTEMPTS = 8  # a record other matches keep taking shares of at the same moment
# The reconciliations a record holds shares in (a number set, beside `share_<R>`), so that one
# condition, `attribute_not_exists(paid_in)`, refuses deleting a record paid in part, whatever
# reconciliation paid it (records.py `mark_deleting`). Shares taken before it have none: a delete
# reads the record's shares before its mark (services/records.py), which covers them but for a race.
PAID_IN = "paid_in"


def share_attribute(reconciliation_id: int) -> str:
    return f"{SHARE_PREFIX}{reconciliation_id}"


def allocated_attribute(reconciliation_id: int) -> str:
    return f"{ALLOCATED_PREFIX}{reconciliation_id}"


def partly_paid_key(environment: str, reconciliation_id: int, record_id: int) -> dict[str, str]:
    return {"pk": f"{keys.env_prefix(environment)}#PARTLY_PAID#{reconciliation_id}",
            "sk": f"REC#{str(record_id).zfill(keys.ID_WIDTH)}"}


def _unlist(table: DynamoTable, environment: str, reconciliation_id: int, record_id: int, token: str | None) -> None:
    """Take the record off R's list of records paid in part, if it is still listed as it was read
    (`token`, None for an entry written before tokens): a first share taken since listed it anew."""
    condition, values = ("#t = :t", {":t": token}) if token else ("attribute_not_exists(#t)", None)
    try:
        table.delete(partly_paid_key(environment, reconciliation_id, record_id), condition=condition,
                     values=values, names={"#t": "token"})
    except ConditionFailed:
        pass


def partly_paid(table: DynamoTable, environment: str, reconciliation_id: int) -> dict[int, dict[int, int]]:
    """The records paid in part in the reconciliation, each with its shares there (match -> share)."""
    listed = table.query_all(keys.BASE_TABLE, partly_paid_key(environment, reconciliation_id, 0)["pk"],
                             consistent=True)
    items = table.get_many([keys.record(environment, int(item["record_id"])) for item in listed],
                           projection=("id", share_attribute(reconciliation_id)))
    found = {int(item["id"]): shares_of(item).get(reconciliation_id, {}) for item in items}
    return {record_id: shares for record_id, shares in found.items() if shares}


def shares_of(item: Mapping[str, Any]) -> dict[int, dict[int, int]]:
    """A record item's shares: reconciliation -> match -> share (empty for a record never paid in part)."""
    found: dict[int, dict[int, int]] = {}
    for name, value in item.items():
        suffix = name[len(SHARE_PREFIX):]
        if name.startswith(SHARE_PREFIX) and suffix.isdigit() and value:
            found[int(suffix)] = {int(match): int(share) for match, share in value.items()}
    return found


def claim_share(table: DynamoTable, environment: str, record_id: int, reconciliation_id: int, match_id: int,
                share: int, users: frozenset[int], proposed: bool = False) -> bool:
    """Let `match_id` take `share` of the record in the reconciliation. False when the record is gone,
    being deleted, held whole by another match, or has less than `share` left. True again for a
    retry of the same match. The share that covers the record claims it (see the module docstring)."""
    from chalicelib.adapters.dynamodb.matches import _same_sets, _sets_values, _status_update, _status_values

    holder_attribute, shares_attribute = keys.match_attribute(reconciliation_id), share_attribute(reconciliation_id)
    for _ in range(ATTEMPTS):
        item = table.get(keys.record(environment, record_id))
        if item is None or item.get("deleting"):
            return False
        shares = {int(m): int(s) for m, s in (item.get(shares_attribute) or {}).items()}
        if match_id in shares or item.get(holder_attribute) == match_id:
            return True  # a retry: this match holds its share already
        if item.get(holder_attribute) is not None:
            return False
        try:
            coverage = Coverage(int(item["amount"]), shares).allocate(match_id, share)
        except AllocationRefused:
            return False
        names = {"#sh": shares_attribute, "#at": allocated_attribute(reconciliation_id), "#m": holder_attribute}
        values: dict[str, Any] = {":total": coverage.allocated}
        condition = "attribute_exists(pk) AND attribute_not_exists(deleting) AND attribute_not_exists(#m) AND "
        if shares_attribute in item:
            sets = "#sh.#mid = :share, #at = :total"
            names["#mid"], values[":share"], values[":seen"] = str(match_id), share, int(item[names["#at"]])
            condition += "#at = :seen"
        else:
            sets = "#sh = :shares, #at = :total"
            values[":shares"] = {str(match_id): share}
            condition += "attribute_not_exists(#sh) AND attribute_not_exists(#at)"
        names["#paid"], values[":r"] = PAID_IN, {reconciliation_id}
        if coverage.remaining:
            expression = f"SET {sets} ADD #paid :r"
        else:  # the share that covers the record claims it, as a whole match does
            matched_in, proposed_in = set(item.get("matched_in") or ()), set(item.get("proposed_in") or ())
            status = record_status(matched_in | {reconciliation_id}, users | {reconciliation_id},
                                   proposed_in | ({reconciliation_id} if proposed else set()))
            expression = _status_update(status, "SET #m = :match, " + sets,
                                        "ADD #paid :r, matched_in :r" + (", proposed_in :r" if proposed else ""))
            condition += " AND " + _same_sets(matched_in, proposed_in)
            names["#status"] = "status"
            values.update({":match": match_id,
                           **_status_values(environment, record_id, item["data_stream_key"], status),
                           **_sets_values(matched_in, proposed_in)})
        if not shares:  # listed before its first share (see the module docstring)
            table.put({**partly_paid_key(environment, reconciliation_id, record_id), "entity": "partly_paid",
                       "record_id": record_id, "token": uuid.uuid4().hex})
        try:
            table.update(keys.record(environment, record_id), expression, values=values, names=names,
                         condition=condition)
            return True
        except ConditionFailed:
            continue  # changed meanwhile: read it again
    raise RuntimeError(f"record {record_id} kept changing while a share of it was taken")


def release_share(table: DynamoTable, environment: str, record_id: int, reconciliation_id: int, match_id: int,
                  users: frozenset[int], item: Mapping[str, Any] | None = None) -> bool:
    """Give back the share `match_id` holds of the record (a covered record opens again). False when
    it holds none (the caller then releases a whole claim); `item` is the record as last read."""
    from chalicelib.adapters.dynamodb.matches import _same_sets, _sets_values, _status_update, _status_values

    holder_attribute, shares_attribute = keys.match_attribute(reconciliation_id), share_attribute(reconciliation_id)
    total_attribute = allocated_attribute(reconciliation_id)
    for _ in range(ATTEMPTS):
        if item is None:
            item = table.get(keys.record(environment, record_id))
        if item is None:
            return True
        shares = {int(m): int(s) for m, s in (item.get(shares_attribute) or {}).items()}
        if match_id not in shares:
            return False
        rest, _ = Coverage(int(item["amount"]), shares).release(match_id)
        names = {"#sh": shares_attribute, "#at": total_attribute, "#mid": str(match_id)}
        values: dict[str, Any] = {":seen": int(item[total_attribute])}
        condition = "#at = :seen AND attribute_exists(#sh.#mid)"
        removed = "#sh, #at" if not rest.shares else "#sh.#mid"
        total = "" if not rest.shares else "#at = :rest"
        if rest.shares:
            values[":rest"] = rest.allocated
        # The listing as it stands before the last share goes: deleted after only if no first share
        # of another match listed the record again meanwhile (see the module docstring).
        listed = None if rest.shares else table.get(partly_paid_key(environment, record_id=record_id,
                                                                    reconciliation_id=reconciliation_id))
        holder = item.get(holder_attribute)
        unpaid = "" if rest.shares else "#paid :r"  # its last share in the reconciliation goes
        if unpaid:
            names["#paid"], values[":r"] = PAID_IN, {reconciliation_id}
        if holder is None:  # open still: only the share goes
            expression = " ".join(filter(None, ["SET " + total if total else "", "REMOVE " + removed,
                                                "DELETE " + unpaid if unpaid else ""]))
        else:  # it was covered: open again
            matched_in, proposed_in = set(item.get("matched_in") or ()), set(item.get("proposed_in") or ())
            status = record_status(matched_in - {reconciliation_id}, users, proposed_in - {reconciliation_id})
            dropped = "DELETE matched_in :r" + (", proposed_in :r" if reconciliation_id in proposed_in else "") \
                + (", " + unpaid if unpaid else "")
            expression = _status_update(status, "REMOVE #m, " + removed, dropped)
            if total:
                expression = expression.replace("SET ", f"SET {total}, ", 1)
            condition += " AND #m = :holder AND " + _same_sets(matched_in, proposed_in)
            names.update({"#m": holder_attribute, "#status": "status"})
            values.update({":holder": holder, ":r": {reconciliation_id},
                           **_status_values(environment, record_id, item["data_stream_key"], status),
                           **_sets_values(matched_in, proposed_in)})
        try:
            table.update(keys.record(environment, record_id), expression, values=values, names=names,
                         condition=condition)
        except ConditionFailed:
            item = None
            continue
        if listed is not None:
            _unlist(table, environment, reconciliation_id, record_id, listed.get("token"))
        return True
    raise RuntimeError(f"record {record_id} kept changing while a share of it was given back")
