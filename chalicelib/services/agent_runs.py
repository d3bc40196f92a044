"""Agent runs: queue one, start it (one run of an agent at a time), run it, and fail it."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from chalicelib.services.ports import Ports


def handle_message(ports: Ports, message: Mapping[str, Any]) -> None:
    raise NotImplementedError("agent runs are being built")


def fail_message(ports: Ports, message: Mapping[str, Any], error: BaseException) -> None:
    raise NotImplementedError("agent runs are being built")
