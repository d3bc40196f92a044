"""A Lambda that dies part-way through a phase, for the tests that kill a run at each step of
its writes (tests/integration/test_run_crash_points.py, tests/services/test_run_inputs_lost.py)."""
from __future__ import annotations

import copy
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
                            real(args[0][:len(args[0]) // 2], *args[1:], **kwargs)
                if self.dead:
                    raise Killed(f"the Lambda died at {name}")
            return real(*args, **kwargs)
        return call



class Replaced:
    """A port with some of its methods replaced (`Replaced(ports.audit, append=dies)`); every other
    attribute is the port's own."""

    def __init__(self, port: Any, **methods: Any) -> None:
        self._port, self._methods = port, methods

    def __getattr__(self, name: str) -> Any:
        return self._methods[name] if name in self._methods else getattr(self._port, name)


@contextmanager
def ports_swapped(services: Any, **ports: Any) -> Iterator[Any]:
    """Inside, the container's ports have `ports` in place of their own (what requests and handlers
    use); the ports as they were come back after."""
    alive = services.ports
    services.ports = replace(alive, **ports)
    try:
        yield services.ports
    finally:
        services.ports = alive


@contextmanager
def failing_appends(services: Any, action: str) -> Iterator[None]:
    """Inside, the audit trail of `services` refuses every entry of `action` (the table throttling,
    say); every other entry is written."""
    log = services.ports.audit

    def append(environment: str, **entry: Any) -> Any:
        if entry.get("action") == action:
            raise RuntimeError("the table is throttling")
        return log.append(environment, **entry)

    with ports_swapped(services, audit=Replaced(log, append=append)):
        yield


def one_by_one(claims: Any) -> Any:
    """The claims port (adapter or fake) claiming record by record, as where claims are not made in
    transactions (settings.claims_in_transactions): a persist can then die with a match half claimed."""
    single = copy.copy(claims)
    single.in_transactions = False
    return single
