"""Bodies and answers of /webhook_endpoints and their deliveries."""
from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, StringConstraints, WithJsonSchema

from chalicelib.api.schemas.common import Description, Model, RequestModel, Timestamp, unchanged_when_absent
from chalicelib.domain.events import ALL_EVENTS, EVENT_TYPES

WebhookUrl = Annotated[str, StringConstraints(min_length=1, max_length=2048), WithJsonSchema({
    "type": "string", "format": "uri", "pattern": "^https?://", "minLength": 1, "maxLength": 2048,
    "examples": ["https://hooks.example.com/recon"]})]
# domain.webhooks.event_problems checks the names (its message lists them), so the enum only documents them.
EventTypes = Annotated[list[Annotated[str, StringConstraints(max_length=100), Field(
    json_schema_extra={"enum": [ALL_EVENTS, *EVENT_TYPES]})]], Field(min_length=1, max_length=50)]


class CreateWebhookEndpoint(RequestModel):
    url: WebhookUrl = Field(description="https; it may not resolve to a private, loopback or link-local address "
                            "(locally, http and loopback are allowed too)")
    events: EventTypes = Field(description='Event types to receive, or ["*"] for all')
    description: Description = ""
    active: bool = True


class UpdateWebhookEndpoint(RequestModel):
    url: WebhookUrl = unchanged_when_absent()
    events: EventTypes = unchanged_when_absent('Event types to receive, or ["*"] for all')
    description: Description = unchanged_when_absent()
    active: bool = unchanged_when_absent("true again clears an automatic disable")


class WebhookEndpointOut(Model):
    id: int
    url: str
    events: list[str]
    description: str
    active: bool
    disabled_reason: str | None = Field(description="Why the service disabled the endpoint (deliveries failed for "
                                        "3 days); null when it did not")
    disabled_at: Timestamp | None
    failing_since: Timestamp | None = Field(description="The first failed attempt since the last success")
    previous_secret_expires_at: Timestamp | None = Field(description="After a rotation, when the previous secret "
                                                         "stops signing")
    created_at: Timestamp
    updated_at: Timestamp


class WebhookEndpointWithSecretOut(WebhookEndpointOut):
    secret: str = Field(description="The signing secret (whsec_...): shown in this response only")


class WebhookEndpointPage(Model):
    data: list[WebhookEndpointOut]
    next_cursor: str | None
    limit: int


class WebhookDeliveryOut(Model):
    id: int
    endpoint_id: int
    event_id: str = Field(description="Also the webhook-id header: the same on every attempt")
    event_type: str
    status: Literal["pending", "delivering", "succeeded", "failed"]
    attempts: int
    last_status_code: int | None
    last_error: str | None = Field(description="A timeout, a connection error, a refused address, or the HTTP status")
    response_excerpt: str | None = Field(description="The start of the endpoint's last answer (200 characters)")
    next_attempt_at: Timestamp | None
    last_attempt_at: Timestamp | None
    created_at: Timestamp
    updated_at: Timestamp


class WebhookDeliveryPage(Model):
    data: list[WebhookDeliveryOut]
    next_cursor: str | None
    limit: int
