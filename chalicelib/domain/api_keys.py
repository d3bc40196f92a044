"""API keys: the secret a client sends, and the hash we keep instead of it."""
from __future__ import annotations

import hashlib
import re
import secrets
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from chalicelib.domain.errors import ValidationFailed
from chalicelib.domain.users import Role

ENVIRONMENT_PATTERN = re.compile(r"^[a-z0-9_-]{1,64}\Z")  # \Z: "$" would take a final newline too
KEY_PREFIX = "rk_"


class KeyAccess(StrEnum):
    FULL = "full"  # every route, as an admin (every key made before roles existed)
    READ_ONLY = "read_only"  # reads only, as a viewer


@dataclass(frozen=True)
class ApiKey:
    id: int
    environment: str
    key_hash: str
    created_at: datetime
    last_used_at: datetime | None = None
    revoked_at: datetime | None = None
    label: str | None = None
    access: KeyAccess = KeyAccess.FULL
    # The person the key belongs to: whoever created it (its secret is shown to them alone), or the
    # owner of the key it was created with; None for a machine's key made by the command line or by
    # an unowned key. Four eyes count a request sent with an owned key as its owner's.
    owner_user_id: int | None = None

    @property
    def role(self) -> Role:
        return Role.ADMIN if self.access is KeyAccess.FULL else Role.VIEWER

    @property
    def active(self) -> bool:
        return self.revoked_at is None


def generate_secret() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def check_environment_name(name: str) -> None:
    if not ENVIRONMENT_PATTERN.match(name):
        raise ValidationFailed.on("environment", "must be 1 to 64 characters of a-z, 0-9, '_' and '-'")
