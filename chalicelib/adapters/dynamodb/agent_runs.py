"""Agent runs in DynamoDB: one item each (steps, files and deliveries inside it: a run is bounded
in turns, so its item stays far below 400 KB), listed per agent newest first through gsi1; and
the guard item a running run holds in its agent's partition (one run of an agent at a time)."""
from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from chalicelib.adapters.dynamodb import keys
from chalicelib.adapters.dynamodb.counters import Counters
from chalicelib.adapters.dynamodb.table import ConditionFailed, DynamoTable, status_in
from chalicelib.domain.agents.conversation import Usage
from chalicelib.domain.agents.runs import (
    AgentRun,
    AgentRunStatus,
    AgentRunTrigger,
    Delivery,
    InputRef,
    OutputFile,
    Step,
)
from chalicelib.domain.clock import iso, optional_iso, parse_iso, parse_optional_iso, utc_now
from chalicelib.domain.errors import Conflict, NotFound, TransitionRefused

FIRE_CLAIM_LIFETIME = timedelta(days=7)


class AgentRunRepository:
    def __init__(self, table: DynamoTable, counters: Counters) -> None:
        self._table = table
        self._counters = counters

    def next_id(self, environment: str) -> int:
        return self._counters.next_id(environment, "agent_run")

    def add(self, run: AgentRun) -> None:
        """Write a new run; Conflict when its id is written already (another delivery's)."""
        try:
            self._table.put_new(self._to_item(run))
        except ConditionFailed:
            raise Conflict(f"agent run {run.id} exists") from None

    def get(self, environment: str, agent_id: str, run_id: int) -> AgentRun:
        item = self._table.get(keys.agent_run(environment, run_id))
        if item is None or item["agent_id"] != agent_id:
            raise NotFound(f"run {run_id} of agent {agent_id} not found")
        return self._from_item(item)

    def list_page(self, environment: str, agent_id: str, limit: int,
                  cursor: str | None) -> tuple[list[AgentRun], str | None]:
        page = self._table.query_page(keys.GSI1, keys.agent_runs_index_pk(environment, agent_id), limit=limit,
                                      cursor=cursor)
        return [self._from_item(i) for i in page.items], page.cursor

    def save(self, run: AgentRun, expected: Iterable[AgentRunStatus]) -> AgentRun:
        """Write the run as it is now, only while its stored status is one of `expected` (a move
        or a step's progress); TransitionRefused otherwise."""
        condition, values = status_in(expected)
        try:
            self._table.put(self._to_item(run), condition=condition, names={"#status": "status"}, values=values)
        except ConditionFailed:
            raise TransitionRefused(f"agent run {run.id} is no longer {'/'.join(s.value for s in expected)}") from None
        return run

    def keep_task_token(self, run: AgentRun, token: str) -> bool:
        """Keep the token that resumes a run waiting for its verification code; False when the run
        is no longer waiting (a code came first, or it ended)."""
        try:
            self._table.update(keys.agent_run(run.environment, run.id), "SET task_token = :token",
                               condition="#status = :waiting", names={"#status": "status"},
                               values={":token": token, ":waiting": AgentRunStatus.WAITING_FOR_VERIFICATION.value})
        except ConditionFailed:
            return False
        return True

    def resume_with_code(self, run: AgentRun, code: str, at: datetime) -> AgentRun:
        """Move a waiting run back to running with the code to enter, leaving its task token as it
        is now (a pause may write it meanwhile): the run as stored then. TransitionRefused when it
        is no longer waiting."""
        try:
            item = self._table.update(
                keys.agent_run(run.environment, run.id), "SET #status = :running, verification_code = :code, "
                "resumed_at = :at", condition="#status = :waiting", names={"#status": "status"},
                values={":running": AgentRunStatus.RUNNING.value, ":code": code, ":at": iso(at),
                        ":waiting": AgentRunStatus.WAITING_FOR_VERIFICATION.value}, return_new=True)
        except ConditionFailed:
            raise TransitionRefused(f"agent run {run.id} is not waiting for a verification code") from None
        return self._from_item(item)

    def in_flight(self) -> list[AgentRun]:
        """Every browser run running or waiting for a verification code, of every environment."""
        items = self._table.index_items(keys.GSI2, keys.AGENT_RUNS_IN_FLIGHT_PK)
        return [self._from_item(i) for i in items]

    def remove_all_of_agent(self, environment: str, agent_id: str) -> None:
        items = self._table.query_all(keys.GSI1, keys.agent_runs_index_pk(environment, agent_id))
        self._table.batch_write(deletes=[keys.agent_run(environment, int(i["id"])) for i in items])

    # The guard of the running run -------------------------------------------------------------

    def claim_running(self, environment: str, agent_id: str, run_id: int) -> int | None:
        """Make `run_id` the agent's running run: None when it is (now or already), else the id of
        the run that holds the guard."""
        holder = self._table.claim_guard(keys.agent_running(environment, agent_id), "agent_running", "run_id", run_id)
        return int(holder) if holder is not None else None

    def take_over_running(self, environment: str, agent_id: str, stale_run_id: int, run_id: int) -> bool:
        """Take the guard from a run that has finished (False: it changed meanwhile)."""
        return self._table.take_over_guard(keys.agent_running(environment, agent_id), "agent_running", "run_id",
                                           stale_run_id, run_id)

    def release_running(self, environment: str, agent_id: str, run_id: int) -> None:
        self._table.release_guard(keys.agent_running(environment, agent_id), "run_id", run_id)

    def running_run(self, environment: str, agent_id: str) -> int | None:
        """The id of the run that holds the agent's guard (the one going, or waiting for a code)."""
        item = self._table.get(keys.agent_running(environment, agent_id))
        return int(item["run_id"]) if item else None

    def claim_trigger(self, environment: str, agent_id: str, token: str, run_id: int) -> int:
        """Claim one event that starts a run (a schedule's firing, a dropped file) for `run_id`: the
        id of the run that claimed it, this one or an earlier delivery's. A claim lives a week: no
        delivery of the same event comes later than that."""
        key = keys.agent_trigger(environment, agent_id, token)
        try:
            self._table.put_new({**key, "entity": "agent_trigger", "run_id": run_id,
                                 "expires_at": int((utc_now() + FIRE_CLAIM_LIFETIME).timestamp())})
            return run_id
        except ConditionFailed:
            item = self._table.get(key)
            return int(item["run_id"]) if item else self.claim_trigger(environment, agent_id, token, run_id)

    # Items ------------------------------------------------------------------------------------

    @staticmethod
    def _to_item(run: AgentRun) -> dict[str, Any]:
        # Browser runs only: theirs is the one workflow the local stack must start again.
        in_flight = run.browser and run.status in (AgentRunStatus.RUNNING, AgentRunStatus.WAITING_FOR_VERIFICATION)
        return {
            **keys.agent_run(run.environment, run.id), **keys.agent_run_index(run.environment, run.agent_id, run.id),
            **(keys.agent_run_in_flight_index(run.environment, run.id) if in_flight else {}),
            "entity": "agent_run", "environment": run.environment, "agent_id": run.agent_id, "id": run.id,
            "status": run.status.value, "trigger": run.trigger.value, "created_at": iso(run.created_at),
            "started_at": optional_iso(run.started_at), "completed_at": optional_iso(run.completed_at),
            "error_message": run.error_message,
            "output_files": [{"id": f.id, "filename": f.filename, "byte_size": f.byte_size,
                              "content_type": f.content_type, "created_at": iso(f.created_at)}
                             for f in run.output_files],
            "deliveries": [{"recipient": d.recipient, "status": d.status, "message_id": d.message_id,
                            "error": d.error} for d in run.deliveries],
            "input_tokens": run.usage.input_tokens, "output_tokens": run.usage.output_tokens, "model": run.model,
            # A step's input is the model's JSON, kept as text (it may hold floats DynamoDB refuses).
            "steps": [{"name": s.name, "input": json.dumps(s.input), "failed": s.failed,
                       "result_preview": s.result_preview, "at": iso(s.at)} for s in run.steps],
            "extra_input": ({"filename": run.extra_input.filename, "key": run.extra_input.key,
                             "byte_size": run.extra_input.byte_size} if run.extra_input else None),
            "callers": list(run.callers),
            "browser": run.browser, "file_import_id": run.file_import_id, "paused_at": optional_iso(run.paused_at),
            "resumed_at": optional_iso(run.resumed_at), "task_token": run.task_token,
            "verification_code": run.verification_code,
        }

    @staticmethod
    def _from_item(item: dict[str, Any]) -> AgentRun:
        extra = item.get("extra_input")
        return AgentRun(
            environment=item["environment"], agent_id=item["agent_id"], id=int(item["id"]),
            status=AgentRunStatus(item["status"]), trigger=AgentRunTrigger(item["trigger"]),
            created_at=parse_iso(item["created_at"]), started_at=parse_optional_iso(item.get("started_at")),
            completed_at=parse_optional_iso(item.get("completed_at")), error_message=item.get("error_message"),
            output_files=tuple(OutputFile(f["id"], f["filename"], int(f["byte_size"]), f["content_type"],
                                          parse_iso(f["created_at"])) for f in item.get("output_files") or ()),
            deliveries=tuple(Delivery(d["recipient"], "sent" if d["status"] == "sent" else "failed",
                                      d.get("message_id"), d.get("error")) for d in item.get("deliveries") or ()),
            usage=Usage(int(item.get("input_tokens") or 0), int(item.get("output_tokens") or 0)),
            model=item.get("model"),
            steps=tuple(Step(s["name"], json.loads(s["input"]), bool(s["failed"]), s.get("result_preview") or "",
                             parse_iso(s["at"])) for s in item.get("steps") or ()),
            extra_input=InputRef(extra["filename"], extra["key"], int(extra["byte_size"])) if extra else None,
            callers=tuple(item.get("callers") or ()),
            browser=bool(item.get("browser")),
            file_import_id=int(item["file_import_id"]) if item.get("file_import_id") is not None else None,
            paused_at=parse_optional_iso(item.get("paused_at")), resumed_at=parse_optional_iso(item.get("resumed_at")),
            task_token=item.get("task_token"), verification_code=item.get("verification_code"))

