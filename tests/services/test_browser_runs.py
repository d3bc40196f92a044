"""Browser runs around the browser itself: the worker hands a run to its workflow and keeps the
agent's guard; the pause keeps a task token and a code resumes the run whichever of the two comes
first; a code never given expires the run; a task that gave up fails it. (The browser's own work,
against a real portal in Chromium, is tested in tests/integration and tests/e2e.)"""
from __future__ import annotations

from dataclasses import replace

import pytest

from chalicelib.domain.agents.browser import CodeRequested, Credentials, PortalStep, VerificationReason
from chalicelib.domain.agents.runs import AgentRun, AgentRunStatus, AgentRunTrigger
from chalicelib.domain.clock import utc_now
from chalicelib.domain.errors import Conflict, ValidationFailed
from chalicelib.services import agent_runs, browser_runs
from chalicelib.services.agents import (
    create_agent,
    create_browser_agent,
    delete_agent,
    set_credentials,
    update_agent,
)
from chalicelib.services.resumption import resume_interrupted
from tests.fakes import fake_ports
from tests.fakes.browser import FakeBrowserSecrets, FakeTaskTokens
from tests.fakes.workflows import FakeWorkflows
from tests.services.conftest import ENV, streams

SETTINGS = {
    "login": {"username_selector": "#u", "password_selector": "#p", "submit_selector": "#go"},
    "verification": {"detect_selector": "#v", "code_selector": "#code", "submit_selector": "#ok"},
    "export": {"steps": [], "download_selector": "#csv"},
    "data_stream_key": "bank",
}
WAITING, RUNNING = AgentRunStatus.WAITING_FOR_VERIFICATION, AgentRunStatus.RUNNING


@pytest.fixture
def ports():
    wired = fake_ports(browser_workflows=FakeWorkflows(), task_tokens=FakeTaskTokens(),
                       browser_secrets=FakeBrowserSecrets())
    streams(wired, "bank")
    return wired


def browser_agent(ports, **fields):
    agent = create_browser_agent(ports, ENV, {"name": "Bank portal", **fields}, "portal_export",
                                 "https://portal.bank.test/", SETTINGS)
    set_credentials(ports, agent.id, Credentials("ops", "pw"))
    return agent


def started(ports, agent):
    """A run queued and taken by the agent worker (which hands it to the workflow)."""
    run = agent_runs.queue_run(ports, ENV, agent.id)
    agent_runs.execute(ports, ENV, agent.id, run.id, workbench=None)  # type: ignore[arg-type]
    return ports.agent_runs.get(ENV, agent.id, run.id)


def paused(ports, agent):
    """A started run whose attempt found the portal asking for a code (as attempt() leaves it)."""
    run = started(ports, agent)
    ports.agent_runs.save(run.moved(WAITING, paused_at=utc_now()), expected=(RUNNING,))
    ports.agents.set_browser_state(ENV, agent.id, needs_verification=True,
                                   verification_reason=VerificationReason.CODE_REQUESTED,
                                   verification_required_at=utc_now())
    ports.browser_secrets.put_context(ENV, agent.id, "pending", {"cookies": [{"name": "pending"}]})
    return run


def test_the_worker_hands_a_browser_run_to_its_workflow_and_keeps_the_agents_guard(ports):
    agent = browser_agent(ports)
    run = started(ports, agent)
    assert run.status is RUNNING and run.model is None
    [(name, execution_input)] = ports.browser_workflows.executions
    assert execution_input == {"environment": ENV, "agent_id": agent.id, "run_id": run.id,
                               "verification_timeout_seconds": 1800}
    assert ports.agent_runs.running_run(ENV, agent.id) == run.id
    second = agent_runs.queue_run(ports, ENV, agent.id)
    agent_runs.execute(ports, ENV, agent.id, second.id, workbench=None)  # type: ignore[arg-type]
    assert ports.agent_runs.get(ENV, agent.id, second.id).status is AgentRunStatus.QUEUED  # waits its turn


