"""Webhook endpoints and their deliveries in DynamoDB (see keys.py, "Webhooks"): one partition per
endpoint, its deliveries newest first, a guard per event so each event makes one delivery, the
sparse gsi2 list (sharded) of deliveries waiting for an attempt, and deleted endpoints' tombstones
until the sweeper has cleared their partitions."""
from __future__ import annotations

import itertools
from dataclasses import replace
from datetime import datetime
from typing import Any

from chalicelib.adapters.dynamodb import keys
from chalicelib.adapters.dynamodb.table import ConditionFailed, DynamoTable, status_in
from chalicelib.domain.clock import iso, optional_iso, parse_iso, parse_optional_iso, utc_now
from chalicelib.domain.errors import Conflict, NotFound
from chalicelib.domain.webhooks import (
    MAX_ATTEMPTS,
    RETRYABLE,
    DeliveryStatus,
    WebhookDelivery,
    WebhookEndpoint,
    limit_after_manual_retry,
)

# What an edit (PATCH, rotate_secret) may write; only those it changed are written, so an edit never
# puts back a failing_since or a disable that the delivery worker wrote since the edit's read.
SAVED_FIELDS = ("url", "events", "description", "active", "secret", "previous_secret", "previous_secret_expires_at",
                "disabled_at", "disabled_reason", "failing_since", "updated_at")
# The endpoint exists and is not a tombstone (deleted, its partition not yet cleared).
LIVE = "attribute_exists(pk) AND attribute_not_exists(deleted_at)"
# A delivery's place in the due list (gsi2), from the values `_due_values` gives; and its leaving it.
SET_DUE = keys.GSI2.assignment(":due")
LEAVE_DUE = f"REMOVE {keys.GSI2.attributes}, claimed_at"


