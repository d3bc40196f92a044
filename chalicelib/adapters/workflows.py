"""Starting workflows: Step Functions executions on AWS, the in-process ASL driver locally."""
from __future__ import annotations

import json
from functools import cached_property


class StepFunctionsWorkflows:
    """`state_machine` is its ARN (as deployed: no listing, so no permission on every machine)
    or its name (the embedded local AWS, where the ARN is looked up once)."""

    def __init__(self, sfn, state_machine: str) -> None:
        self._sfn = sfn
        self._name = state_machine

    @cached_property
    def _arn(self) -> str:
        if self._name.startswith("arn:"):
            return self._name
        for page in self._sfn.get_paginator("list_state_machines").paginate():
            for machine in page["stateMachines"]:
                if machine["name"] == self._name:
                    return machine["stateMachineArn"]
        raise LookupError(f"state machine {self._name} not found; deploy infra/workflows.yaml first")

    def start(self, execution_name: str, payload: dict) -> None:
        """Start once per name: a repeat of a running execution's name and input is a no-op."""
        try:
            self._sfn.start_execution(stateMachineArn=self._arn, name=execution_name, input=json.dumps(payload))
        except self._sfn.exceptions.ExecutionAlreadyExists:
            pass


class StepFunctionsTaskTokens:
    """Resumes an execution waiting on a `.waitForTaskToken` task (SendTaskSuccess)."""

    def __init__(self, sfn) -> None:
        self._sfn = sfn

    def send_success(self, token: str, output: dict) -> bool:
        errors = self._sfn.exceptions
        try:
            self._sfn.send_task_success(taskToken=token, output=json.dumps(output))
        except (errors.TaskTimedOut, errors.TaskDoesNotExist, errors.InvalidToken):
            return False
        return True