def test_a_duplicate_message_of_a_waiting_run_is_dropped(ports):
    agent = browser_agent(ports)
    run = paused(ports, agent)
    agent_runs.execute(ports, ENV, agent.id, run.id, workbench=None)  # type: ignore[arg-type]
    assert ports.agent_runs.get(ENV, agent.id, run.id).status is WAITING
    assert len(ports.browser_workflows.executions) == 1


def test_a_code_after_the_pause_kept_its_token_sends_the_token_and_clears_the_flag(ports):
    agent = browser_agent(ports)
    run = paused(ports, agent)
    ports.task_tokens.waiting.add("token-1")
    browser_runs.pause(ports, ENV, agent.id, run.id, "token-1")
    assert ports.task_tokens.sent == []

    resumed = browser_runs.give_code(ports, ENV, agent.id, " 424242 ")

    assert resumed.status is RUNNING and resumed.verification_code is None  # never shown
    assert ports.task_tokens.sent == ["token-1"]
    stored = ports.agent_runs.get(ENV, agent.id, run.id)
    assert stored.verification_code == "424242" and stored.resumed_at is not None
    assert ports.agents.get(ENV, agent.id).browser_state.needs_verification is False


def test_a_code_before_the_pause_kept_its_token_is_sent_on_by_the_pause(ports):
    agent = browser_agent(ports)
    run = paused(ports, agent)
    browser_runs.give_code(ports, ENV, agent.id, "424242")  # no token yet: nothing to send
    assert ports.task_tokens.sent == []
    ports.task_tokens.waiting.add("token-1")
    browser_runs.pause(ports, ENV, agent.id, run.id, "token-1")
    assert ports.task_tokens.sent == ["token-1"]


def test_a_code_is_refused_when_no_run_waits_when_it_is_malformed_and_for_llm_agents(ports):
    agent = browser_agent(ports)
    with pytest.raises(Conflict, match="no run of agent .* is waiting"):
        browser_runs.give_code(ports, ENV, agent.id, "424242")
    started(ports, agent)
    with pytest.raises(Conflict, match="no run of agent .* is waiting"):
        browser_runs.give_code(ports, ENV, agent.id, "424242")
    llm = create_agent(ports, ENV, {"name": "Writer", "instructions": "write"})
    with pytest.raises(Conflict, match="not a browser agent"):
        browser_runs.give_code(ports, ENV, llm.id, "424242")
    with pytest.raises(ValidationFailed):
        browser_runs.give_code(ports, ENV, agent.id, "42 42")


def test_a_code_that_comes_after_the_wait_timed_out_is_409(ports):
    agent = browser_agent(ports)
    run = paused(ports, agent)
    ports.agent_runs.keep_task_token(run, "expired-token")  # the workflow no longer waits on it
    with pytest.raises(Conflict, match="timed out"):
        browser_runs.give_code(ports, ENV, agent.id, "424242")


def test_a_code_never_given_fails_the_run_clears_the_flag_and_frees_the_agent(ports):
    agent = browser_agent(ports)
    run = paused(ports, agent)
    browser_runs.expire(ports, ENV, agent.id, run.id)
    failed = ports.agent_runs.get(ENV, agent.id, run.id)
    assert failed.status is AgentRunStatus.FAILED
    assert failed.error_message.startswith("no verification code was given within 30 minutes")
    assert ports.agents.get(ENV, agent.id).browser_state.needs_verification is False
    assert ports.browser_secrets.context(ENV, agent.id, "pending") is None
    assert ports.agent_runs.running_run(ENV, agent.id) is None


def test_a_task_that_gave_up_fails_the_run_with_its_cause_and_frees_the_agent(ports):
    agent = browser_agent(ports)
    run = started(ports, agent)
    browser_runs.give_up(ports, ENV, agent.id, run.id, {"Error": "States.Timeout", "Cause": "the worker timed out"})
    failed = ports.agent_runs.get(ENV, agent.id, run.id)
    assert failed.error_message == "the browser run failed: States.Timeout: the worker timed out"
    assert ports.agent_runs.running_run(ENV, agent.id) is None


