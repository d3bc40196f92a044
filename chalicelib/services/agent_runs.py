"""Agent runs: queue one (the API, a file drop, another agent), start one when a schedule fires,
run it on the agent-run queue (one run of an agent at a time), deliver what it wrote, fail it.

A run's message is at-least-once: a finished run's message is dropped, and so is one of a run
going (within its lease, RUN_LEASE); a run found `running` past its lease was cut off (its worker
crashed or ran out of time) and is failed rather than run twice, since a run's tool calls
(comments, mail, runs started) are not idempotent.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any, Protocol

from chalicelib.domain.agents.agent import Agent
from chalicelib.domain.agents.conversation import (
    AssistantMessage,
    LanguageModel,
    Message,
    ModelError,
    StopReason,
    ToolCall,
    ToolResult,
    ToolResults,
    ToolSpec,
    Usage,
    UserMessage,
)
from chalicelib.domain.agents.definition import AgentKind
from chalicelib.domain.agents.runs import (
    AgentRun,
    AgentRunStatus,
    AgentRunTrigger,
    Delivery,
    InputRef,
    OutputFile,
    Step,
)
from chalicelib.domain.clock import utc_now
from chalicelib.domain.csv_cells import spreadsheet_safe
from chalicelib.domain.errors import Conflict, DomainError, NotFound, TransitionRefused, failure_reason
from chalicelib.observability import logger
from chalicelib.services import browser_runs
from chalicelib.services.events import announce_agent_run
from chalicelib.services.ports import AgentLimits, Ports

# A turn's tool calls beyond this are answered "not run": with the turns' bound it keeps a run's
# steps (each at most about 1.5 KB) within one DynamoDB item.
MAX_CALLS_PER_TURN = 8
BUSY_RETRY_SECONDS = 30  # a queued run waits this long, again and again, while another run of its agent goes
QUEUED, RUNNING, WAITING = AgentRunStatus.QUEUED, AgentRunStatus.RUNNING, AgentRunStatus.WAITING_FOR_VERIFICATION
MAX_ATTACHED = 10 * 1024 * 1024  # SES's limit of a raw message
REFUSED_DROPS_PREFIX = "drops-refused/"  # outside drops/: writing the reason starts nothing


class ToolBox(Protocol):
    """The tools of one run, bound to its environment (chalicelib/api/agent_tools.py)."""
    @property
    def specs(self) -> list[ToolSpec]: ...
    @property
    def output_files(self) -> list[OutputFile]: ...
    def call(self, call: ToolCall) -> ToolResult: ...


class RunContext(Protocol):
    """What a run is given beside its tools: the prompt's context and its input files."""
    def system_prompt(self) -> str: ...
    def user_prompt(self) -> str: ...


# Builds the tools and the prompt of a run: (ports, agent, run) -> (tools, context).
Workbench = Callable[[Ports, Agent, AgentRun], tuple[ToolBox, RunContext]]


def queue_run(ports: Ports, environment: str, agent_id: str, trigger: AgentRunTrigger = AgentRunTrigger.MANUAL,
              extra_input: InputRef | None = None, callers: tuple[str, ...] = ()) -> AgentRun:
    """Record a queued run and send it to the agent-run queue (inactive agents run on demand too)."""
    ports.agents.get(environment, agent_id)  # 404 first
    run = AgentRun(environment=environment, agent_id=agent_id, id=ports.agent_runs.next_id(environment),
                   status=QUEUED, trigger=trigger, created_at=utc_now(), extra_input=extra_input, callers=callers)
    ports.agent_runs.add(run)
    ports.agent_run_queue.send({"environment": environment, "agent_id": agent_id, "run_id": run.id})
    return run


def handle_message(ports: Ports, message: Mapping[str, Any], workbench: Workbench) -> None:
    environment, agent_id = str(message["environment"]), str(message["agent_id"])
    if "run_id" in message:
        execute(ports, environment, agent_id, int(message["run_id"]), workbench)
        return
    run = _scheduled_run(ports, environment, agent_id, message.get("scheduled_time"))
    if run is not None:
        execute(ports, environment, agent_id, run.id, workbench)


def _scheduled_run(ports: Ports, environment: str, agent_id: str, scheduled_time: Any) -> AgentRun | None:
    """The run a schedule's firing starts (the same one when the firing is delivered again); None
    when the agent is gone or no longer scheduled."""
    try:
        agent = ports.agents.get(environment, agent_id)
    except NotFound:
        logger.warning("a schedule fired for an agent that is gone", extra={"agent_id": agent_id})
        return None
    if not agent.scheduled:
        logger.info("a schedule fired for an agent no longer scheduled", extra={"agent_id": agent_id})
        return None
    token = f"schedule:{scheduled_time}" if scheduled_time else None
    return _triggered_run(ports, environment, agent_id, AgentRunTrigger.SCHEDULE, token)


