"""Routes of /users (the people of the environment) and /api_keys (its machines' keys): an admin's,
but for reading who the users are (role table: route_roles.py)."""
from __future__ import annotations

from chalicelib.api.routing import ApiRequest, Router, numeric_id
from chalicelib.api.schemas.common import CursorQuery
from chalicelib.api.schemas.users import (
    ApiKeyList,
    ApiKeyOut,
    ApiKeyWithSecretOut,
    CreateApiKey,
    InviteUser,
    UpdateUser,
    UserOut,
    UserPage,
)
from chalicelib.container import container
from chalicelib.domain.api_keys import ApiKey, KeyAccess
from chalicelib.domain.users import Principal, Role, User, UserStatus
from chalicelib.services import api_keys as key_service
from chalicelib.services import users as service

router = Router("users")
USERS = "/users"
KEYS = "/api_keys"


def user_out(user: User) -> UserOut:
    return UserOut.from_entity(user, role=user.role.value, status=user.status.value)


def key_out(key: ApiKey) -> ApiKeyOut:
    return ApiKeyOut.from_entity(key, access=key.access.value)


def _principal(request: ApiRequest) -> Principal:
    principal: Principal = request.principal
    return principal


@router.route("POST", USERS, summary="Invite a person: the identity provider sends them the invitation",
              status=201, body=InviteUser, response=UserOut, errors=(409, 422))
def invite_user(request: ApiRequest) -> UserOut:
    body: InviteUser = request.body
    return user_out(service.invite(container().ports, request.environment, email=body.email, name=body.name,
                                   role=Role(body.role)))


@router.route("GET", USERS, summary="List the users, newest first", query=CursorQuery, response=UserPage,
              errors=(400, 422))
def list_users(request: ApiRequest) -> UserPage:
    query: CursorQuery = request.query
    users, cursor = container().ports.users.list_page(request.environment, query.limit, query.cursor)
    return UserPage(data=[user_out(u) for u in users], next_cursor=cursor, limit=query.limit)


@router.route("GET", USERS + "/{id}", summary="Get a user", response=UserOut, errors=(404,))
def get_user(request: ApiRequest, id: str) -> UserOut:
    return user_out(container().ports.users.get(request.environment, numeric_id(id, "user")))


@router.route("PATCH", USERS + "/{id}", summary="Change a user's role or name, or deactivate or reactivate them",
              body=UpdateUser, response=UserOut, errors=(404, 409, 422))
def update_user(request: ApiRequest, id: str) -> UserOut:
    body: UpdateUser = request.body
    return user_out(service.update(
        container().ports, request.environment, numeric_id(id, "user"), acting=_principal(request),
        role=Role(body.role) if body.role else None, name=body.name,
        status=UserStatus(body.status) if body.status else None, fields=body.model_fields_set))


@router.route("DELETE", USERS + "/{id}", summary="Deactivate a user: they cannot sign in; what they did keeps "
              "their name", response=UserOut, errors=(404, 409))
def deactivate_user(request: ApiRequest, id: str) -> UserOut:
    return user_out(service.deactivate(container().ports, request.environment, numeric_id(id, "user"),
                                       acting=_principal(request)))


@router.route("POST", KEYS, summary="Create an API key; its secret is in this answer only", status=201,
              body=CreateApiKey, response=ApiKeyWithSecretOut, errors=(422,))
def create_api_key(request: ApiRequest) -> ApiKeyWithSecretOut:
    body: CreateApiKey = request.body
    keys, principal = container().ports.api_keys, _principal(request)
    key, secret = key_service.create_key(keys, request.environment, label=body.label, access=KeyAccess(body.access),
                                         owner_user_id=key_service.owner_of(keys, request.environment,
                                                                            principal.actor))
    return ApiKeyWithSecretOut(**key_out(key).model_dump(), secret=secret)


@router.route("GET", KEYS, summary="List the environment's API keys (never their secrets)", response=ApiKeyList)
def list_api_keys(request: ApiRequest) -> ApiKeyList:
    return ApiKeyList(data=[key_out(k) for k in key_service.keys_of(container().ports.api_keys,
                                                                    request.environment)])


@router.route("DELETE", KEYS + "/{id}", summary="Revoke an API key: it is refused from its next request",
              response=ApiKeyOut, errors=(404, 409))
def revoke_api_key(request: ApiRequest, id: str) -> ApiKeyOut:
    return key_out(key_service.revoke_key(container().ports, request.environment, numeric_id(id, "API key"),
                                          acting=_principal(request)))
