"""Webhook endpoints and their deliveries in DynamoDB (see keys.py, "Webhooks"): one partition per
endpoint, its deliveries newest first, a guard per event so each event makes one delivery, and
the sparse gsi2 list of deliveries waiting for an attempt."""
from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import Any

from chalicelib.adapters.dynamodb import keys
from chalicelib.adapters.dynamodb.table import ConditionFailed, DynamoTable, status_in
from chalicelib.domain.clock import iso, parse_iso, parse_optional_iso
from chalicelib.domain.errors import Conflict, NotFound
from chalicelib.domain.webhooks import RETRYABLE, DeliveryStatus, WebhookDelivery, WebhookEndpoint

ENDPOINT_FIELDS = ("url", "events", "description", "active", "disabled_at", "disabled_reason", "failing_since")


class WebhookRepository:
    def __init__(self, table: DynamoTable) -> None:
        self._table = table

    # Endpoints ---------------------------------------------------------------------------------

    def add(self, endpoint: WebhookEndpoint) -> None:
        self._table.put_new(self._endpoint_item(endpoint))

    def get(self, environment: str, endpoint_id: int) -> WebhookEndpoint:
        item = self._table.get(keys.webhook_endpoint(environment, endpoint_id))
        if item is None:
            raise NotFound(f"webhook endpoint {endpoint_id} not found")
        return self._endpoint(item)

    def list_page(self, environment: str, limit: int,
                  cursor: str | None) -> tuple[list[WebhookEndpoint], str | None]:
        page = self._table.query_page("gsi1pk", keys.webhook_endpoints_index_pk(environment), index=keys.GSI1,
                                      sort_attr="gsi1sk", limit=limit, cursor=cursor)
        return [self._endpoint(i) for i in page.items], page.cursor

    def of_environment(self, environment: str) -> list[WebhookEndpoint]:
        items = self._table.query_all("gsi1pk", keys.webhook_endpoints_index_pk(environment), index=keys.GSI1)
        return [self._endpoint(i) for i in items]

    def save(self, updated: WebhookEndpoint, previous: WebhookEndpoint) -> WebhookEndpoint:
        """Write an edit (fields, or a rotated secret) made from `previous`: 409 when another came first."""
        item = {k: v for k, v in self._endpoint_item(updated).items()
                if k not in ("pk", "sk", "gsi1pk", "gsi1sk", "version", "created_at")}
        names = {f"#a{i}": name for i, name in enumerate(item)}
        values = {f":v{i}": value for i, value in enumerate(item.values())}
        expression = "SET " + ", ".join(f"#a{i} = :v{i}" for i in range(len(item))) + ", #version = :next"
        try:
            self._table.update(keys.webhook_endpoint(previous.environment, previous.id), expression,
                               condition="attribute_exists(pk) AND #version = :seen",
                               names={**names, "#version": "version"},
                               values={**values, ":seen": previous.version, ":next": previous.version + 1},
                               keep_nulls=True)
        except ConditionFailed:
            if self._table.get(keys.webhook_endpoint(previous.environment, previous.id)) is None:
                raise NotFound(f"webhook endpoint {previous.id} not found") from None
            raise Conflict(f"webhook endpoint {previous.id} was changed meanwhile; try again") from None
        return self.get(updated.environment, updated.id)

    def remove(self, environment: str, endpoint_id: int) -> None:
        """The endpoint, then the rest of its partition (deliveries, event guards)."""
        try:
            self._table.delete(keys.webhook_endpoint(environment, endpoint_id), condition="attribute_exists(pk)")
        except ConditionFailed:
            raise NotFound(f"webhook endpoint {endpoint_id} not found") from None
        rest = self._table.query_all("pk", keys.webhook_endpoint(environment, endpoint_id)["pk"],
                                     projection=("pk", "sk"))
        self._table.batch_write(deletes=[{"pk": i["pk"], "sk": i["sk"]} for i in rest])

    def mark_failing(self, endpoint: WebhookEndpoint, at: datetime) -> WebhookEndpoint:
        """The first failure since the last success starts the clock (a later one leaves it)."""
        try:
            item = self._table.update(keys.webhook_endpoint(endpoint.environment, endpoint.id),
                                      "SET failing_since = if_not_exists(failing_since, :at)",
                                      condition="attribute_exists(pk)", values={":at": iso(at)}, return_new=True)
        except ConditionFailed:
            return endpoint
        return self._endpoint(item)

    def mark_succeeded(self, endpoint: WebhookEndpoint) -> None:
        if endpoint.failing_since is None:
            return
        try:
            self._table.update(keys.webhook_endpoint(endpoint.environment, endpoint.id), "REMOVE failing_since",
                               condition="attribute_exists(pk)")
        except ConditionFailed:
            pass

    def disable(self, endpoint: WebhookEndpoint, at: datetime, reason: str) -> None:
        """Turned off for failing too long (only while still failing and active)."""
        try:
            self._table.update(keys.webhook_endpoint(endpoint.environment, endpoint.id),
                               "SET active = :off, disabled_at = :at, disabled_reason = :why, "
                               "#version = #version + :one",
                               condition="attribute_exists(failing_since) AND active = :on",
                               names={"#version": "version"},
                               values={":off": False, ":on": True, ":at": iso(at), ":why": reason, ":one": 1})
        except ConditionFailed:
            pass

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
        page = self._table.query_page("pk", keys.webhook_endpoint(environment, endpoint_id)["pk"], limit=limit,
                                      cursor=cursor, sort_prefix=keys.WEBHOOK_DELIVERY_PREFIX)
        return [self._delivery(i) for i in page.items], page.cursor

    def claim(self, delivery: WebhookDelivery, now: datetime, stale_before: datetime,
              lease_until: datetime) -> WebhookDelivery | None:
        """Take the next attempt of a delivery as it was read: pending (or delivering under a claim
        older than `stale_before`) and no attempt made since. None: someone else has it or it ended."""
        try:
            item = self._table.update(
                self._delivery_key(delivery),
                "SET #status = :delivering, attempts = :next, claimed_at = :now, updated_at = :now, "
                "gsi2pk = :due_pk, gsi2sk = :due_sk",
                condition="attempts = :seen AND (#status = :pending OR "
                          "(#status = :delivering AND claimed_at < :stale))",
                names={"#status": "status"},
                values={":delivering": DeliveryStatus.DELIVERING.value, ":pending": DeliveryStatus.PENDING.value,
                        ":seen": delivery.attempts, ":next": delivery.attempts + 1, ":now": iso(now),
                        ":stale": iso(stale_before), **_due_values(delivery, lease_until)},
                return_new=True)
        except ConditionFailed:
            return None
        return self._delivery(item)

    def record_attempt(self, delivery: WebhookDelivery, status: DeliveryStatus, now: datetime,
                       status_code: int | None, error: str | None, excerpt: str | None,
                       next_attempt_at: datetime | None, wake_at: datetime | None) -> WebhookDelivery | None:
        """The outcome of the attempt `delivery` claimed (None: its claim was taken over meanwhile)."""
        expression = ("SET #status = :status, updated_at = :now, last_attempt_at = :now, last_status_code = :code, "
                      "last_error = :error, response_excerpt = :excerpt, next_attempt_at = :next")
        values: dict[str, Any] = {":status": status.value, ":now": iso(now), ":code": status_code, ":error": error,
                                  ":excerpt": excerpt, ":next": iso(next_attempt_at) if next_attempt_at else None,
                                  ":delivering": DeliveryStatus.DELIVERING.value, ":mine": delivery.attempts}
        if wake_at is not None:
            expression += ", gsi2pk = :due_pk, gsi2sk = :due_sk"
            values.update(_due_values(delivery, wake_at))
        else:
            expression += " REMOVE gsi2pk, gsi2sk, claimed_at"
        try:
            item = self._table.update(self._delivery_key(delivery), expression,
                                      condition="#status = :delivering AND attempts = :mine",
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
                               "REMOVE gsi2pk, gsi2sk, claimed_at",
                               condition=f"{condition} AND attempts = :seen", names={"#status": "status"},
                               values={**values, ":failed": DeliveryStatus.FAILED.value, ":now": iso(now),
                                       ":error": error, ":none": None, ":seen": delivery.attempts},
                               keep_nulls=True)
        except ConditionFailed:
            pass

    def requeue(self, delivery: WebhookDelivery, now: datetime, wake_at: datetime) -> WebhookDelivery | None:
        """Due now again (a manual retry): only from a status that allows it, as read."""
        if delivery.status not in RETRYABLE:
            return None
        condition, values = status_in([delivery.status])
        try:
            item = self._table.update(
                self._delivery_key(delivery),
                "SET #status = :pending, next_attempt_at = :now, updated_at = :now, gsi2pk = :due_pk, "
                "gsi2sk = :due_sk",
                condition=f"{condition} AND attempts = :seen", names={"#status": "status"},
                values={**values, ":pending": DeliveryStatus.PENDING.value, ":now": iso(now),
                        ":seen": delivery.attempts, **_due_values(delivery, wake_at)},
                return_new=True)
        except ConditionFailed:
            return None
        return self._delivery(item)

    def due(self, now: datetime, limit: int = 500) -> list[tuple[WebhookDelivery, str]]:
        """Deliveries whose wake-up time has come, of every environment, each with its place in the
        list (what push_wake expects to find)."""
        entries = self._table.query_between(keys.WEBHOOKS_DUE_PK, "0", iso(now) + "#\uffff", index=keys.GSI2,
                                            partition_attr="gsi2pk", sort_attr="gsi2sk", page_size=limit)
        wanted = []
        for entry in entries:
            wanted.append({"pk": entry["pk"], "sk": entry["sk"]})
            if len(wanted) >= limit:
                break
        found = self._table.get_many(wanted)
        return sorted(((self._delivery(i), i["gsi2sk"]) for i in found
                       if i.get("gsi2pk") == keys.WEBHOOKS_DUE_PK and i["gsi2sk"] <= iso(now) + "#\uffff"),
                      key=lambda pair: pair[1])

    def push_wake(self, delivery: WebhookDelivery, seen_wake: str, wake_at: datetime) -> bool:
        """Move a due delivery's wake-up time on (the sweeper queued it): False when it changed meanwhile."""
        try:
            self._table.update(self._delivery_key(delivery), "SET gsi2sk = :due_sk",
                               condition="gsi2sk = :seen",
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
            "previous_secret_expires_at": _iso(endpoint.previous_secret_expires_at),
            "failing_since": _iso(endpoint.failing_since), "disabled_at": _iso(endpoint.disabled_at),
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
            "next_attempt_at": _iso(delivery.next_attempt_at), "created_at": iso(delivery.created_at),
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
            created_at=parse_iso(item["created_at"]), updated_at=parse_iso(item["updated_at"]))


def _iso(moment: datetime | None) -> str | None:
    return iso(moment) if moment else None


def _due_values(delivery: WebhookDelivery, wake_at: datetime) -> dict[str, str]:
    index = keys.webhook_due_index(delivery.environment, delivery.endpoint_id, delivery.id, iso(wake_at))
    return {":due_pk": index["gsi2pk"], ":due_sk": index["gsi2sk"]}


def _with_id(delivery: WebhookDelivery, delivery_id: int) -> WebhookDelivery:
    return replace(delivery, id=delivery_id)