class WebhookRepository:
    def __init__(self, table: DynamoTable) -> None:
        self._table = table

    # Endpoints ---------------------------------------------------------------------------------

    def add(self, endpoint: WebhookEndpoint) -> None:
        self._table.put_new(self._endpoint_item(endpoint))

    def get(self, environment: str, endpoint_id: int) -> WebhookEndpoint:
        item = self._table.get(keys.webhook_endpoint(environment, endpoint_id))
        if item is None or "deleted_at" in item:
            raise NotFound(f"webhook endpoint {endpoint_id} not found")
        return self._endpoint(item)

    def list_page(self, environment: str, limit: int,
                  cursor: str | None) -> tuple[list[WebhookEndpoint], str | None]:
        page = self._table.query_page(keys.GSI1, keys.webhook_endpoints_index_pk(environment), limit=limit,
                                      cursor=cursor)
        return [self._endpoint(i) for i in page.items], page.cursor

    def of_environment(self, environment: str) -> list[WebhookEndpoint]:
        items = self._table.query_all(keys.GSI1, keys.webhook_endpoints_index_pk(environment))
        return [self._endpoint(i) for i in items if "deleted_at" not in i]

    def save(self, updated: WebhookEndpoint, previous: WebhookEndpoint) -> WebhookEndpoint:
        """Write an edit (fields, or a rotated secret) made from `previous`: 409 when another edit came
        first. Only the fields the edit changed are written (a field it cleared is removed)."""
        new, old = self._endpoint_item(updated), self._endpoint_item(previous)
        changed = [name for name in SAVED_FIELDS if new[name] != old[name]]
        kept = [name for name in changed if new[name] is not None]
        cleared = [name for name in changed if new[name] is None]
        names = {f"#a{i}": name for i, name in enumerate(kept + cleared)}
        values = {f":v{i}": new[name] for i, name in enumerate(kept)}
        expression = "SET " + "".join(f"#a{i} = :v{i}, " for i in range(len(kept))) + "#version = :next"
        if cleared:
            expression += " REMOVE " + ", ".join(f"#a{i}" for i in range(len(kept), len(kept) + len(cleared)))
        try:
            self._table.update(keys.webhook_endpoint(previous.environment, previous.id), expression,
                               condition=f"{LIVE} AND #version = :seen", names={**names, "#version": "version"},
                               values={**values, ":seen": previous.version, ":next": previous.version + 1})
        except ConditionFailed:
            self.get(previous.environment, previous.id)  # NotFound when it was deleted
            raise Conflict(f"webhook endpoint {previous.id} was changed meanwhile; try again") from None
        return self.get(updated.environment, updated.id)

    def remove(self, environment: str, endpoint_id: int) -> None:
        """Delete an endpoint in one bounded write: its item becomes a tombstone (not found, not
        listed, out of the fan-out) in the sweeper's WEBHOOKS_GONE list; purge_deleted clears the
        rest of its partition (deliveries, event guards) later, a page at a time."""
        gone = keys.webhook_endpoint_gone_index(environment, endpoint_id)
        try:
            self._table.update(keys.webhook_endpoint(environment, endpoint_id),
                               f"SET deleted_at = :now, {keys.GSI2.assignment(':gone')} REMOVE {keys.GSI1.attributes}",
                               condition=LIVE,
                               values={":now": iso(utc_now()), **keys.GSI2.assigned_values(gone, ":gone")})
        except ConditionFailed:
            raise NotFound(f"webhook endpoint {endpoint_id} not found") from None

    def purge_deleted(self, page_size: int = 200, max_endpoints: int = 20) -> int:
        """One step of clearing deleted endpoints' partitions: up to `page_size` items of each of up
        to `max_endpoints` tombstones; a tombstone whose partition holds nothing else goes last.
        Returns how many items it deleted."""
        tombstones = itertools.islice(
            self._table.query_between(keys.GSI2, keys.WEBHOOKS_GONE_PK, " ", "\uffff", page_size=max_endpoints),
            max_endpoints)
        deleted = 0
        for tombstone in tombstones:
            pk = tombstone["pk"]
            rest = [{"pk": i["pk"], "sk": i["sk"]} for i in itertools.islice(
                self._table.query_between(keys.BASE_TABLE, pk, " ", "\uffff", page_size=page_size + 1,
                                          projection=("pk", "sk")),
                page_size + 1) if i["sk"] != tombstone["sk"]][:page_size]
            if rest:
                self._table.batch_write(deletes=rest)
                deleted += len(rest)
                continue
            try:  # nothing left but the tombstone (a delivery a late fan-out adds is removed by deliver)
                self._table.delete({"pk": pk, "sk": tombstone["sk"]}, condition="attribute_exists(deleted_at)")
                deleted += 1
            except ConditionFailed:
                pass
        return deleted

    def mark_failing(self, endpoint: WebhookEndpoint, at: datetime) -> WebhookEndpoint:
        """The first failure since the last success starts the clock (a later one leaves it)."""
        try:
            item = self._table.update(keys.webhook_endpoint(endpoint.environment, endpoint.id),
                                      "SET failing_since = if_not_exists(failing_since, :at)",
                                      condition=LIVE, values={":at": iso(at)}, return_new=True)
        except ConditionFailed:
            return endpoint
        return self._endpoint(item)

    def mark_succeeded(self, endpoint: WebhookEndpoint) -> None:
        """A success stops the failing clock, whatever this worker read of it before sending (a
        failure of another delivery may have started it since)."""
        try:
            self._table.update(keys.webhook_endpoint(endpoint.environment, endpoint.id), "REMOVE failing_since",
                               condition="attribute_exists(failing_since)")
        except ConditionFailed:
            pass

    def disable(self, endpoint: WebhookEndpoint, at: datetime, reason: str) -> bool:
        """Turned off for failing too long (only while still failing and active): True when this
        call turned it off."""
        try:
            self._table.update(keys.webhook_endpoint(endpoint.environment, endpoint.id),
                               "SET active = :off, disabled_at = :at, disabled_reason = :why, "
                               "#version = #version + :one",
                               condition=f"{LIVE} AND attribute_exists(failing_since) AND active = :on",
                               names={"#version": "version"},
                               values={":off": False, ":on": True, ":at": iso(at), ":why": reason, ":one": 1})
        except ConditionFailed:
            return False
        return True

    # Deliveries --------------------------------------------------------------------------------

    def add_delivery(self, delivery: WebhookDelivery, wake_at: datetime) -> tuple[WebhookDelivery, bool]:
        """The delivery of an event to an endpoint, made once: (it, True) when made now, (the one an
        earlier call made, False) when the event came before."""
        guard = keys.webhook_event_guard(delivery.environment, delivery.endpoint_id, delivery.event_id)
        try:
            self._table.put({**guard, "entity": "webhook_event_guard", "delivery_id": delivery.id},
                            condition="attribute_not_exists(pk)")
        except ConditionFailed:
            held = self._table.get(guard)
            existing_id = int(held["delivery_id"]) if held else delivery.id
            found = self._table.get(keys.webhook_delivery(delivery.environment, delivery.endpoint_id, existing_id))
            if found is not None:
                return self._delivery(found), False
            delivery = _with_id(delivery, existing_id)  # the earlier call stopped between guard and delivery
        try:
            self._table.put_new(self._delivery_item(delivery, wake_at))
        except ConditionFailed:
            found = self._table.get(keys.webhook_delivery(delivery.environment, delivery.endpoint_id, delivery.id))
            if found is not None:
                return self._delivery(found), False
        return delivery, True

    def get_delivery(self, environment: str, endpoint_id: int, delivery_id: int) -> WebhookDelivery:
        item = self._table.get(keys.webhook_delivery(environment, endpoint_id, delivery_id))
        if item is None:
            raise NotFound(f"delivery {delivery_id} of webhook endpoint {endpoint_id} not found")
        return self._delivery(item)

    def deliveries_page(self, environment: str, endpoint_id: int, limit: int,
                        cursor: str | None) -> tuple[list[WebhookDelivery], str | None]:
        page = self._table.query_page(keys.BASE_TABLE, keys.webhook_endpoint(environment, endpoint_id)["pk"],
                                      limit=limit, cursor=cursor, sort_prefix=keys.WEBHOOK_DELIVERY_PREFIX)
        return [self._delivery(i) for i in page.items], page.cursor

    def claim(self, delivery: WebhookDelivery, now: datetime, lease_until: datetime) -> WebhookDelivery | None:
        """Take the next attempt of a pending delivery as it was read (no attempt made since), while
        it has attempts left. None: someone else has it, it ended, or it used its attempts."""
        try:
            item = self._table.update(
                self._delivery_key(delivery),
                f"SET #status = :delivering, attempts = :next, claimed_at = :now, updated_at = :now, {SET_DUE}",
                condition="attempts = :seen AND #status = :pending AND attempts < :limit",
                names={"#status": "status"},
                values={":delivering": DeliveryStatus.DELIVERING.value, ":pending": DeliveryStatus.PENDING.value,
                        ":seen": delivery.attempts, ":next": delivery.attempts + 1, ":now": iso(now),
                        ":limit": delivery.attempt_limit, **_due_values(delivery, lease_until)},
                return_new=True)
        except ConditionFailed:
            return None
        return self._delivery(item)

    def record_attempt(self, delivery: WebhookDelivery, status: DeliveryStatus, now: datetime,
                       status_code: int | None, error: str | None, excerpt: str | None,
                       next_attempt_at: datetime | None, wake_at: datetime | None,
                       stale_before: datetime | None = None) -> WebhookDelivery | None:
        """The outcome of the attempt `delivery` claimed (None: it was recorded meanwhile). With
        `stale_before`: the outcome of an attempt whose worker never recorded one, only if its
        claim is older than that."""
        expression = ("SET #status = :status, updated_at = :now, last_attempt_at = :now, last_status_code = :code, "
                      "last_error = :error, response_excerpt = :excerpt, next_attempt_at = :next")
        values: dict[str, Any] = {":status": status.value, ":now": iso(now), ":code": status_code, ":error": error,
                                  ":excerpt": excerpt, ":next": iso(next_attempt_at) if next_attempt_at else None,
                                  ":delivering": DeliveryStatus.DELIVERING.value, ":mine": delivery.attempts}
        condition = "#status = :delivering AND attempts = :mine"
        if stale_before is not None:
            condition += " AND (attribute_not_exists(claimed_at) OR claimed_at < :stale)"
            values[":stale"] = iso(stale_before)
        if wake_at is not None:
            expression += f", {SET_DUE}"
            values.update(_due_values(delivery, wake_at))
        else:
            expression += f" {LEAVE_DUE}"
        try:
            item = self._table.update(self._delivery_key(delivery), expression, condition=condition,
                                      names={"#status": "status"}, values=values, return_new=True, keep_nulls=True)
        except ConditionFailed:
            return None
        return self._delivery(item)

    def fail_delivery(self, delivery: WebhookDelivery, now: datetime, error: str) -> None:
        """Given up without an attempt (the endpoint is inactive), from the status it was read in."""
        condition, values = status_in([delivery.status])
        try:
            self._table.update(self._delivery_key(delivery),
                               "SET #status = :failed, updated_at = :now, last_error = :error, next_attempt_at = :none "
                               f"{LEAVE_DUE}",
                               condition=f"{condition} AND attempts = :seen", names={"#status": "status"},
                               values={**values, ":failed": DeliveryStatus.FAILED.value, ":now": iso(now),
                                       ":error": error, ":none": None, ":seen": delivery.attempts},
                               keep_nulls=True)
        except ConditionFailed:
            pass

    def requeue(self, delivery: WebhookDelivery, now: datetime, wake_at: datetime) -> WebhookDelivery | None:
        """Due now again (a manual retry): only from a status that allows it, as read. A delivery that
        used its attempts gets one more."""
        if delivery.status not in RETRYABLE:
            return None
        condition, values = status_in([delivery.status])
        try:
            item = self._table.update(
                self._delivery_key(delivery),
                f"SET #status = :pending, next_attempt_at = :now, updated_at = :now, {SET_DUE}, attempt_limit = :limit",
                condition=f"{condition} AND attempts = :seen", names={"#status": "status"},
                values={**values, ":pending": DeliveryStatus.PENDING.value, ":now": iso(now),
                        ":seen": delivery.attempts,
                        ":limit": limit_after_manual_retry(delivery.status, delivery.attempts, delivery.attempt_limit),
                        **_due_values(delivery, wake_at)},
                return_new=True)
        except ConditionFailed:
            return None
        return self._delivery(item)

    def due(self, now: datetime, limit: int = 500) -> list[tuple[WebhookDelivery, str]]:
        """Deliveries whose wake-up time has come, of every environment (every shard of the list),
        soonest first, each with its place in the list (what push_wake expects to find)."""
        until = iso(now) + "#\uffff"
        entries: list[dict[str, Any]] = []
        for shard in keys.webhook_due_shards():
            entries += itertools.islice(self._table.query_between(keys.GSI2, shard, "0", until,
                                                                  page_size=limit), limit)
        due_list = keys.GSI2
        entries.sort(key=lambda entry: entry[due_list.sort_key])
        found = self._table.get_many([{"pk": e["pk"], "sk": e["sk"]} for e in entries[:limit]])
        still_due = (i for i in found if str(i.get(due_list.partition_key, "")).startswith(keys.WEBHOOKS_DUE_PK)
                     and i[due_list.sort_key] <= until)
        return sorted(((self._delivery(i), i[due_list.sort_key]) for i in still_due),
                      key=lambda pair: pair[1])

    def remove_delivery(self, delivery: WebhookDelivery) -> None:
        """A delivery whose endpoint is gone (deleted while it waited, or made by a fan-out that read
        the endpoint a moment before its delete), with its event's guard."""
        self._table.batch_write(deletes=[
            self._delivery_key(delivery),
            keys.webhook_event_guard(delivery.environment, delivery.endpoint_id, delivery.event_id)])

    def push_wake(self, delivery: WebhookDelivery, seen_wake: str, wake_at: datetime) -> bool:
        """Move a due delivery's wake-up time on (the sweeper queued it): False when it changed meanwhile."""
        try:
            self._table.update(self._delivery_key(delivery), f"SET {keys.GSI2.sort_key} = :due_sk",
                               condition=f"{keys.GSI2.sort_key} = :seen",
                               values={":seen": seen_wake, ":due_sk": _due_values(delivery, wake_at)[":due_sk"]})
        except ConditionFailed:
            return False
        return True

    # Items -------------------------------------------------------------------------------------

    @staticmethod
    def _delivery_key(delivery: WebhookDelivery) -> dict[str, str]:
        return keys.webhook_delivery(delivery.environment, delivery.endpoint_id, delivery.id)

    @staticmethod
    def _endpoint_item(endpoint: WebhookEndpoint) -> dict[str, Any]:
        return {
            **keys.webhook_endpoint(endpoint.environment, endpoint.id),
            **keys.webhook_endpoint_index(endpoint.environment, endpoint.id),
            "entity": "webhook_endpoint", "environment": endpoint.environment, "id": endpoint.id,
            "url": endpoint.url, "events": list(endpoint.events), "description": endpoint.description,
            "active": endpoint.active, "secret": endpoint.secret, "previous_secret": endpoint.previous_secret,
            "previous_secret_expires_at": optional_iso(endpoint.previous_secret_expires_at),
            "failing_since": optional_iso(endpoint.failing_since), "disabled_at": optional_iso(endpoint.disabled_at),
            "disabled_reason": endpoint.disabled_reason, "created_at": iso(endpoint.created_at),
            "updated_at": iso(endpoint.updated_at), "version": endpoint.version,
        }

    @staticmethod
    def _endpoint(item: dict[str, Any]) -> WebhookEndpoint:
        return WebhookEndpoint(
            environment=item["environment"], id=int(item["id"]), url=item["url"], events=tuple(item["events"]),
            description=item.get("description") or "", active=bool(item["active"]), secret=item["secret"],
            previous_secret=item.get("previous_secret"),
            previous_secret_expires_at=parse_optional_iso(item.get("previous_secret_expires_at")),
            failing_since=parse_optional_iso(item.get("failing_since")),
            disabled_at=parse_optional_iso(item.get("disabled_at")), disabled_reason=item.get("disabled_reason"),
            created_at=parse_iso(item["created_at"]), updated_at=parse_iso(item["updated_at"]),
            version=int(item.get("version", 1)))

    @staticmethod
    def _delivery_item(delivery: WebhookDelivery, wake_at: datetime) -> dict[str, Any]:
        waiting = delivery.status in (DeliveryStatus.PENDING, DeliveryStatus.DELIVERING)
        return {
            **keys.webhook_delivery(delivery.environment, delivery.endpoint_id, delivery.id),
            **(keys.webhook_due_index(delivery.environment, delivery.endpoint_id, delivery.id, iso(wake_at))
               if waiting else {}),
            "entity": "webhook_delivery", "environment": delivery.environment, "endpoint_id": delivery.endpoint_id,
            "id": delivery.id, "event_id": delivery.event_id, "event_type": delivery.event_type,
            "payload": delivery.payload, "status": delivery.status.value, "attempts": delivery.attempts,
            "next_attempt_at": optional_iso(delivery.next_attempt_at), "attempt_limit": delivery.attempt_limit,
            "created_at": iso(delivery.created_at),
            "updated_at": iso(delivery.updated_at),
        }

    @staticmethod
    def _delivery(item: dict[str, Any]) -> WebhookDelivery:
        return WebhookDelivery(
            environment=item["environment"], endpoint_id=int(item["endpoint_id"]), id=int(item["id"]),
            event_id=item["event_id"], event_type=item["event_type"], payload=item["payload"],
            status=DeliveryStatus(item["status"]), attempts=int(item.get("attempts", 0)),
            next_attempt_at=parse_optional_iso(item.get("next_attempt_at")),
            last_attempt_at=parse_optional_iso(item.get("last_attempt_at")),
            last_status_code=item.get("last_status_code"), last_error=item.get("last_error"),
            response_excerpt=item.get("response_excerpt"), claimed_at=parse_optional_iso(item.get("claimed_at")),
            attempt_limit=int(item.get("attempt_limit", MAX_ATTEMPTS)),
            created_at=parse_iso(item["created_at"]), updated_at=parse_iso(item["updated_at"]))


def _due_values(delivery: WebhookDelivery, wake_at: datetime) -> dict[str, str]:
    index = keys.webhook_due_index(delivery.environment, delivery.endpoint_id, delivery.id, iso(wake_at))
    return keys.GSI2.assigned_values(index, ":due")


def _with_id(delivery: WebhookDelivery, delivery_id: int) -> WebhookDelivery:
    return replace(delivery, id=delivery_id)
