"""The lifecycle of agent runs on the fakes: one run of an agent at a time, a schedule that fires
meanwhile recorded as skipped, a queued run that waits its turn, a firing or a message delivered
twice, a run cut off mid-way. None of these reaches the model."""
from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from chalicelib.domain.agents.runs import RUN_LEASE, AgentRunStatus, AgentRunTrigger
from chalicelib.domain.clock import utc_now
from chalicelib.domain.errors import NotFound
from chalicelib.services import agent_runs, agents
from chalicelib.services.ports import AgentLimits
from tests.fakes import fake_ports

ENV = "acme"


def unreachable(*_):
    raise AssertionError("these runs never reach their tools or model")


@pytest.fixture
def ports():
    return fake_ports()


@pytest.fixture
def agent(ports):
    return agents.create_agent(ports, ENV, {"name": "Daily", "cadence": "daily", "hour": 8, "minute": 0})


def going_run(ports, agent):
    """A run of the agent that holds its guard, as a worker would while it runs."""
    return started_run(ports, agent, utc_now())


def test_a_schedule_that_fires_while_a_run_goes_is_recorded_as_a_skipped_run(ports, agent):
    going = going_run(ports, agent)
    agent_runs.handle_message(ports, {"environment": ENV, "agent_id": agent.id, "trigger": "schedule",
                                      "scheduled_time": "2026-11-23T13:00:00Z"}, unreachable)
    page, _ = ports.agent_runs.list_page(ENV, agent.id, 10, None)
    skipped = page[0]
    assert (skipped.trigger, skipped.status) == (AgentRunTrigger.SCHEDULE, AgentRunStatus.FAILED)
    assert skipped.error_message.startswith(f"skipped: run {going.id} of this agent was still going")
    assert ports.agent_runs.running[(ENV, agent.id)] == going.id  # the going run keeps its guard


def test_a_firing_delivered_twice_starts_one_run(ports, agent):
    going_run(ports, agent)
    message = {"environment": ENV, "agent_id": agent.id, "trigger": "schedule",
               "scheduled_time": "2026-11-23T13:00:00Z"}
    agent_runs.handle_message(ports, message, unreachable)
    agent_runs.handle_message(ports, message, unreachable)
    assert len(ports.agent_runs.list_page(ENV, agent.id, 10, None)[0]) == 2  # the going one and one skipped


def test_a_schedule_of_an_agent_no_longer_scheduled_starts_nothing(ports, agent):
    agents.update_agent(ports, ENV, agent.id, {"active": False})
    agent_runs.handle_message(ports, {"environment": ENV, "agent_id": agent.id, "trigger": "schedule"}, unreachable)
    assert ports.agent_runs.list_page(ENV, agent.id, 10, None)[0] == []
    assert ports.schedules.schedules == {}  # inactive: its schedule went with the change


def test_a_queued_run_waits_its_turn_while_another_goes(ports, agent):
    going = going_run(ports, agent)
    queued = agent_runs.queue_run(ports, ENV, agent.id)
    ports.agent_run_queue.messages.clear()
    ports.agent_run_queue.delays.clear()
    agent_runs.handle_message(ports, {"environment": ENV, "agent_id": agent.id, "run_id": queued.id}, unreachable)
    assert ports.agent_runs.get(ENV, agent.id, queued.id).status is AgentRunStatus.QUEUED
    assert ports.agent_run_queue.messages == [{"environment": ENV, "agent_id": agent.id, "run_id": queued.id}]
    assert ports.agent_run_queue.delays == [agent_runs.BUSY_RETRY_SECONDS]
    assert ports.agent_runs.running[(ENV, agent.id)] == going.id


def test_a_run_found_running_past_its_lease_when_its_message_comes_again_was_cut_off(ports, agent):
    going = started_run(ports, agent, utc_now() - RUN_LEASE - timedelta(seconds=1))
    agent_runs.handle_message(ports, {"environment": ENV, "agent_id": agent.id, "run_id": going.id}, unreachable)
    failed = ports.agent_runs.get(ENV, agent.id, going.id)
    assert failed.status is AgentRunStatus.FAILED and "cut off" in failed.error_message
    assert (ENV, agent.id) not in ports.agent_runs.running  # its guard is given up


def test_a_guard_left_by_a_finished_run_is_taken_over(ports, agent):
    stale = going_run(ports, agent)
    ports.agent_runs.save(stale.moved(AgentRunStatus.FAILED), expected=(AgentRunStatus.RUNNING,))
    queued = agent_runs.queue_run(ports, ENV, agent.id)
    assert agent_runs._claim(ports, queued) is None
    assert ports.agent_runs.running[(ENV, agent.id)] == queued.id