def _triggered_run(ports: Ports, environment: str, agent_id: str, trigger: AgentRunTrigger, token: str | None,
                   extra_input: InputRef | None = None) -> AgentRun:
    """The one run an event starts (a schedule's firing, a drop), however often the event comes:
    its claim names the run, so a delivery after a crash between the claim and the run's write
    makes that very run rather than a second one or none."""
    run_id = ports.agent_runs.next_id(environment)
    if token is not None:
        run_id = ports.agent_runs.claim_trigger(environment, agent_id, token, run_id)
        try:
            return ports.agent_runs.get(environment, agent_id, run_id)
        except NotFound:
            pass  # claimed, and never written: written now
    run = AgentRun(environment=environment, agent_id=agent_id, id=run_id, status=QUEUED, trigger=trigger,
                   created_at=utc_now(), extra_input=extra_input)
    try:
        ports.agent_runs.add(run)
    except Conflict:  # the same event's other delivery wrote it meanwhile
        return ports.agent_runs.get(environment, agent_id, run_id)
    return run


def on_file_dropped(ports: Ports, environment: str, key: str, etag: str) -> AgentRun | None:
    """A file dropped directly under `drops/<environment>/` starts a run of the environment's active
    file-drop agent with the file as an extra input; with none, the drop is refused and the reason
    is written to `drops-refused/<environment>/<name>.json` and logged."""
    filename = key.rsplit("/", 1)[-1]
    holder = ports.agents.file_drops_holder(environment)
    agent = None
    if holder is not None:
        try:
            agent = ports.agents.get(environment, holder)
        except NotFound:
            agent = None
    if agent is None or not agent.holds_file_drops:
        reason = (f"{filename} was dropped for environment {environment}, which has no active agent that handles "
                  "file drops: turn handles_file_drops on for one, or drop the file into a stream's folder "
                  "(drops/<environment>/<stream key>/) to import it")
        logger.warning("file drop refused", extra={"key": key, "reason": reason})
        ports.payloads.put_json(f"{REFUSED_DROPS_PREFIX}{environment}/{filename}.json",
                                {"dropped": key, "refused_at": utc_now().isoformat(), "reason": reason})
        return None
    run = _triggered_run(ports, environment, agent.id, AgentRunTrigger.FILE_DROP, f"drop:{key}:{etag}",
                         InputRef(filename=filename, key=key, byte_size=ports.payloads.size(key)))
    if run.status is QUEUED:  # sent again when the event comes again: a queued run's messages are harmless
        ports.agent_run_queue.send({"environment": environment, "agent_id": agent.id, "run_id": run.id})
    return run


def execute(ports: Ports, environment: str, agent_id: str, run_id: int, workbench: Workbench) -> AgentRun | None:
    """Run a queued run to its end (or leave it queued while another run of its agent goes). None
    when the run is gone (its agent was deleted)."""
    try:
        run = ports.agent_runs.get(environment, agent_id, run_id)
    except NotFound:
        logger.info("a message for a run that is gone (its agent was deleted)", extra={"agent_run_id": run_id})
        return None
    if run.finished:  # its message, delivered again (perhaps after announcing its end failed)
        announce_agent_run(ports, run)
        return run
    if run.status in (RUNNING, WAITING):
        if not run.lease_expired(utc_now()):
            return run  # a duplicate of the message whose worker (or workflow) is running it now
        failed = _fail(ports, run, CUT_OFF)
        ports.agent_runs.release_running(environment, agent_id, run_id)
        return failed
    holder = _claim(ports, run)
    if holder is not None:
        if run.trigger is AgentRunTrigger.SCHEDULE:  # never lost silently: recorded as skipped
            return _fail(ports, run, f"skipped: run {holder} of this agent was still going when the schedule fired")
        ports.agent_run_queue.send({"environment": environment, "agent_id": agent_id, "run_id": run_id},
                                   delay_seconds=BUSY_RETRY_SECONDS)
        return run
    return _run(ports, run, workbench)


CUT_OFF = "the run was cut off (its worker stopped before it ended: a crash or a timeout); start it again"


