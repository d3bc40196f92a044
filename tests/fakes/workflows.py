"""Starting workflows, as `adapters/workflows.py` starts Step Functions executions: one execution per
name, ever. A repeated name is a no-op whatever its input and whether or not the first execution
still runs (Step Functions returns the running execution of the same name and input, and refuses
any other repeat with ExecutionAlreadyExists, which the adapter swallows).

The in-process driver (`chalicelib/local/statemachines.py`) differs in one way: it refuses a
repeated name only while the first execution runs, and runs a finished one's name again.

Nothing runs unless `run` is given: it is called with each new execution's input, at once.
"""
from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any


class FakeWorkflows:
    def __init__(self, run: Callable[[dict], Any] | None = None) -> None:
        self._run = run
        self.executions: list[tuple[str, dict]] = []  # (name, input as Step Functions got it), in the order started
        self.requests: list[tuple[str, dict]] = []  # every start asked for, repeats included

    def start(self, execution_name: str, payload: dict) -> None:
        """Start once per name: a repeated name is a no-op."""
        execution_input = json.loads(json.dumps(payload))  # the adapter sends JSON text
        self.requests.append((execution_name, execution_input))
        if any(name == execution_name for name, _ in self.executions):
            return
        self.executions.append((execution_name, execution_input))
        if self._run is not None:
            self._run(execution_input)
