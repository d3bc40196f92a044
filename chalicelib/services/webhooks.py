"""Webhooks: endpoints (create, change, delete, rotate their secret), the fan-out of an event to
the endpoints of its environment, one attempt of a delivery, retries and the sweep of due ones.

Everything after an event is queue-driven: the fan-out makes one delivery per endpoint and queues
one message each; a worker sends one attempt per message. A failed attempt is tried again after
the schedule's wait (domain/webhooks.py RETRY_DELAYS): SQS carries waits up to its 15-minute
delay, the sweeper queues longer ones from the due list (and any message that got lost). An
attempt whose worker died before recording it counts as failed when its claim runs out: it
backs off like any other, and a delivery never makes more attempts than it is allowed."""
from __future__ import annotations

import json
import math
import random
import uuid
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from chalicelib.domain.audit import system_actor
from chalicelib.domain.clock import iso, utc_now
from chalicelib.domain.errors import Conflict, FieldError, NotFound, ValidationFailed
from chalicelib.domain.events import Event
from chalicelib.domain.webhooks import (
    RETRYABLE,
    UNFINISHED_ERROR,
    DeliveryStatus,
    SendOutcome,
    WebhookDelivery,
    WebhookEndpoint,
    WebhookRequest,
    disabled_reason,
    event_problems,
    gave_up_error,
    new_secret,
    normalised_events,
    should_disable,
    wait_after_failure,
    webhook_headers,
)
from chalicelib.services import audit
from chalicelib.services.ports import Ports, Webhooks, WebhookSender

SQS_MAX_DELAY = timedelta(seconds=900)
# A delivery SQS carries is looked at by the sweeper this long after its time, in case its message
# was lost; the sweeper that queues one pushes its look on by as much again.
LOST_MESSAGE_GRACE = timedelta(minutes=5)
# How long a worker's claim on an attempt holds (the worker's timeout is 60 s, a send's at most 10 s
# in all); a claim older than this is an attempt that did not finish.
CLAIM_LEASE = timedelta(minutes=2)
EARLY_SLACK = timedelta(seconds=1)  # an SQS delay is whole seconds; a message a moment early is due
INACTIVE_ERROR = "not sent: the endpoint is inactive"


# Endpoints ------------------------------------------------------------------------------------

def create_endpoint(ports: Ports, environment: str, fields: dict[str, Any]) -> WebhookEndpoint:
    webhooks, sender = ports.webhooks, ports.webhook_sender
    _check(sender, fields)
    now = utc_now()
    endpoint = WebhookEndpoint(
        environment=environment, id=ports.counters.next_id(environment, "webhook_endpoint"), url=fields["url"],
        events=normalised_events(fields["events"]), description=fields.get("description") or "",
        active=fields.get("active", True), secret=new_secret(), created_at=now, updated_at=now)
    webhooks.add(endpoint)
    return endpoint


def update_endpoint(ports: Ports, environment: str, endpoint_id: int, fields: dict[str, Any]) -> WebhookEndpoint:
    webhooks, sender = ports.webhooks, ports.webhook_sender
    _check(sender, fields)
    previous = webhooks.get(environment, endpoint_id)
    updated = replace(previous, updated_at=utc_now())
    if "url" in fields:
        updated = replace(updated, url=fields["url"])
    if "events" in fields:
        updated = replace(updated, events=normalised_events(fields["events"]))
    if "description" in fields:
        updated = replace(updated, description=fields["description"])
    if "active" in fields:
        updated = replace(updated, active=fields["active"])
        if fields["active"]:  # switched on again: the failures that disabled it are forgiven
            updated = replace(updated, disabled_at=None, disabled_reason=None, failing_since=None)
    saved = webhooks.save(updated, previous)
    audit.note_change(previous, saved)
    return saved


def delete_endpoint(ports: Ports, environment: str, endpoint_id: int) -> None:
    """Gone at once for every reader; its delivery log is cleared by the sweeper afterwards."""
    webhooks = ports.webhooks
    webhooks.remove(environment, endpoint_id)


def rotate_secret(ports: Ports, environment: str, endpoint_id: int) -> WebhookEndpoint:
    """A new secret; the one it replaces keeps signing beside it for 24 hours (and one rotated
    before that stops at once: two secrets at most)."""
    webhooks = ports.webhooks
    previous = webhooks.get(environment, endpoint_id)
    saved = webhooks.save(previous.rotated(new_secret(), utc_now()), previous)
    audit.note_change(previous, saved)  # the secrets read "[redacted]": the entry says they changed
    return saved


