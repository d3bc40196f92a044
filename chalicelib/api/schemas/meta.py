"""The answer of /health."""
from __future__ import annotations

from typing import Literal

from chalicelib.api.schemas.common import Model


class HealthOut(Model):
    status: Literal["ok"] = "ok"