def _claim(ports: Ports, run: AgentRun) -> int | None:
    """Take the agent's run guard for `run`: None when taken, else the id of the run going. A guard
    left by a run that has finished, or whose lease ran out (its worker died), is taken over; such
    a run is failed as cut off."""
    holder = ports.agent_runs.claim_running(run.environment, run.agent_id, run.id)
    if holder is None:
        return None
    try:
        held_by = ports.agent_runs.get(run.environment, run.agent_id, holder)
    except NotFound:
        held_by = None
    going = held_by is not None and not held_by.finished and not held_by.lease_expired(utc_now())
    if going or not ports.agent_runs.take_over_running(run.environment, run.agent_id, holder, run.id):
        return holder
    if held_by is not None and not held_by.finished:
        _fail(ports, held_by, CUT_OFF)
    return None


def _run(ports: Ports, run: AgentRun, workbench: Workbench) -> AgentRun | None:
    """Start the run (this worker holds the agent's guard for it), converse, deliver. The guard is
    given up by the worker that started the run, and only by it: a duplicate message that lost
    the start leaves it alone. A browser agent's run is handed to its workflow, which gives the
    guard up when the run ends."""
    release = True
    try:
        try:
            agent = ports.agents.get(run.environment, run.agent_id)
        except NotFound:
            return _fail(ports, run, "the agent was deleted before its run started")
        model = None
        if agent.kind is not AgentKind.BROWSER:
            refused = ports.limits.agent.refused_model(agent.model)  # an agent saved before the list changed
            if refused is not None:
                return _fail(ports, run, refused)
            try:
                model = ports.language_model(agent.model)
            except ModelError as error:
                return _fail(ports, run, str(error))
        started = utc_now()
        try:
            run = ports.agent_runs.save(run.moved(RUNNING, started_at=started, model=model.model if model else None,
                                                  browser=model is None), expected=(QUEUED,))
        except TransitionRefused:  # another delivery of its message started it, or it was failed meanwhile
            release = False
            return ports.agent_runs.get(run.environment, run.agent_id, run.id)
        ports.agents.set_last_run(run.environment, run.agent_id, started)
        if model is None:
            try:
                browser_runs.hand_over(ports, run)
            except Exception as error:
                logger.exception("starting a browser run's workflow failed")
                return _fail(ports, run, _failed_by(error))
            release = False  # the workflow holds the guard now
            return run
        return _converse_and_deliver(ports, agent, run, model, workbench)
    finally:
        if release:
            ports.agent_runs.release_running(run.environment, run.agent_id, run.id)


def _converse_and_deliver(ports: Ports, agent: Agent, run: AgentRun, model: LanguageModel,
                          workbench: Workbench) -> AgentRun | None:
    session = None
    try:
        tools, context = workbench(ports, agent, run)
        session = _Session(ports, run, model, tools, ports.limits.agent)
        failure = session.converse(context.system_prompt(), context.user_prompt())
        run = session.run
        if failure is not None:
            return _fail(ports, run, failure)
        run = _deliver(ports, agent, run)
        run = ports.agent_runs.save(run.moved(AgentRunStatus.COMPLETED, completed_at=utc_now()), expected=(RUNNING,))
    except _RunGone:
        return None
    except Exception as error:  # the run fails with the reason, rather than as "cut off" at a redelivery
        logger.exception("agent run failed")
        return _fail(ports, session.run if session else run,
                     _failed_by(error))
    # Outside the try: a failure to announce must not fail a completed run; it fails the message,
    # whose redelivery announces it (execute, on a finished run).
    announce_agent_run(ports, run)
    return run


class _RunGone(Exception):
    """The run's item was failed or removed (its agent deleted) while it ran: the run stops."""