def _check(sender: WebhookSender, fields: dict[str, Any]) -> None:
    errors = []
    if "url" in fields:
        problem = sender.refusal(fields["url"])
        if problem:
            errors.append(FieldError("url", problem))
    if "events" in fields:
        if not fields["events"]:
            errors.append(FieldError("events", 'must name at least one event type, or "*" for all'))
        errors += [FieldError(f"events[{i}]", message) for i, message in event_problems(fields["events"])]
    if errors:
        raise ValidationFailed(errors)


# Fan-out and delivery -------------------------------------------------------------------------

def message_of(delivery: WebhookDelivery) -> dict[str, str | int]:
    return {"environment": delivery.environment, "endpoint_id": delivery.endpoint_id, "delivery_id": delivery.id}


def fan_out(ports: Ports, environment: str, event: Event) -> list[WebhookDelivery]:
    """One delivery of `event` per active endpoint of `environment` that takes its type, each
    queued. An event that comes again (at least once) finds its deliveries made: nothing new."""
    webhooks, queue = ports.webhooks, ports.webhook_delivery_queue
    now = utc_now()
    payload = json.dumps(event.to_json(), separators=(",", ":"), ensure_ascii=False)
    made = []
    for endpoint in webhooks.of_environment(environment):
        if not endpoint.receives(event.type):
            continue
        delivery_id = ports.counters.next_id(environment, "webhook_delivery")
        delivery = WebhookDelivery(
            environment=environment, endpoint_id=endpoint.id, id=delivery_id,
            event_id=event.id, event_type=event.type, payload=payload, status=DeliveryStatus.PENDING,
            created_at=now, updated_at=now, next_attempt_at=now)
        stored, _ = webhooks.add_delivery(delivery, wake_at=now + LOST_MESSAGE_GRACE)
        if stored.status is DeliveryStatus.PENDING and stored.attempts == 0:
            queue.send(message_of(stored))  # again for a delivery a crash left unqueued: the claim dedupes
            made.append(stored)
    return made


def deliver(ports: Ports, environment: str, endpoint_id: int, delivery_id: int) -> WebhookDelivery | None:
    """One attempt, if the delivery is due and no one else is making it: a delivery that ended
    (succeeded, failed) or that is not due yet is left alone, so any number of messages for it
    make one attempt at a time. A delivery found mid-attempt past its claim's lease (its worker
    died) has that attempt recorded as failed, and waits its turn like any failed attempt."""
    webhooks, sender = ports.webhooks, ports.webhook_sender
    now = utc_now()
    delivery = _find(webhooks, environment, endpoint_id, delivery_id)
    if delivery is None or not _due(delivery, now):
        return delivery
    endpoint = _find_endpoint(webhooks, environment, endpoint_id)
    if endpoint is None:  # deleted: nothing will send it, and the sweeper must not queue it again
        webhooks.remove_delivery(delivery)
        return None
    if delivery.status is DeliveryStatus.DELIVERING:
        unfinished = _failed(ports, endpoint, delivery, now, SendOutcome(error=UNFINISHED_ERROR),
                             stale_before=now - CLAIM_LEASE)
        return unfinished or delivery
    if not endpoint.active:
        webhooks.fail_delivery(delivery, now, INACTIVE_ERROR)
        return None
    if not delivery.attempts_left:  # (a delivery stored before attempts were counted against a limit)
        webhooks.fail_delivery(delivery, now, gave_up_error(delivery.attempts))
        return None
    claimed = webhooks.claim(delivery, now, lease_until=now + CLAIM_LEASE)
    if claimed is None:
        return None
    headers = webhook_headers(endpoint.signing_secrets(now), claimed.event_id, sender.now(), claimed.payload)
    outcome = sender.send(WebhookRequest(url=endpoint.url, headers=headers, body=claimed.payload))
    after = utc_now()
    if outcome.succeeded:
        done = webhooks.record_attempt(claimed, DeliveryStatus.SUCCEEDED, after, outcome.status_code, None,
                                       outcome.response_excerpt, None, None)
        webhooks.mark_succeeded(endpoint)
        return done
    return _failed(ports, endpoint, claimed, after, outcome)