def test_the_last_delivery_failing_fails_the_run_and_frees_the_agent(ports, agent):
    going = going_run(ports, agent)
    agent_runs.fail_message(ports, {"environment": ENV, "agent_id": agent.id, "run_id": going.id},
                            TimeoutError("read timed out"))
    failed = ports.agent_runs.get(ENV, agent.id, going.id)
    assert failed.status is AgentRunStatus.FAILED and "internal error (TimeoutError)" in failed.error_message
    assert (ENV, agent.id) not in ports.agent_runs.running


def test_deleting_an_agent_removes_its_schedule_files_and_runs(ports, agent):
    agents.add_file(ports, ENV, agent.id, "rates.csv", None, b"usd,1\n")
    agent_runs.queue_run(ports, ENV, agent.id)
    assert (ENV, agent.id) in ports.schedules.schedules
    agents.delete_agent(ports, ENV, agent.id)
    assert ports.schedules.schedules == {} and ports.agent_files.bodies == {}
    assert ports.agent_runs.list_page(ENV, agent.id, 10, None)[0] == []


def test_the_schedules_of_scheduled_agents_are_put_back(ports, agent):
    manual = agents.create_agent(ports, ENV, {"name": "By hand"})
    ports.schedules.schedules.clear()  # an embedded Scheduler started empty
    assert agents.restore_schedules(ports) == 1
    assert set(ports.schedules.schedules) == {(ENV, agent.id)} and manual.id not in str(ports.schedules.schedules)


def test_a_firing_claimed_by_a_delivery_that_died_before_writing_its_run_runs_once(ports, agent):
    going_run(ports, agent)
    token = "schedule:2026-11-23T13:00:00Z"
    lost = ports.agent_runs.next_id(ENV)
    ports.agent_runs.claim_trigger(ENV, agent.id, token, lost)  # the claim, then the crash
    message = {"environment": ENV, "agent_id": agent.id, "trigger": "schedule", "scheduled_time": token[9:]}
    agent_runs.handle_message(ports, message, unreachable)
    agent_runs.handle_message(ports, message, unreachable)
    [skipped] = [r for r in ports.agent_runs.list_page(ENV, agent.id, 10, None)[0] if r.trigger.value == "schedule"]
    assert skipped.id == lost and skipped.status is AgentRunStatus.FAILED


def started_run(ports, agent, started_at):
    """A run a worker started at `started_at` and still holds the agent's guard for."""
    run = agent_runs.queue_run(ports, ENV, agent.id)
    assert ports.agent_runs.claim_running(ENV, agent.id, run.id) is None
    return ports.agent_runs.save(run.moved(AgentRunStatus.RUNNING, started_at=started_at),
                                 expected=(AgentRunStatus.QUEUED,))


def test_a_duplicate_message_of_a_run_going_leaves_it_and_its_guard_alone(ports, agent):
    going = started_run(ports, agent, utc_now())
    agent_runs.handle_message(ports, {"environment": ENV, "agent_id": agent.id, "run_id": going.id}, unreachable)
    assert ports.agent_runs.get(ENV, agent.id, going.id).status is AgentRunStatus.RUNNING
    assert ports.agent_runs.running[(ENV, agent.id)] == going.id


def test_a_run_past_its_lease_was_cut_off_and_another_run_takes_the_guard(ports, agent):
    stale = started_run(ports, agent, utc_now() - RUN_LEASE - timedelta(seconds=1))
    queued = agent_runs.queue_run(ports, ENV, agent.id)
    assert agent_runs._claim(ports, queued) is None
    assert ports.agent_runs.running[(ENV, agent.id)] == queued.id
    cut_off = ports.agent_runs.get(ENV, agent.id, stale.id)
    assert cut_off.status is AgentRunStatus.FAILED and "cut off" in cut_off.error_message


def test_a_worker_that_lost_the_start_to_another_delivery_keeps_off_its_guard(ports, agent):
    queued = agent_runs.queue_run(ports, ENV, agent.id)
    assert ports.agent_runs.claim_running(ENV, agent.id, queued.id) is None  # both deliveries hold "its" guard
    ports.agent_runs.save(queued.moved(AgentRunStatus.RUNNING, started_at=utc_now()),
                          expected=(AgentRunStatus.QUEUED,))  # the other delivery started it
    ports = replace(ports, language_model=lambda model: ScriptedModelName())
    assert agent_runs._run(ports, queued, unreachable).status is AgentRunStatus.RUNNING
    assert ports.agent_runs.running[(ENV, agent.id)] == queued.id


class ScriptedModelName:
    """Only a name: these runs never reach the model."""
    model = "named-only"

    def complete(self, *args):
        raise AssertionError("not reached")