def test_an_attempt_repeated_after_its_run_paused_or_ended_drives_no_browser(ports):
    agent = browser_agent(ports)  # ports.portal is None: driving it would raise
    run = paused(ports, agent)
    assert browser_runs.attempt(ports, ENV, agent.id, run.id) == {"status": "waiting_for_verification"}
    browser_runs.expire(ports, ENV, agent.id, run.id)
    assert browser_runs.attempt(ports, ENV, agent.id, run.id) == {"status": "failed"}


def test_a_run_without_a_portal_login_fails_at_log_in_saying_how_to_set_it(ports):
    agent = create_browser_agent(ports, ENV, {"name": "No login"}, "portal_export", "https://portal.bank.test/",
                                 SETTINGS)
    run = started(ports, agent)
    assert browser_runs.attempt(ports, ENV, agent.id, run.id) == {"status": "failed"}
    failed = ports.agent_runs.get(ENV, agent.id, run.id)
    assert failed.error_message == ("step log_in failed: the agent has no portal login: set it with "
                                    f"`python -m chalicelib.cli agents set-credentials {agent.id}`")
    assert ports.agent_runs.running_run(ENV, agent.id) is None


def test_a_browser_agent_needs_its_stream_and_keeps_what_it_runs_out_of_reach_of_a_patch(ports):
    with pytest.raises(ValidationFailed) as failed:
        create_browser_agent(ports, ENV, {"name": "Lost"}, "portal_export", "https://portal.bank.test/",
                             {**SETTINGS, "data_stream_key": "nowhere"})
    assert [e.field for e in failed.value.errors] == ["settings.data_stream_key"]
    agent = browser_agent(ports)
    for fields in ({"instructions": "be creative"}, {"handles_file_drops": True}, {"model": "x"},
                   {"mentions": [{"type": "data_stream", "id": "bank"}]}):
        with pytest.raises(ValidationFailed):
            update_agent(ports, ENV, agent.id, fields)
    patched = update_agent(ports, ENV, agent.id, {"cadence": "daily", "hour": 7, "minute": 30, "active": False})
    assert patched.browser == agent.browser and patched.browser_state.has_credentials is True


def test_deleting_a_browser_agent_deletes_its_secrets(ports):
    agent = browser_agent(ports)
    ports.browser_secrets.put_context(ENV, agent.id, "saved", {"cookies": []})
    delete_agent(ports, ENV, agent.id)
    assert ports.browser_secrets.secrets == {}
    assert ports.agents.environment_of(agent.id) is None


def test_the_login_is_never_in_a_repr():
    assert "pw" not in repr(Credentials("ops", "pw")) and "ops" not in repr(Credentials("ops", "pw"))
    run = AgentRun(environment=ENV, agent_id="a", id=1, status=RUNNING, trigger=AgentRunTrigger.MANUAL,
                   created_at=utc_now(), verification_code="424242", task_token="secret-task-token")
    assert "424242" not in repr(run) and "secret-task-token" not in repr(run)


def test_the_local_stacks_start_gives_each_browser_run_in_flight_a_new_workflow_and_leaves_llm_runs(ports):
    waiting = paused(ports, browser_agent(ports, name="Waiting"))
    going = started(ports, browser_agent(ports, name="Going"))
    llm = create_agent(ports, ENV, {"name": "Writer", "instructions": "write"})
    llm_run = agent_runs.queue_run(ports, ENV, llm.id)
    ports.agent_runs.save(llm_run.moved(RUNNING, started_at=utc_now()), expected=(AgentRunStatus.QUEUED,))
    before = len(ports.browser_workflows.executions)

    resumed = resume_interrupted(ports)

    assert sorted(resumed.browser_runs) == sorted([(ENV, waiting.id), (ENV, going.id)])
    new = ports.browser_workflows.executions[before:]
    assert sorted(i["run_id"] for _, i in new) == sorted([waiting.id, going.id])
    assert all(name.startswith("browser-run-") and "resumed" in name for name, _ in new)
    assert "2 browser agent run(s)" in resumed.describe()