class _Session:
    """The conversation of one run with its model: the model asks for tool calls, the tools answer,
    until the model gives its final answer or a bound is hit. Each turn's steps are saved as they
    come, so that a client sees the run progress."""

    def __init__(self, ports: Ports, run: AgentRun, model: LanguageModel, tools: ToolBox,
                 limits: AgentLimits) -> None:
        self._ports, self.run, self._model, self._tools, self._limits = ports, run, model, tools, limits

    def converse(self, system: str, prompt: str) -> str | None:
        """None when the model answered; else why the run fails."""
        messages: list[Message] = [UserMessage(prompt)]
        usage = Usage()
        began = utc_now()
        for _ in range(self._limits.max_turns):
            if (utc_now() - began).total_seconds() > self._limits.max_seconds:
                return f"the run took longer than its bound of {self._limits.max_seconds} s"
            try:
                reply = self._model.complete(system, messages, self._tools.specs, self._limits.reply_tokens)
            except ModelError as error:
                return f"the model failed: {error}"
            usage += reply.usage
            messages.append(reply.message)
            if reply.stop is StopReason.TOOL_USE and reply.message.tool_calls:
                messages.append(self._call_tools(reply.message, usage))
                if usage.input_tokens + usage.output_tokens > self._limits.max_tokens:
                    return (f"the run used {usage.input_tokens + usage.output_tokens} tokens, over its bound of "
                            f"{self._limits.max_tokens}")
                continue
            self._save(usage, Step.of("final_answer", None, False, reply.message.text or "(no text)", utc_now()))
            return None
        return f"the model did not finish within the run's bound of {self._limits.max_turns} turns"

    def _call_tools(self, message: AssistantMessage, usage: Usage) -> ToolResults:
        results, steps = [], []
        for n, call in enumerate(message.tool_calls):
            result = (self._tools.call(call) if n < MAX_CALLS_PER_TURN else ToolResult(
                call.id, f"not run: at most {MAX_CALLS_PER_TURN} tool calls a turn; ask again", is_error=True))
            results.append(result)
            steps.append(Step.of(call.name, call.arguments if call.arguments is not None else call.raw_arguments,
                                 result.is_error, result.content, utc_now()))
        self._save(usage, *steps)
        return ToolResults(tuple(results))

    def _save(self, usage: Usage, *steps: Step) -> None:
        try:
            self.run = self._ports.agent_runs.save(
                replace(self.run, steps=self.run.steps + steps, usage=usage,
                        output_files=tuple(self._tools.output_files)), expected=(RUNNING,))
        except TransitionRefused:
            raise _RunGone() from None


def _deliver(ports: Ports, agent: Agent, run: AgentRun) -> AgentRun:
    """Mail the output files the pattern selects to each recipient (one message each, so that one
    bad address does not stop the others); each outcome is recorded on the run."""
    if not agent.delivery.enabled or not agent.delivery.recipients:
        return run
    files = [f for f in run.output_files if agent.delivery.delivers(f.filename)]
    if not files:
        return run
    # Written safe already; neutralised again (it changes nothing twice) for files written before that.
    attachments = [(f.filename, f.content_type,
                    spreadsheet_safe(f.filename, ports.agent_files.read(run.stored(f), MAX_ATTACHED))) for f in files]
    subject = f"{agent.name}: {len(files)} file{'s' if len(files) != 1 else ''} from run {run.id}"
    body = (f"The agent \"{agent.name}\" finished run {run.id} at {utc_now():%Y-%m-%d %H:%M} UTC.\n\n"
            + "\n".join(f"- {f.filename} ({f.byte_size} bytes)" for f in files) + "\n")
    outcomes = []
    for recipient in agent.delivery.recipients:
        try:
            outcomes.append(Delivery(recipient, "sent", message_id=ports.mailer.send(recipient, subject, body,
                                                                                     attachments)))
        except Exception as error:  # recorded, and the others still go
            outcomes.append(Delivery(recipient, "failed", error=failure_reason(str(error))))
    return ports.agent_runs.save(replace(run, deliveries=tuple(outcomes)), expected=(RUNNING,))


def _fail(ports: Ports, run: AgentRun, reason: str) -> AgentRun:
    now = utc_now()
    failed = run.moved(AgentRunStatus.FAILED, error_message=reason, completed_at=now,
                       started_at=run.started_at or (now if run.status is RUNNING else None))
    try:
        failed = ports.agent_runs.save(failed, expected=(QUEUED, RUNNING, WAITING))
    except TransitionRefused:
        return ports.agent_runs.get(run.environment, run.agent_id, run.id)
    announce_agent_run(ports, failed)
    return failed


def fail_message(ports: Ports, message: Mapping[str, Any], error: BaseException) -> None:
    """The message's last delivery failed: its run fails with the reason, and gives up its guard."""
    environment, agent_id = str(message["environment"]), str(message["agent_id"])
    if "run_id" in message:
        run_id = int(message["run_id"])
    elif message.get("scheduled_time"):  # the run its firing made, if it made one
        run_id = ports.agent_runs.claim_trigger(environment, agent_id, f"schedule:{message['scheduled_time']}",
                                                ports.agent_runs.next_id(environment))
    else:
        return
    try:
        run = ports.agent_runs.get(environment, agent_id, run_id)
    except NotFound:
        return
    if not run.finished:
        _fail(ports, run, _failed_by(error))
    ports.agent_runs.release_running(environment, agent_id, run_id)


def _failed_by(error: BaseException) -> str:
    """A run's error_message for an exception that stopped it: a domain error's own message (written
    for the client); for any other only its type, since its text may name the deployment's
    resources (ARNs, buckets, hosts). The exception itself is in the operators' log."""
    if isinstance(error, DomainError):
        return f"the run failed: {str(error)[:300]}"
    return f"the run failed on an internal error ({type(error).__name__}); the operators' log holds its details"