def test_a_failure_inside_a_run_fails_it_with_the_reason_and_frees_the_agent(ports, agent):
    def broken_workbench(ports, agent, run):
        raise RuntimeError("the bucket arn:aws:s3:::recon-prod-payloads could not be read")

    run = agent_runs.queue_run(ports, ENV, agent.id)
    ports = replace(ports, language_model=lambda model: ScriptedModelName())
    failed = agent_runs.execute(ports, ENV, agent.id, run.id, broken_workbench)
    assert failed.status is AgentRunStatus.FAILED
    # Not the exception's text: it may name the deployment's resources (the operators' log has it)
    assert failed.error_message == ("the run failed on an internal error (RuntimeError); the operators' log holds "
                                    "its details")
    assert (ENV, agent.id) not in ports.agent_runs.running


def test_a_domain_error_inside_a_run_fails_it_with_its_own_message(ports, agent):
    def workbench_of_a_gone_reconciliation(ports, agent, run):
        raise NotFound("reconciliation 7 not found")

    run = agent_runs.queue_run(ports, ENV, agent.id)
    ports = replace(ports, language_model=lambda model: ScriptedModelName())
    failed = agent_runs.execute(ports, ENV, agent.id, run.id, workbench_of_a_gone_reconciliation)
    assert failed.error_message == "the run failed: reconciliation 7 not found"


def test_the_last_delivery_of_a_firing_failing_fails_the_run_it_made(ports, agent):
    message = {"environment": ENV, "agent_id": agent.id, "trigger": "schedule",
               "scheduled_time": "2026-11-23T13:00:00Z"}
    run = agent_runs._scheduled_run(ports, ENV, agent.id, message["scheduled_time"])
    agent_runs.fail_message(ports, message, TimeoutError("worker killed"))
    assert ports.agent_runs.get(ENV, agent.id, run.id).status is AgentRunStatus.FAILED


def test_a_message_of_a_run_removed_with_its_agent_ends_quietly(ports, agent):
    run = agent_runs.queue_run(ports, ENV, agent.id)
    agents.delete_agent(ports, ENV, agent.id)
    assert agent_runs.execute(ports, ENV, agent.id, run.id, unreachable) is None


def test_a_schedule_put_out_of_order_is_put_again_from_the_stored_agent(ports, agent):
    stale = agent
    agents.update_agent(ports, ENV, agent.id, {"active": False})  # saved and put: no schedule
    agents._put_schedule(ports, stale)  # the older edit's put, arriving last
    assert ports.schedules.schedules == {}
    ports.agents.remove(ports.agents.get(ENV, agent.id))
    agents._put_schedule(ports, stale)  # a put racing a delete
    assert ports.schedules.schedules == {}


def test_a_run_starts_three_agent_runs_at_most_and_reads_no_input_over_the_bound(ports, agent):
    from chalicelib.api.agent_tools import MAX_READ_BYTES, AgentToolBox
    from chalicelib.domain.agents.conversation import ToolCall
    from chalicelib.domain.agents.definition import Mention, MentionType
    from chalicelib.domain.agents.runs import InputRef

    helper = agents.create_agent(ports, ENV, {"name": "Helper"})
    boss = replace(agent, mentions=(Mention(MentionType.AGENT, helper.id),))
    run = replace(agent_runs.queue_run(ports, ENV, agent.id),
                  extra_input=InputRef("huge.csv", "drops/acme/huge.csv", MAX_READ_BYTES + 1))
    tools = AgentToolBox(ports, boss, run)
    answers = [tools.call(ToolCall(str(n), "run_agent", {"agent_id": helper.id})) for n in range(4)]
    assert [a.is_error for a in answers] == [False, False, False, True] and "at most 3" in answers[3].content
    read = tools.call(ToolCall("r", "read_input_file", {"filename": "huge.csv"}))
    assert read.is_error and "at most" in read.content


def test_a_run_of_an_agent_whose_model_is_no_longer_offered_fails_saying_so(ports, agent):
    named = agents.update_agent(ports, ENV, agent.id, {"model": "anthropic.claude-opus-4-v1:0"})
    ports = replace(ports, limits=replace(ports.limits, agent=AgentLimits(models=frozenset({"amazon.nova-pro-v1:0"}))),
                    language_model=lambda model: ScriptedModelName())
    run = agent_runs.queue_run(ports, ENV, named.id)
    failed = agent_runs.execute(ports, ENV, named.id, run.id, lambda *args: pytest.fail("no workbench is built"))
    assert failed.status is AgentRunStatus.FAILED
    assert failed.error_message == ("model 'anthropic.claude-opus-4-v1:0' is not offered here; the models agents "
                                    "may name: amazon.nova-pro-v1:0")
    assert (ENV, agent.id) not in ports.agent_runs.running
