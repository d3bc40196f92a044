"""API key use cases: create (the secret is shown once), list, revoke, authenticate."""
from __future__ import annotations

from datetime import timedelta

from chalicelib.domain.api_keys import ApiKey, KeyAccess, check_environment_name, generate_secret, hash_secret
from chalicelib.domain.audit import api_key_actor
from chalicelib.domain.clock import utc_now
from chalicelib.domain.errors import Conflict, NotFound, Unauthorized
from chalicelib.domain.users import Principal
from chalicelib.services.ports import ApiKeys, Ports
from chalicelib.services.users import active_admins


def create_key(keys: ApiKeys, environment: str, label: str | None = None,
               secret: str | None = None, access: KeyAccess = KeyAccess.FULL,
               owner_user_id: int | None = None) -> tuple[ApiKey, str]:
    """Store a new key for `environment`; return it with its secret, which is never stored."""
    check_environment_name(environment)
    secret = secret or generate_secret()
    key = ApiKey(id=keys.next_id(), environment=environment, key_hash=hash_secret(secret),
                 created_at=utc_now(), label=label, access=access, owner_user_id=owner_user_id)
    keys.add(key)
    return key, secret


def owner_of(keys: ApiKeys, environment: str, actor: str | None) -> int | None:
    """The person behind an actor: a person's own id (`user:<id>`), an owned key's owner
    (`api_key:<id>`); None for an unowned key or any other actor."""
    if actor is None:
        return None
    kind, _, number = actor.partition(":")
    if not number.isdigit():
        return None
    if kind == "user":
        return int(number)
    if kind != "api_key":
        return None
    key = next((k for k in keys_of(keys, environment) if k.id == int(number)), None)
    return key.owner_user_id if key is not None else None


def keys_of(keys: ApiKeys, environment: str) -> list[ApiKey]:
    """The environment's keys, revoked ones too, by id. (Keys are listed in one partition of every
    environment's keys: there are few, and a list is an admin's rare request.)"""
    return [key for key in keys.list() if key.environment == environment]


def revoke_key(ports: Ports, environment: str, key_id: int, *, acting: Principal) -> ApiKey:
    """Revoke one of the environment's keys (again: unchanged); another environment's is not found.
    Refused (409): the caller's own key, and the environment's last active full key while it has no
    active admin user: it keeps a way in besides the command line. (A concurrent deactivation of
    its last admin can still leave it with neither: the two checks are not one write.)"""
    keys = ports.api_keys
    mine = keys_of(keys, environment)
    key = next((k for k in mine if k.id == key_id), None)
    if key is None:
        raise NotFound(f"API key {key_id} not found")
    if not key.active:
        return key
    if acting.actor == api_key_actor(key_id):
        raise Conflict("you cannot revoke the key this request is sent with; use another key or sign in")
    if key.access is KeyAccess.FULL and not any(k.active and k.access is KeyAccess.FULL and k.id != key_id
                                                  for k in mine) and not active_admins(ports, environment):
        raise Conflict(f"API key {key_id} is the environment's last full key and it has no active admin; "
                       "invite an admin or make another full key first")
    return keys.revoke(key_id)


def ensure_key(keys: ApiKeys, environment: str, secret: str, label: str) -> ApiKey:
    """Make `secret` a working key of `environment` (idempotent; used to seed the local stack)."""
    existing = keys.find_by_hash(hash_secret(secret))
    if existing and existing.active and existing.environment == environment:
        return existing
    if existing:
        raise ValueError("that key is already stored for another environment or was revoked; choose another")
    return create_key(keys, environment, label=label, secret=secret)[0]


def revoke_keys_labelled(keys: ApiKeys, label: str) -> None:
    for key in keys.list():
        if key.label == label and key.active:
            keys.revoke(key.id)


def authenticate(keys: ApiKeys, secret: str | None, last_used_resolution: timedelta) -> ApiKey:
    if not secret:
        raise Unauthorized("missing API key: send it in the X-API-KEY header")
    key = keys.find_by_hash(hash_secret(secret))
    if key is None or not key.active:
        raise Unauthorized("invalid or revoked API key")
    keys.touch(key, last_used_resolution)
    return key