def test_a_run_given_up_while_it_waited_no_longer_asks_for_a_code(ports):
    agent = browser_agent(ports)
    run = paused(ports, agent)
    browser_runs.give_up(ports, ENV, agent.id, run.id, {"Error": "DynamoDB.ThrottlingException", "Cause": "busy"})
    assert ports.agents.get(ENV, agent.id).browser_state.needs_verification is False
    assert ports.browser_secrets.context(ENV, agent.id, "pending") is None


def test_a_lambda_errors_json_cause_is_shown_as_its_message():
    cause = '{"errorMessage": "Task timed out after 900.00 seconds", "errorType": "Sandbox.Timedout", "trace": []}'
    ports = fake_ports(browser_secrets=FakeBrowserSecrets())
    streams(ports, "bank")
    agent = browser_agent(ports)
    run = ports.agent_runs.get(ENV, agent.id, agent_runs.queue_run(ports, ENV, agent.id).id)
    ports.agent_runs.save(run.moved(RUNNING, started_at=utc_now(), browser=True), expected=(AgentRunStatus.QUEUED,))
    browser_runs.give_up(ports, ENV, agent.id, run.id, {"Error": "Sandbox.Timedout", "Cause": cause})
    assert ports.agent_runs.get(ENV, agent.id, run.id).error_message == (
        "the browser run failed: Sandbox.Timedout: Task timed out after 900.00 seconds")


def test_the_expiry_of_a_run_already_ended_leaves_the_agent_as_its_later_run_has_it(ports):
    agent = browser_agent(ports)
    run = paused(ports, agent)
    ports.agent_runs.save(run.moved(AgentRunStatus.FAILED, completed_at=utc_now()), expected=(WAITING,))
    later = {"needs_verification": True, "verification_reason": VerificationReason.CODE_REQUESTED}
    ports.agents.set_browser_state(ENV, agent.id, **later)  # as a later run's pause left it
    browser_runs.expire(ports, ENV, agent.id, run.id)
    assert ports.agents.get(ENV, agent.id).browser_state.needs_verification is True
    assert ports.browser_secrets.context(ENV, agent.id, "pending") is not None


def test_a_code_posted_again_after_its_token_failed_to_send_sends_the_token_again(ports):
    agent = browser_agent(ports)
    run = paused(ports, agent)
    ports.agent_runs.keep_task_token(run, "token-1")
    ports.agent_runs.resume_with_code(run, "424242", utc_now())  # the first POST, whose send then failed
    ports.task_tokens.waiting.add("token-1")
    again = browser_runs.give_code(ports, ENV, agent.id, "424242")
    assert again.status is RUNNING and ports.task_tokens.sent == ["token-1"]


class DeletesTheAgentThenAsksForACode:
    """The operator deletes the agent while its browser is at the portal."""

    def __init__(self, ports) -> None:
        self.ports = ports

    def run(self, job):
        [agent] = [a for (env, _), a in self.ports.agents.agents.items() if env == ENV]
        delete_agent(self.ports, ENV, agent.id)
        return CodeRequested({"cookies": [{"name": "session", "value": "live"}]}, (PortalStep("log_in", "ok"),))


def test_an_agent_deleted_while_its_browser_went_keeps_no_session_and_asks_for_no_code(ports):
    agent = browser_agent(ports)
    run = started(ports, agent)
    wired = replace(ports, portal=DeletesTheAgentThenAsksForACode(ports))
    assert browser_runs.attempt(wired, ENV, agent.id, run.id) == {"status": "failed"}
    assert ports.browser_secrets.secrets == {}


def test_a_resumed_waiting_run_forgets_the_token_of_its_dead_workflow(ports):
    agent = browser_agent(ports)
    run = paused(ports, agent)
    ports.agent_runs.keep_task_token(run, "dead-token")
    resume_interrupted(ports)
    assert ports.agent_runs.get(ENV, agent.id, run.id).task_token is None
    browser_runs.give_code(ports, ENV, agent.id, "424242")  # no 409: the new pause will send it on