def _failed(ports: Ports, endpoint: WebhookEndpoint, claimed: WebhookDelivery, now: datetime,
            outcome: SendOutcome, stale_before: datetime | None = None) -> WebhookDelivery | None:
    """Record a failed attempt: wait the schedule's time before the next, or fail the delivery when
    it used its attempts; the endpoint's failing clock runs, and after 3 days it is disabled."""
    webhooks, queue = ports.webhooks, ports.webhook_delivery_queue
    error = outcome.error or f"answered HTTP {outcome.status_code}"
    wait = wait_after_failure(claimed.attempts, claimed.attempt_limit, random.random())
    if wait is None:
        done = webhooks.record_attempt(claimed, DeliveryStatus.FAILED, now, outcome.status_code, error,
                                       outcome.response_excerpt, None, None, stale_before=stale_before)
    else:
        carried = wait <= SQS_MAX_DELAY
        done = webhooks.record_attempt(claimed, DeliveryStatus.PENDING, now, outcome.status_code, error,
                                       outcome.response_excerpt, now + wait,
                                       now + wait + (LOST_MESSAGE_GRACE if carried else timedelta(0)),
                                       stale_before=stale_before)
        if done is not None and carried:
            queue.send(message_of(done), delay_seconds=math.ceil(wait.total_seconds()))
    if done is None:  # recorded by someone else meanwhile
        return None
    failing = webhooks.mark_failing(endpoint, now)
    if failing.active and failing.failing_since is not None and should_disable(failing.failing_since, now):
        reason = disabled_reason(failing.failing_since)
        with audit.change_in_flight(ports, failing.environment, actor=system_actor("webhooks"),
                                    request_id=uuid.uuid4().hex,
                                    action="webhook_endpoint.disabled", resource_type="webhook_endpoint",
                                    resource_id=failing.id,
                                    summary={"reason": reason, "failing_since": iso(failing.failing_since)}) as noted:
            noted.changed = webhooks.disable(failing, now, reason)
    return done


def _due(delivery: WebhookDelivery, now: datetime) -> bool:
    if delivery.status is DeliveryStatus.PENDING:
        return delivery.next_attempt_at is None or delivery.next_attempt_at <= now + EARLY_SLACK
    if delivery.status is DeliveryStatus.DELIVERING:  # a worker died holding it: its attempt failed
        return delivery.claimed_at is None or delivery.claimed_at < now - CLAIM_LEASE
    return False


def retry_delivery(ports: Ports, environment: str, endpoint_id: int, delivery_id: int) -> WebhookDelivery:
    """Send a failed or waiting delivery again now. 409 for one that succeeded (a client that wants
    it again has it already), one being sent at this moment, or one of an inactive endpoint."""
    webhooks, queue = ports.webhooks, ports.webhook_delivery_queue
    endpoint = webhooks.get(environment, endpoint_id)
    delivery = webhooks.get_delivery(environment, endpoint_id, delivery_id)
    if delivery.status not in RETRYABLE:
        raise Conflict(f"delivery {delivery_id} is {delivery.status.value}; only a failed or pending delivery "
                       "can be retried")
    if not endpoint.active:
        raise Conflict(f"webhook endpoint {endpoint_id} is inactive; set active to true before retrying")
    now = utc_now()
    requeued = webhooks.requeue(delivery, now, now + LOST_MESSAGE_GRACE)
    if requeued is None:
        raise Conflict(f"delivery {delivery_id} changed meanwhile; read it again")
    queue.send(message_of(requeued))
    return requeued


def sweep(ports: Ports, now: datetime | None = None) -> int:
    """Queue every delivery whose time came and that no message carries (a wait past SQS's 15
    minutes, a lost message, a worker that died mid-attempt), and clear a page of each deleted
    endpoint's delivery log. Returns how many it queued."""
    now = now or utc_now()
    ports.webhooks.purge_deleted()
    queued = 0
    for delivery, seen in ports.webhooks.due(now):
        if ports.webhooks.push_wake(delivery, seen, now + LOST_MESSAGE_GRACE):
            ports.webhook_delivery_queue.send(message_of(delivery))
            queued += 1
    return queued


def _find(webhooks: Webhooks, environment: str, endpoint_id: int, delivery_id: int) -> WebhookDelivery | None:
    try:
        return webhooks.get_delivery(environment, endpoint_id, delivery_id)
    except NotFound:  # its endpoint was deleted meanwhile
        return None


def _find_endpoint(webhooks: Webhooks, environment: str, endpoint_id: int) -> WebhookEndpoint | None:
    try:
        return webhooks.get(environment, endpoint_id)
    except NotFound:
        return None
