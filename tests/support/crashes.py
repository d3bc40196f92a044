"""A Lambda that dies part-way through a phase, for the tests that kill a run at each step of
its writes (tests/integration/test_run_crash_points.py, tests/services/test_run_inputs_lost.py)."""
from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any


class Killed(Exception):
    """The Lambda died."""


class Dies:
    """A port of a Lambda that dies at its `n`-th call of `method`, and writes nothing after: every
    later call fails too. `half`: that call first writes half of the batch it was given (a batch
    write cut short)."""

    def __init__(self, port: Any, method: str, n: int, half: bool = False) -> None:
        self._port, self._method, self._n, self._half = port, method, n, half
        self._lock, self.calls, self.dead = threading.Lock(), 0, False

    def __getattr__(self, name: str) -> Any:
        real = getattr(self._port, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            with self._lock:  # claims come from a thread pool
                if name == self._method and not self.dead:
                    self.calls += 1
                    if self.calls == self._n:
                        self.dead = True
                        if self._half:
                            real(args[0][:len(args[0]) // 2])
                if self.dead:
                    raise Killed(f"the Lambda died at {name}")
            return real(*args, **kwargs)
        return call



class _RefusingAppends:
    """An audit log that refuses every entry of one action (the table throttling, say)."""

    def __init__(self, log: Any, action: str) -> None:
        self._log, self._action = log, action

    def __getattr__(self, name: str) -> Any:
        return getattr(self._log, name)

    def append(self, environment: str, **entry: Any) -> Any:
        if entry.get("action") == self._action:
            raise RuntimeError("the table is throttling")
        return self._log.append(environment, **entry)


@contextmanager
def failing_appends(services: Any, action: str) -> Iterator[None]:
    """Inside, the audit trail of `services` refuses every entry of `action`; every other entry is
    written."""
    alive = services.ports
    services.ports = replace(alive, audit=_RefusingAppends(alive.audit, action))
    try:
        yield
    finally:
        services.ports = alive
