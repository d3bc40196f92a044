"""Routes of /webhook_endpoints: endpoints, their secret's rotation, their delivery log and retries.
A secret is answered by create and rotate_secret only."""
from __future__ import annotations

from chalicelib.api.routing import ApiRequest, Router, numeric_id
from chalicelib.api.schemas.common import CursorQuery
from chalicelib.api.schemas.webhook_endpoints import (
    CreateWebhookEndpoint,
    UpdateWebhookEndpoint,
    WebhookDeliveryOut,
    WebhookDeliveryPage,
    WebhookEndpointOut,
    WebhookEndpointPage,
    WebhookEndpointWithSecretOut,
)
from chalicelib.container import container
from chalicelib.domain.clock import utc_now
from chalicelib.domain.errors import BrokenInvariant
from chalicelib.domain.webhooks import WebhookDelivery, WebhookEndpoint
from chalicelib.services import webhooks as service
from chalicelib.services.ports import Webhooks

router = Router("webhook_endpoints")
ENDPOINTS = "/webhook_endpoints"


def endpoint_id(raw: str) -> int:
    return numeric_id(raw, "webhook endpoint")


def endpoint_out(endpoint: WebhookEndpoint) -> WebhookEndpointOut:
    expires = endpoint.previous_secret_expires_at
    return WebhookEndpointOut.from_entity(
        endpoint, previous_secret_expires_at=expires if expires and expires > utc_now() else None)


def with_secret(endpoint: WebhookEndpoint) -> WebhookEndpointWithSecretOut:
    return WebhookEndpointWithSecretOut(**endpoint_out(endpoint).model_dump(), secret=endpoint.secret)


def delivery_out(delivery: WebhookDelivery) -> WebhookDeliveryOut:
    return WebhookDeliveryOut.model_validate(delivery, from_attributes=True)


def _store() -> Webhooks:
    store = container().ports.webhooks
    if store is None:
        raise BrokenInvariant("webhooks are not wired")
    return store


@router.route("POST", ENDPOINTS, summary="Create a webhook endpoint; its signing secret is in this answer only",
              status=201, body=CreateWebhookEndpoint, response=WebhookEndpointWithSecretOut, errors=(422,))
def create_endpoint(request: ApiRequest) -> WebhookEndpointWithSecretOut:
    body: CreateWebhookEndpoint = request.body
    return with_secret(service.create_endpoint(container().ports, request.environment, body.model_dump()))


@router.route("GET", ENDPOINTS, summary="List webhook endpoints, newest first", query=CursorQuery,
              response=WebhookEndpointPage, errors=(400, 422))
def list_endpoints(request: ApiRequest) -> WebhookEndpointPage:
    query: CursorQuery = request.query
    page, cursor = _store().list_page(request.environment, query.limit, query.cursor)
    return WebhookEndpointPage(data=[endpoint_out(e) for e in page], next_cursor=cursor, limit=query.limit)


@router.route("GET", ENDPOINTS + "/{id}", summary="Get a webhook endpoint (never its secret)",
              response=WebhookEndpointOut, errors=(404,))
def get_endpoint(request: ApiRequest, id: str) -> WebhookEndpointOut:
    return endpoint_out(_store().get(request.environment, endpoint_id(id)))


@router.route("PATCH", ENDPOINTS + "/{id}", summary="Change a webhook endpoint's url, events, description or active",
              body=UpdateWebhookEndpoint, response=WebhookEndpointOut, errors=(404, 409, 422))
def update_endpoint(request: ApiRequest, id: str) -> WebhookEndpointOut:
    body: UpdateWebhookEndpoint = request.body
    fields = body.model_dump(include=body.model_fields_set)
    return endpoint_out(service.update_endpoint(container().ports, request.environment, endpoint_id(id), fields))


@router.route("DELETE", ENDPOINTS + "/{id}", summary="Delete a webhook endpoint (its log is cleared afterwards)",
              status=204, errors=(404,))
def delete_endpoint(request: ApiRequest, id: str) -> None:
    service.delete_endpoint(container().ports, request.environment, endpoint_id(id))


@router.route("POST", ENDPOINTS + "/{id}/rotate_secret", summary="A new signing secret (in this answer only); the "
              "previous one keeps signing beside it for 24 hours", response=WebhookEndpointWithSecretOut,
              errors=(404, 409))
def rotate_secret(request: ApiRequest, id: str) -> WebhookEndpointWithSecretOut:
    return with_secret(service.rotate_secret(container().ports, request.environment, endpoint_id(id)))


@router.route("GET", ENDPOINTS + "/{id}/deliveries", summary="An endpoint's deliveries, newest first",
              query=CursorQuery, response=WebhookDeliveryPage, errors=(400, 404, 422))
def list_deliveries(request: ApiRequest, id: str) -> WebhookDeliveryPage:
    query: CursorQuery = request.query
    store = _store()
    endpoint = store.get(request.environment, endpoint_id(id))
    page, cursor = store.deliveries_page(request.environment, endpoint.id, query.limit, query.cursor)
    return WebhookDeliveryPage(data=[delivery_out(d) for d in page], next_cursor=cursor, limit=query.limit)


@router.route("POST", ENDPOINTS + "/{id}/deliveries/{delivery_id}/retry", summary="Send a failed or pending delivery "
              "again now (409 for one that succeeded or is being sent)", status=202, response=WebhookDeliveryOut,
              errors=(404, 409))
def retry_delivery(request: ApiRequest, id: str, delivery_id: str) -> WebhookDeliveryOut:
    return delivery_out(service.retry_delivery(container().ports, request.environment, endpoint_id(id),
                                               numeric_id(delivery_id, "delivery")))