class SeesTheFlagWhenARunEnds:
    """The run store as a client reads it: what the agent's flag said at the moment each run's end
    was saved (a client that sees the end may read the agent the next instant)."""

    def __init__(self, ports) -> None:
        self.ports = ports
        self.inner = ports.agent_runs
        self.flag_at_end: dict[int, bool] = {}
        self.flag_at_resume: bool | None = None

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def save(self, run, expected):
        saved = self.inner.save(run, expected)
        if saved.finished:
            agent = self.ports.agents.get(run.environment, run.agent_id)
            self.flag_at_end[run.id] = agent.browser_state.needs_verification
        return saved

    def resume_with_code(self, run, code, now):
        resumed = self.inner.resume_with_code(run, code, now)
        self.flag_at_resume = self.ports.agents.get(run.environment, run.agent_id).browser_state.needs_verification
        return resumed


class FailsToClearTheFlagOnce:
    """The agent store, with the first write that clears the flag lost (the task crashed there)."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.failed = False

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def set_browser_state(self, environment, agent_id, **changes):
        if changes.get("needs_verification") is False and not self.failed:
            self.failed = True
            raise ConnectionError("the task died here")
        return self.inner.set_browser_state(environment, agent_id, **changes)


END_WITHOUT_A_CODE = {
    "expire": lambda ports, agent, run: browser_runs.expire(ports, ENV, agent.id, run.id),
    "give_up": lambda ports, agent, run: browser_runs.give_up(ports, ENV, agent.id, run.id,
                                                              {"Error": "States.Timeout", "Cause": "gone"}),
}


@pytest.mark.parametrize("end", END_WITHOUT_A_CODE)
def test_a_client_that_sees_a_waiting_run_end_without_a_code_sees_its_agent_ask_for_none(ports, end):
    # Given a run waiting for a code, its agent asking for one
    agent = browser_agent(ports)
    run = paused(ports, agent)
    watched = SeesTheFlagWhenARunEnds(ports)
    wired = replace(ports, agent_runs=watched)
    # When the wait ends without a code
    END_WITHOUT_A_CODE[end](wired, agent, run)
    # Then the flag was cleared before the run read failed
    assert ports.agent_runs.get(ENV, agent.id, run.id).status is AgentRunStatus.FAILED
    assert watched.flag_at_end == {run.id: False}


@pytest.mark.parametrize("end", END_WITHOUT_A_CODE)
def test_an_end_without_a_code_cut_short_between_its_writes_is_finished_by_its_retry(ports, end):
    # Given a run waiting for a code, and a task that dies at its first write of the flag
    agent = browser_agent(ports)
    run = paused(ports, agent)
    wired = replace(ports, agents=FailsToClearTheFlagOnce(ports.agents))
    with pytest.raises(ConnectionError):
        END_WITHOUT_A_CODE[end](wired, agent, run)
    # When Step Functions retries the task
    END_WITHOUT_A_CODE[end](wired, agent, run)
    # Then the run failed and its agent asks for no code
    assert ports.agent_runs.get(ENV, agent.id, run.id).status is AgentRunStatus.FAILED
    assert ports.agents.get(ENV, agent.id).browser_state.needs_verification is False
    assert ports.agent_runs.running_run(ENV, agent.id) is None


def test_a_client_that_sees_a_run_resumed_by_its_code_sees_its_agent_ask_for_none(ports):
    # Given a run waiting for a code, its agent asking for one
    agent = browser_agent(ports)
    run = paused(ports, agent)
    watched = SeesTheFlagWhenARunEnds(ports)
    # When the code is posted
    browser_runs.give_code(replace(ports, agent_runs=watched), ENV, agent.id, "424242")
    # Then the flag was cleared before the run read running again (the attempt it starts may set it again)
    assert ports.agent_runs.get(ENV, agent.id, run.id).status is RUNNING
    assert watched.flag_at_resume is False
