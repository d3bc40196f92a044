"""Webhook endpoints and their deliveries, as `adapters/dynamodb/webhooks.py` keeps them (an edit
only over the version it read, a delete that leaves a tombstone until purged, one delivery per
event, attempts claimed and recorded only from the state read, the list of deliveries due); and
the HTTP sender (`adapters/webhook_sender.py`), which answers as scripted and keeps what it sent."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields, replace
from datetime import datetime
from typing import Any

from chalicelib.domain.clock import iso
from chalicelib.domain.errors import Conflict, NotFound
from chalicelib.domain.webhooks import (
    RETRYABLE,
    DeliveryStatus,
    SendOutcome,
    WebhookDelivery,
    WebhookEndpoint,
    WebhookRequest,
    limit_after_manual_retry,
)
from tests.fakes._support import ConditionFailed, as_stored, newest_first_page, padded, stored_time

DeliveryKey = tuple[str, int, int]  # environment, endpoint id, delivery id
WAITING = (DeliveryStatus.PENDING, DeliveryStatus.DELIVERING)


def _stored(entity: Any) -> Any:
    """An endpoint or a delivery as it reads back: timestamps to the millisecond, lists as tuples."""
    return replace(entity, **{f.name: as_stored(getattr(entity, f.name)) for f in fields(entity)})


class FakeWebhookRepository:
    def __init__(self) -> None:
        self.endpoints: dict[tuple[str, int], WebhookEndpoint] = {}
        self.tombstones: set[tuple[str, int]] = set()  # deleted, their deliveries not purged yet
        self.deliveries: dict[DeliveryKey, WebhookDelivery] = {}
        self.wakes: dict[DeliveryKey, str] = {}  # a waiting delivery's place in the due list
        self.guards: dict[tuple[str, int, str], int] = {}  # (environment, endpoint id, event id): delivery id

    # Endpoints ---------------------------------------------------------------------------------

    def add(self, endpoint: WebhookEndpoint) -> None:
        key = (endpoint.environment, endpoint.id)
        if key in self.endpoints:
            raise ConditionFailed()  # the adapter's put_new lets it through
        self.endpoints[key] = _stored(endpoint)

    def get(self, environment: str, endpoint_id: int) -> WebhookEndpoint:
        if not self._live(environment, endpoint_id):
            raise NotFound(f"webhook endpoint {endpoint_id} not found")
        return self.endpoints[(environment, endpoint_id)]

    def list_page(self, environment: str, limit: int,
                  cursor: str | None) -> tuple[list[WebhookEndpoint], str | None]:
        return newest_first_page(f"webhook_endpoints:{environment}",
                                 ((padded(i), e) for (env, i), e in self.endpoints.items()
                                  if env == environment and (env, i) not in self.tombstones), limit, cursor)

    def of_environment(self, environment: str) -> list[WebhookEndpoint]:
        return [e for (env, i), e in sorted(self.endpoints.items())
                if env == environment and (env, i) not in self.tombstones]

    def save(self, updated: WebhookEndpoint, previous: WebhookEndpoint) -> WebhookEndpoint:
        """Only the fields the edit changed are written, over the version it read (else Conflict)."""
        if not self._live(previous.environment, previous.id):
            raise NotFound(f"webhook endpoint {previous.id} not found")
        stored = self.endpoints[(previous.environment, previous.id)]
        if stored.version != previous.version:
            raise Conflict(f"webhook endpoint {previous.id} was changed meanwhile; try again")
        new, old = _stored(updated), _stored(previous)
        changed = {f.name: getattr(new, f.name) for f in fields(new) if f.name != "version"
                   and getattr(new, f.name) != getattr(old, f.name)}
        self.endpoints[(previous.environment, previous.id)] = replace(stored, **changed, version=previous.version + 1)
        return self.get(updated.environment, updated.id)

    def remove(self, environment: str, endpoint_id: int) -> None:
        if not self._live(environment, endpoint_id):
            raise NotFound(f"webhook endpoint {endpoint_id} not found")
        self.tombstones.add((environment, endpoint_id))

    def purge_deleted(self, page_size: int = 200, max_endpoints: int = 20) -> int:
        deleted = 0
        for environment, endpoint_id in sorted(self.tombstones)[:max_endpoints]:
            mine = (environment, endpoint_id)
            rest: list[tuple[str, Any]] = [("delivery", k) for k in sorted(self.deliveries) if k[:2] == mine] + \
                [("guard", k) for k in sorted(self.guards) if k[:2] == mine]
            if rest:
                for kind, key in rest[:page_size]:
                    if kind == "delivery":
                        self._drop_delivery(key)
                    else:
                        del self.guards[key]
                deleted += min(len(rest), page_size)
                continue
            self.tombstones.discard(mine)  # nothing left but the tombstone
            del self.endpoints[mine]
            deleted += 1
        return deleted

    def mark_failing(self, endpoint: WebhookEndpoint, at: datetime) -> WebhookEndpoint:
        if not self._live(endpoint.environment, endpoint.id):
            return endpoint
        stored = self.endpoints[(endpoint.environment, endpoint.id)]
        if stored.failing_since is None:
            stored = self.endpoints[(endpoint.environment, endpoint.id)] = replace(stored,
                                                                                  failing_since=stored_time(at))
        return stored

    def mark_succeeded(self, endpoint: WebhookEndpoint) -> None:
        stored = self.endpoints.get((endpoint.environment, endpoint.id))
        if stored is not None and stored.failing_since is not None:
            self.endpoints[(endpoint.environment, endpoint.id)] = replace(stored, failing_since=None)

    def disable(self, endpoint: WebhookEndpoint, at: datetime, reason: str) -> bool:
        if not self._live(endpoint.environment, endpoint.id):
            return False
        stored = self.endpoints[(endpoint.environment, endpoint.id)]
        if stored.failing_since is None or not stored.active:
            return False
        self.endpoints[(endpoint.environment, endpoint.id)] = replace(
            stored, active=False, disabled_at=stored_time(at), disabled_reason=reason, version=stored.version + 1)
        return True

    def _live(self, environment: str, endpoint_id: int) -> bool:
        return (environment, endpoint_id) in self.endpoints and (environment, endpoint_id) not in self.tombstones

    # Deliveries --------------------------------------------------------------------------------

    def add_delivery(self, delivery: WebhookDelivery, wake_at: datetime) -> tuple[WebhookDelivery, bool]:
        guard = (delivery.environment, delivery.endpoint_id, delivery.event_id)
        if guard in self.guards:
            found = self.deliveries.get(self._key(delivery, self.guards[guard]))
            if found is not None:
                return found, False
            delivery = replace(delivery, id=self.guards[guard])  # the earlier call stopped between the two
        else:
            self.guards[guard] = delivery.id
        key = self._key(delivery)
        if key in self.deliveries:
            return self.deliveries[key], False
        self.deliveries[key] = replace(_stored(delivery), last_attempt_at=None, last_status_code=None,
                                       last_error=None, response_excerpt=None, claimed_at=None)
        if delivery.status in WAITING:
            self.wakes[key] = self._wake(delivery, wake_at)
        return delivery, True

    def get_delivery(self, environment: str, endpoint_id: int, delivery_id: int) -> WebhookDelivery:
        found = self.deliveries.get((environment, endpoint_id, delivery_id))
        if found is None:
            raise NotFound(f"delivery {delivery_id} of webhook endpoint {endpoint_id} not found")
        return found

    def deliveries_page(self, environment: str, endpoint_id: int, limit: int,
                        cursor: str | None) -> tuple[list[WebhookDelivery], str | None]:
        return newest_first_page(f"webhook_deliveries:{environment}:{endpoint_id}",
                                 ((padded(k[2]), d) for k, d in self.deliveries.items()
                                  if k[:2] == (environment, endpoint_id)), limit, cursor)

    def claim(self, delivery: WebhookDelivery, now: datetime, lease_until: datetime) -> WebhookDelivery | None:
        stored = self.deliveries.get(self._key(delivery))
        if stored is None or stored.attempts != delivery.attempts or stored.status is not DeliveryStatus.PENDING \
                or stored.attempts >= stored.attempt_limit:
            return None
        return self._write(stored, lease_until, status=DeliveryStatus.DELIVERING, attempts=delivery.attempts + 1,
                           claimed_at=stored_time(now), updated_at=stored_time(now))

    def record_attempt(self, delivery: WebhookDelivery, status: DeliveryStatus, now: datetime,
                       status_code: int | None, error: str | None, excerpt: str | None,
                       next_attempt_at: datetime | None, wake_at: datetime | None,
                       stale_before: datetime | None = None) -> WebhookDelivery | None:
        stored = self.deliveries.get(self._key(delivery))
        if stored is None or stored.status is not DeliveryStatus.DELIVERING or stored.attempts != delivery.attempts:
            return None
        if stale_before is not None and stored.claimed_at is not None and not stored.claimed_at < stale_before:
            return None
        outcome = dict(status=status, updated_at=stored_time(now), last_attempt_at=stored_time(now),
                       last_status_code=status_code, last_error=error, response_excerpt=excerpt,
                       next_attempt_at=stored_time(next_attempt_at) if next_attempt_at else None)
        if wake_at is None:
            outcome["claimed_at"] = None
        return self._write(stored, wake_at, **outcome)

    def fail_delivery(self, delivery: WebhookDelivery, now: datetime, error: str) -> None:
        stored = self.deliveries.get(self._key(delivery))
        if stored is None or stored.status is not delivery.status or stored.attempts != delivery.attempts:
            return
        self._write(stored, None, status=DeliveryStatus.FAILED, updated_at=stored_time(now), last_error=error,
                    next_attempt_at=None, claimed_at=None)

    def requeue(self, delivery: WebhookDelivery, now: datetime, wake_at: datetime) -> WebhookDelivery | None:
        if delivery.status not in RETRYABLE:
            return None
        stored = self.deliveries.get(self._key(delivery))
        if stored is None or stored.status is not delivery.status or stored.attempts != delivery.attempts:
            return None
        return self._write(stored, wake_at, status=DeliveryStatus.PENDING, next_attempt_at=stored_time(now),
                           updated_at=stored_time(now),
                           attempt_limit=limit_after_manual_retry(delivery.status, delivery.attempts, delivery.attempt_limit))

    def due(self, now: datetime, limit: int = 500) -> list[tuple[WebhookDelivery, str]]:
        """Soonest first, each with its place in the list (what push_wake expects to find)."""
        until = iso(now) + "#\uffff"
        waiting = sorted((wake, key) for key, wake in self.wakes.items() if wake <= until)[:limit]
        return [(self.deliveries[key], wake) for wake, key in waiting]

    def remove_delivery(self, delivery: WebhookDelivery) -> None:
        self._drop_delivery(self._key(delivery))
        self.guards.pop((delivery.environment, delivery.endpoint_id, delivery.event_id), None)

    def push_wake(self, delivery: WebhookDelivery, seen_wake: str, wake_at: datetime) -> bool:
        key = self._key(delivery)
        if self.wakes.get(key) != seen_wake:
            return False
        self.wakes[key] = self._wake(delivery, wake_at)
        return True

    def _write(self, stored: WebhookDelivery, wake_at: datetime | None, **changes: Any) -> WebhookDelivery:
        """The delivery changed, in the due list at `wake_at` (None: out of it)."""
        key = self._key(stored)
        self.deliveries[key] = replace(stored, **changes)
        if wake_at is None:
            self.wakes.pop(key, None)
        else:
            self.wakes[key] = self._wake(stored, wake_at)
        return self.deliveries[key]

    def _drop_delivery(self, key: DeliveryKey) -> None:
        self.deliveries.pop(key, None)
        self.wakes.pop(key, None)

    @staticmethod
    def _key(delivery: WebhookDelivery, delivery_id: int | None = None) -> DeliveryKey:
        return delivery.environment, delivery.endpoint_id, delivery.id if delivery_id is None else delivery_id

    @staticmethod
    def _wake(delivery: WebhookDelivery, wake_at: datetime) -> str:
        return f"{iso(wake_at)}#{delivery.environment}#{padded(delivery.endpoint_id)}#{padded(delivery.id)}"


class FakeWebhookSender:
    """`sent`: every request, in order; `answer(request)` gives each outcome (a 200 by default);
    `refused`: URL -> why it is refused (the adapter's check of its addresses); `clock`: the unix
    seconds `now` tells."""

    def __init__(self, answer: Callable[[WebhookRequest], SendOutcome] | None = None) -> None:
        self.sent: list[WebhookRequest] = []
        self.refused: dict[str, str] = {}
        self.clock = 1_714_564_800
        self._answer = answer or (lambda request: SendOutcome(status_code=200, response_excerpt=""))

    def now(self) -> int:
        return self.clock

    def refusal(self, url: str) -> str | None:
        return self.refused.get(url)

    def send(self, request: WebhookRequest) -> SendOutcome:
        self.sent.append(request)
        return self._answer(request)
