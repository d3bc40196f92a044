"""Webhook endpoints and their deliveries: who receives which events, how a delivery is signed
(Standard Webhooks: `webhook-id`, `webhook-timestamp`, `webhook-signature: v1,<base64 HMAC-SHA256>`),
when a failed delivery is tried again, and which URLs and addresses may receive one.

Pure: the DNS lookups and the HTTP call are the sender adapter's (adapters/webhook_sender.py); it
asks `address_refusal` about every address a host resolves to, at save time and again at delivery.
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import secrets
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from enum import Enum
from urllib.parse import urlsplit

from chalicelib.domain.events import ALL_EVENTS, EVENT_TYPES
from chalicelib.domain.status_machine import StatusMachine

SECRET_PREFIX = "whsec_"
SECRET_BYTES = 32
# After a rotation the previous secret keeps signing beside the new one this long.
PREVIOUS_SECRET_LIFETIME = timedelta(hours=24)
# Waits after each failed attempt (attempt 1 is the first send); after the last, the delivery fails.
RETRY_DELAYS: tuple[timedelta, ...] = (
    timedelta(seconds=5), timedelta(minutes=1), timedelta(minutes=5), timedelta(minutes=30),
    timedelta(hours=2), timedelta(hours=5), timedelta(hours=10),
)
MAX_ATTEMPTS = 1 + len(RETRY_DELAYS)
JITTER = 0.1  # a wait is its schedule's value times 0.9 .. 1.1
# An endpoint whose deliveries failed without one success for this long is disabled.
DISABLE_AFTER = timedelta(days=3)
RESPONSE_EXCERPT_CHARS = 200
MAX_URL_LENGTH = 2048
# One attempt, from the connection to the last byte of the answer read (settings.webhook_timeout_seconds).
TIMEOUT_SECONDS = 10.0
# Why an attempt a worker claimed but never recorded (killed mid-send) counts as failed.
UNFINISHED_ERROR = "the attempt did not finish (the worker stopped before recording an answer)"


class DeliveryStatus(str, Enum):
    PENDING = "pending"        # waiting for its first or next attempt
    DELIVERING = "delivering"  # a worker claimed the attempt and is sending it
    SUCCEEDED = "succeeded"    # the endpoint answered 2xx
    FAILED = "failed"          # every attempt failed (or the endpoint was inactive); POST .../retry sends again


DELIVERY_STATUSES: StatusMachine[DeliveryStatus] = StatusMachine({
    DeliveryStatus.PENDING: (DeliveryStatus.DELIVERING, DeliveryStatus.PENDING, DeliveryStatus.FAILED),
    # a claim older than the worker could live counts as a failed attempt (-> PENDING or FAILED)
    DeliveryStatus.DELIVERING: (DeliveryStatus.PENDING, DeliveryStatus.SUCCEEDED, DeliveryStatus.FAILED),
    DeliveryStatus.FAILED: (DeliveryStatus.PENDING,),  # a manual retry
    DeliveryStatus.SUCCEEDED: (),
})
RETRYABLE = (DeliveryStatus.PENDING, DeliveryStatus.FAILED)  # POST .../retry; others are 409


@dataclass(frozen=True)
class WebhookEndpoint:
    environment: str
    id: int
    url: str
    events: tuple[str, ...]
    description: str
    active: bool
    secret: str
    created_at: datetime
    updated_at: datetime
    previous_secret: str | None = None
    previous_secret_expires_at: datetime | None = None
    failing_since: datetime | None = None  # the first failed attempt since the last success
    disabled_at: datetime | None = None
    disabled_reason: str | None = None
    version: int = 1

    def receives(self, event_type: str) -> bool:
        return self.active and (ALL_EVENTS in self.events or event_type in self.events)

    def signing_secrets(self, now: datetime) -> list[str]:
        """The current secret, and the previous one while it is still valid after a rotation."""
        valid = [self.secret]
        if self.previous_secret and self.previous_secret_expires_at and now < self.previous_secret_expires_at:
            valid.append(self.previous_secret)
        return valid

    def rotated(self, new_secret: str, now: datetime) -> WebhookEndpoint:
        return replace(self, secret=new_secret, previous_secret=self.secret,
                       previous_secret_expires_at=now + PREVIOUS_SECRET_LIFETIME, updated_at=now)


@dataclass(frozen=True)
class WebhookDelivery:
    environment: str
    endpoint_id: int
    id: int
    event_id: str
    event_type: str
    payload: str  # the body sent, the same bytes on every attempt (the event's JSON)
    status: DeliveryStatus
    created_at: datetime
    updated_at: datetime
    attempts: int = 0
    next_attempt_at: datetime | None = None
    last_attempt_at: datetime | None = None
    last_status_code: int | None = None
    last_error: str | None = None
    response_excerpt: str | None = None
    claimed_at: datetime | None = None
    # Attempts it may make: MAX_ATTEMPTS, one more after each manual retry of a failed delivery.
    attempt_limit: int = MAX_ATTEMPTS

    @property
    def attempts_left(self) -> bool:
        return self.attempts < self.attempt_limit


@dataclass(frozen=True)
class SendOutcome:
    """What one attempt got: a status code and the start of the answer, or why none came."""
    status_code: int | None = None
    response_excerpt: str | None = None
    error: str | None = None

    @property
    def succeeded(self) -> bool:
        return self.status_code is not None and 200 <= self.status_code < 300


@dataclass(frozen=True)
class WebhookRequest:
    url: str
    headers: dict[str, str] = field(default_factory=dict)
    body: str = ""


# Secrets and signatures ---------------------------------------------------------------------

def new_secret() -> str:
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(SECRET_BYTES)).decode()


def _key(secret: str) -> bytes:
    return base64.b64decode(secret.removeprefix(SECRET_PREFIX))


def sign(secret: str, message_id: str, timestamp: int, body: str) -> str:
    """One `v1,<base64>` signature of `{id}.{timestamp}.{body}` (Standard Webhooks)."""
    digest = hmac.new(_key(secret), f"{message_id}.{timestamp}.{body}".encode(), hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def webhook_headers(signing_secrets: list[str], message_id: str, timestamp: int, body: str) -> dict[str, str]:
    """The three headers of one attempt: its id (the event's, the same on every attempt), its time
    (unix seconds of this attempt) and one signature per valid secret, space-separated."""
    return {
        "webhook-id": message_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": " ".join(sign(s, message_id, timestamp, body) for s in signing_secrets),
    }


# Retries and disabling ------------------------------------------------------------------------

def retry_delay(attempts_made: int, random_fraction: float) -> timedelta | None:
    """How long to wait after `attempts_made` failed attempts; None: give up. `random_fraction`
    in [0, 1) spreads retries of many deliveries a little (jitter)."""
    if attempts_made < 1 or attempts_made >= MAX_ATTEMPTS:
        return None
    base = RETRY_DELAYS[attempts_made - 1]
    return base * (1 - JITTER + 2 * JITTER * random_fraction)


def wait_after_failure(attempts_made: int, attempt_limit: int, random_fraction: float) -> timedelta | None:
    """The wait before the next attempt of a delivery whose `attempts_made`-th attempt failed; None:
    it has used its `attempt_limit` (or the schedule's end) and fails."""
    if attempts_made >= attempt_limit:
        return None
    return retry_delay(attempts_made, random_fraction)


def limit_after_manual_retry(status: DeliveryStatus, attempts_made: int, attempt_limit: int) -> int:
    """The attempts a delivery may make once a person retries it: a failed one exactly one more,
    whatever it failed of (its attempts used, or an endpoint inactive before they were: the schedule
    must not take it up again); a pending one keeps its schedule."""
    if status is DeliveryStatus.FAILED:
        return attempts_made + 1
    return max(attempt_limit, attempts_made + 1)


def gave_up_error(attempts_made: int) -> str:
    return f"given up: {attempts_made} attempts made"


def should_disable(failing_since: datetime | None, now: datetime) -> bool:
    return failing_since is not None and now - failing_since >= DISABLE_AFTER


def disabled_reason(failing_since: datetime) -> str:
    return (f"disabled automatically: every delivery failed since {failing_since.isoformat(timespec='seconds')} "
            f"(more than {DISABLE_AFTER.days} days); fix the endpoint, then set active to true")


# Events subscribed ----------------------------------------------------------------------------

def event_problems(events: list[str]) -> list[tuple[int, str]]:
    """(index, message) of every entry that is neither a known event type nor "*"."""
    return [(i, f"unknown event type '{e[:64]}'; known: {ALL_EVENTS} or one of {', '.join(EVENT_TYPES)}")
            for i, e in enumerate(events) if e != ALL_EVENTS and e not in EVENT_TYPES]


def normalised_events(events: list[str]) -> tuple[str, ...]:
    """Each once, in the order given; "*" alone when it is there (it covers every type)."""
    return (ALL_EVENTS,) if ALL_EVENTS in events else tuple(dict.fromkeys(events))


# URLs and addresses ---------------------------------------------------------------------------

@dataclass(frozen=True)
class UrlPolicy:
    """On AWS: https only, public addresses only. Locally: http too, and loopback addresses, but
    not on `own_ports`, the local stack's own services' (a webhook could read or reset their state)."""
    local: bool
    own_ports: frozenset[int] = frozenset()

    def url_problem(self, url: str) -> str | None:
        """What is wrong with a URL as written (its host's addresses are checked apart)."""
        if len(url) > MAX_URL_LENGTH:
            return f"is longer than {MAX_URL_LENGTH} characters"
        try:
            parts = urlsplit(url)
            port = parts.port
        except ValueError:
            return "is not a valid URL"
        schemes = ("https", "http") if self.local else ("https",)
        if parts.scheme not in schemes:
            return "must use https" if not self.local else "must use http or https"
        if not parts.hostname:
            return "has no host"
        if parts.username is not None or parts.password is not None:
            return "must not carry a user name or password"
        if parts.fragment:
            return "must not have a fragment (#...)"
        if port == 0:
            return "has port 0"
        if any(c.isspace() or ord(c) < 0x20 for c in url):
            return "must not contain spaces or control characters"
        literal = _ip_literal(parts.hostname)
        if literal is not None:
            return self.address_problem(literal, port or default_port(parts.scheme))
        return None

    def address_problem(self, address: str | ipaddress.IPv4Address | ipaddress.IPv6Address,
                        port: int | None = None, named: bool = True) -> str | None:
        """Why deliveries may not go to this address (on this port), or None. `named`: the address
        is said (one the URL names itself); not for one its host resolved to, which would tell a
        client how the service's DNS answers (the rule alone is said then)."""
        ip = ipaddress.ip_address(address) if isinstance(address, str) else address
        if isinstance(ip, ipaddress.IPv6Address):
            if ip.ipv4_mapped is not None:
                ip = ip.ipv4_mapped
            else:
                tunnel = _tunnel_problem(ip)
                if tunnel:
                    return tunnel if named else tunnel.split(" (", 1)[0]
        shown = f" ({ip})" if named else ""
        if ip.is_loopback:
            if not self.local:
                return f"resolves to a loopback address{shown}"
            if port in self.own_ports:
                return (f"names a port of the local stack's own services ({port}: its DynamoDB, S3, AWS server "
                        "or the API itself), which webhooks may not reach")
            return None
        for kind, test in (("unspecified", ip.is_unspecified), ("link-local", ip.is_link_local),
                           ("multicast", ip.is_multicast), ("private", ip.is_private),
                           ("reserved", ip.is_reserved)):
            if test:
                return f"resolves to a {kind} address{shown}"
        if not ip.is_global:
            return f"resolves to a non-public address{shown}"
        return None


def default_port(scheme: str) -> int:
    return 443 if scheme == "https" else 80


# IPv6 ranges that carry an IPv4 address or reach one through a relay or translator, refused
# whatever the Python version's is_private / is_global say of them (that changed between patch
# releases): the IPv4 address inside is named.
NAT64_NETWORKS = (ipaddress.IPv6Network("64:ff9b::/96"), ipaddress.IPv6Network("64:ff9b:1::/48"))


def _tunnel_problem(ip: ipaddress.IPv6Address) -> str | None:
    if ip.sixtofour is not None:
        return f"resolves to a 6to4 address ({ip}, carrying {ip.sixtofour})"
    if ip.teredo is not None:
        return f"resolves to a Teredo address ({ip}, carrying {ip.teredo[1]})"
    if ip in NAT64_NETWORKS[0]:
        return f"resolves to a NAT64 address ({ip}, carrying {ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)})"
    if ip in NAT64_NETWORKS[1]:
        return f"resolves to a NAT64 address ({ip})"
    if ip.is_site_local:
        return f"resolves to a site-local address ({ip})"
    return None


def _ip_literal(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None
