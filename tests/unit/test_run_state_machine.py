"""The run state machine's history: one execution holds at most 25,000 events (a Step Functions
limit), so the events a run's path through infra/statemachines/reconciliation_run.asl.json adds
are counted from the definition, for a plan of 10M matched records (not run)."""
import json
import math
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

from chalicelib.domain.runs import (
    CHUNK_RECORDS,
    MAX_RUN_CHUNKS,
    Run,
    RunKind,
    RunStatus,
    RunTrigger,
    chunk_records_for,
)
from chalicelib.services.reconciliation_runs import NEXT_CANCELLED, PERSIST_CHUNKS

DEFINITION = Path(__file__).resolve().parents[2] / "infra" / "statemachines" / "reconciliation_run.asl.json"
HISTORY_LIMIT = 25_000
# Events each state adds to the history when it succeeds at once (a Lambda task: entered,
# scheduled, started, succeeded, exited), and the execution's own start and end.
EVENTS = {"Task": 5, "Choice": 2, "Pass": 2, "Succeed": 2, "Fail": 2,
          # a Distributed Map: entered, map run started, map run succeeded, exited (its items are child executions,
          # each with its own history)
          "Map": 4}
EXECUTION_EVENTS = 2
# A failed attempt retried adds its failure, and the next attempt's scheduled and started.
RETRY_EVENTS = 3


def history_events(definition: dict, outputs: Callable[[str], str]) -> Iterator[int]:
    """Walk the definition from StartAt as Step Functions would, each Task returning
    `{"next": outputs(state name)}`; yields the events each state adds."""
    yield EXECUTION_EVENTS
    for _, state in walk(definition, outputs):
        yield EVENTS[state["Type"]]


def walk(definition: dict, outputs: Callable[[str], str]) -> Iterator[tuple[str, dict]]:
    """The states an execution goes through (name, state), each Task returning `{"next": outputs(name)}`."""
    states, name = definition["States"], definition["StartAt"]
    document: dict = {}
    while name is not None:
        state = states[name]
        yield name, state
        if state["Type"] == "Task":
            document = {"next": outputs(name)}
        if state["Type"] == "Choice":
            chosen = [c["Next"] for c in state["Choices"] if document.get(c["Variable"].removeprefix("$.")) ==
                      c["StringEquals"]]
            name = chosen[0] if chosen else state["Default"]
        else:
            name = None if state.get("End") or state["Type"] in ("Succeed", "Fail") else state["Next"]


def a_run_planned(records: int) -> Run:
    chunks = math.ceil(records / CHUNK_RECORDS)
    return Run(environment="acme", id=1, reconciliation_id=1, kind=RunKind.BATCH, trigger=RunTrigger.MANUAL,
               status=RunStatus.RUNNING, created_at=datetime(2026, 11, 1, tzinfo=UTC), first_match_id=1,
               matches_count=records // 2, chunks=chunks, chunk_starts=tuple(range(0, records // 2, CHUNK_RECORDS // 2)))


def test_a_run_of_ten_million_matched_records_stays_inside_one_executions_history():
    # Given a run whose plan holds 10M matched records in chunks of CHUNK_RECORDS: MAX_RUN_CHUNKS chunks
    run = a_run_planned(10_000_000)
    definition = json.loads(DEFINITION.read_text())
    done: set[int] = set()

    def outputs(state: str) -> str:
        nonlocal run
        if state == "Persist":  # a persist task writes the chunks `persist` picks, then says what is next
            done.update(run.next_chunks(PERSIST_CHUNKS))
            run = replace(run, done_chunks=frozenset(done))
            return "persist" if run.next_chunk() is not None else "finish"
        return {"Load": "match", "Match": "persist"}.get(state, "done")

    # When its execution goes through the definition, each persist task writing PERSIST_CHUNKS chunks
    events = list(history_events(definition, outputs))
    persist_tasks = math.ceil(run.chunks / PERSIST_CHUNKS)

    # Then it ends well inside the history limit, with room for one retry of every task
    assert len(done) == run.chunks == MAX_RUN_CHUNKS
    assert sum(events) + RETRY_EVENTS * (persist_tasks + 4) < HISTORY_LIMIT


def test_the_count_walks_every_persist_task_of_the_loop():
    # Given a plan of three chunks, each persist task writing one
    definition = json.loads(DEFINITION.read_text())
    calls = iter(["match", "persist", "persist", "persist", "finish", "finish", "done"])

    # When the definition is walked
    events = sum(history_events(definition, lambda state: next(calls)))

    # Then Load, Match, three persists (each with its choice after), exceptions and finish are counted
    assert events == EXECUTION_EVENTS + 7 * 5 + 5 * 2


def test_a_fanned_out_run_of_ten_million_records_a_side_stays_inside_one_executions_history():
    # Given a run of 10M records a side fanned out, merged after two rounds of the Map, all 20M matched:
    # its chunks grow so that its plan holds at most MAX_RUN_CHUNKS (reconciliation_runs.save_outcome)
    records = 20_000_000
    size = chunk_records_for(records, CHUNK_RECORDS)
    chunks = math.ceil(records / size)
    run = replace(a_run_planned(records), chunks=chunks, chunk_starts=tuple(range(0, records // 2, size // 2)))
    definition = json.loads(DEFINITION.read_text())
    rounds = iter(["fan_out", "persist"])  # the merge: a second round, then the plan
    done: set[int] = set()

    def outputs(state: str) -> str:
        nonlocal run
        if state == "Persist":
            done.update(run.next_chunks(PERSIST_CHUNKS))
            run = replace(run, done_chunks=frozenset(done))
            return "persist" if run.next_chunk() is not None else "finish"
        if state == "Merge":
            return next(rounds)
        return {"Load": "fan_out"}.get(state, "done")

    # When its execution goes through the definition (the Map's items are child executions: not in its history)
    events = list(history_events(definition, outputs))
    persist_tasks = math.ceil(run.chunks / PERSIST_CHUNKS)

    # Then it ends inside the history limit, with room for one retry of every task
    assert len(done) == chunks <= MAX_RUN_CHUNKS // 2 and size == 8_000
    assert sum(events) + RETRY_EVENTS * (persist_tasks + 6) < HISTORY_LIMIT


def test_a_step_that_reports_a_cancel_sends_the_run_to_give_up_and_the_execution_ends_cancelled():
    # Given a step that sees a cancel request: it answers NEXT_CANCELLED and ends nothing itself
    definition = json.loads(DEFINITION.read_text())
    for step in ("Load", "Match", "Merge", "Persist"):
        answers = {"Load": "match", "Match": "persist", "Merge": "persist", step: NEXT_CANCELLED,
                   "GiveUp": NEXT_CANCELLED}  # give_up, once the run ended cancelled

        # When the definition is walked to that step (the Map's path for the merge)
        if step == "Merge":
            answers["Load"] = "fan_out"
        path = [name for name, _ in walk(definition, lambda state, answers=answers: answers.get(state, "done"))]

        # Then GiveUp (retried like any end) ends the run, and the execution ends in Cancelled
        assert path[path.index(step) + 1:] == ["WhatNext", "GiveUp", "Ended", "Cancelled"], path
        assert definition["States"]["GiveUp"]["Retry"][0]["MaxAttempts"] >= 3

