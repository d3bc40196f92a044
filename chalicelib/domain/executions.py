"""Names of state-machine executions: unique per job or run and attempt, within Step Functions' limits."""
from __future__ import annotations

import hashlib
from datetime import datetime

MAX_EXECUTION_NAME = 80  # Step Functions' limit
# The error a Map state fails with when an item failed for good (no failure is tolerated).
MAP_ITEM_FAILED = "States.ExceedToleratedFailureThreshold"


def resume_label(resumed_at: datetime) -> str:
    """The attempt part of a resumed execution's name: unique per resume, as Step Functions wants."""
    return f"resumed{resumed_at:%Y%m%dT%H%M%S%f}"


def execution_name(*parts: object) -> str:
    """The parts joined by '-', cut to Step Functions' 80 characters with a hash of the whole
    kept at the end, so that names stay unique (an environment name alone may be 64 long)."""
    name = "-".join(str(p) for p in parts)
    if len(name) <= MAX_EXECUTION_NAME:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:16]
    return f"{name[:MAX_EXECUTION_NAME - len(digest) - 1]}-{digest}"


class ExecutionStopped(Exception):
    """The process is stopping (Ports.stopping): the work stops at a checkpoint and is resumed
    from it, by the message left with its queue or by the resume at the next start."""
