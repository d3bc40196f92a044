"""Agent runs: stored whole and read back, listed newest first per agent, saved only from the
statuses expected, one guard per agent, and an event that starts a run claimed once."""
from __future__ import annotations

from datetime import timedelta

import pytest

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
from chalicelib.domain.errors import Conflict, NotFound, TransitionRefused
from tests.contract.builders import ENV, OTHER_ENV
from tests.contract.builders import T0_MS as T0

AGENT = "7d9f3c1e-0000-4000-8000-000000000001"


def run(n: int, agent_id: str = AGENT, **changes) -> AgentRun:
    return AgentRun(**{"environment": ENV, "agent_id": agent_id, "id": n, "status": AgentRunStatus.QUEUED,
                       "trigger": AgentRunTrigger.MANUAL, "created_at": T0 + timedelta(seconds=n), **changes})


def test_a_run_reads_back_as_written_with_its_steps_files_and_deliveries(agent_runs):
    full = run(1, status=AgentRunStatus.COMPLETED, trigger=AgentRunTrigger.FILE_DROP, started_at=T0,
               completed_at=T0 + timedelta(minutes=1), usage=Usage(1200, 80), model="llama3.1",
               steps=(Step("sql", {"query": "SELECT 1", "limit": 2.5}, False, "1", T0),
                      Step("final_answer", None, False, "done", T0)),
               output_files=(OutputFile("f-1", "report.csv", 12, "text/csv", T0),),
               deliveries=(Delivery("a@acme.test", "sent", "m-1"), Delivery("b@acme.test", "failed", error="no")),
               extra_input=InputRef("drop.csv", "drops/acme/drop.csv", 10), callers=("a", "b"))
    agent_runs.add(full)
    assert agent_runs.get(ENV, AGENT, 1) == full
    with pytest.raises(Conflict):
        agent_runs.add(run(1))  # the same id, written by another delivery
    with pytest.raises(NotFound):
        agent_runs.get(ENV, "another-agent", 1)
    with pytest.raises(NotFound):
        agent_runs.get(OTHER_ENV, AGENT, 1)


def test_runs_are_listed_newest_first_per_agent(agent_runs):
    for n in (1, 2, 3):
        agent_runs.add(run(n))
    agent_runs.add(run(4, agent_id="another-agent"))
    page, cursor = agent_runs.list_page(ENV, AGENT, 2, None)
    assert [r.id for r in page] == [3, 2] and cursor
    assert [r.id for r in agent_runs.list_page(ENV, AGENT, 2, cursor)[0]] == [1]
    agent_runs.remove_all_of_agent(ENV, AGENT)
    assert agent_runs.list_page(ENV, AGENT, 10, None)[0] == []
    assert [r.id for r in agent_runs.list_page(ENV, "another-agent", 10, None)[0]] == [4]


def test_a_run_is_saved_only_from_the_statuses_expected(agent_runs):
    agent_runs.add(run(1))
    going = agent_runs.save(run(1, status=AgentRunStatus.RUNNING), expected=(AgentRunStatus.QUEUED,))
    with pytest.raises(TransitionRefused):
        agent_runs.save(run(1, status=AgentRunStatus.RUNNING), expected=(AgentRunStatus.QUEUED,))
    agent_runs.save(going.moved(AgentRunStatus.COMPLETED), expected=(AgentRunStatus.RUNNING,))
    assert agent_runs.get(ENV, AGENT, 1).status is AgentRunStatus.COMPLETED


def test_one_run_of_an_agent_holds_its_guard(agent_runs):
    assert agent_runs.claim_running(ENV, AGENT, 1) is None
    assert agent_runs.claim_running(ENV, AGENT, 1) is None  # again: it holds it
    assert agent_runs.claim_running(ENV, AGENT, 2) == 1
    assert agent_runs.claim_running(OTHER_ENV, AGENT, 2) is None  # another environment's agent
    assert not agent_runs.take_over_running(ENV, AGENT, 5, 2)
    assert agent_runs.take_over_running(ENV, AGENT, 1, 2)
    agent_runs.release_running(ENV, AGENT, 1)  # not the holder: nothing happens
    assert agent_runs.claim_running(ENV, AGENT, 3) == 2
    agent_runs.release_running(ENV, AGENT, 2)
    assert agent_runs.claim_running(ENV, AGENT, 3) is None


def test_an_event_that_starts_a_run_is_claimed_once_for_its_run(agent_runs):
    assert agent_runs.claim_trigger(ENV, AGENT, "schedule:2026-11-23T13:00:00Z", 7) == 7
    assert agent_runs.claim_trigger(ENV, AGENT, "schedule:2026-11-23T13:00:00Z", 8) == 7
    assert agent_runs.claim_trigger(ENV, AGENT, "schedule:2026-11-24T13:00:00Z", 9) == 9
    assert agent_runs.claim_trigger(OTHER_ENV, AGENT, "schedule:2026-11-23T13:00:00Z", 10) == 10
