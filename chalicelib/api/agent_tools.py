"""What an llm agent's run sees and can do: the prompt's context, and its tools.

The tools are a second client of the API's use cases, driven by a model instead of HTTP: they call
the same services and answer with the same views the routes render (compact JSON), so a model
reads what an API client would. The environment is bound when the tool set is built and is never
a parameter; a tool's failure (bad input, not found, refused) goes back to the model as an error
result and never stops the run."""
from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from pydantic import BaseModel

from chalicelib.api.reconciliation_exceptions import detail_out, exceptions_out
from chalicelib.api.reconciliations import reconciliations_out, rule_out
from chalicelib.api.schemas.runs import RunOut
from chalicelib.domain.agents.agent import Agent
from chalicelib.domain.agents.conversation import ToolCall, ToolResult, ToolSpec
from chalicelib.domain.agents.definition import Mention, MentionType
from chalicelib.domain.agents.files import (
    MAX_INLINE_BYTES,
    AgentFile,
    BadFilename,
    FileTooLarge,
    content_type_for,
    safe_filename,
)
from chalicelib.domain.agents.runs import MAX_AGENT_DEPTH, AgentRun, AgentRunTrigger, OutputFile
from chalicelib.domain.agents.sql_guard import SqlRefused
from chalicelib.domain.audit import agent_actor
from chalicelib.domain.clock import utc_now
from chalicelib.domain.csv_cells import spreadsheet_safe
from chalicelib.domain.errors import DomainError, NotFound
from chalicelib.domain.reconciliation_exceptions import ExceptionStatus, RecordFilter
from chalicelib.domain.runs import RunTrigger
from chalicelib.observability import logger
from chalicelib.services import agent_runs, audit
from chalicelib.services import agents as agent_service
from chalicelib.services import reconciliation_exceptions as exception_service
from chalicelib.services.ports import Ports
from chalicelib.services.reconciliation_runs import start_run

READ_CHARS = 200_000  # of an input file, per read
MAX_READ_BYTES = 20 * 1024 * 1024  # an input file larger than this is not read into a run at all
LIST_LIMIT = 50
MAX_AGENTS_STARTED = 3  # run_agent calls of one run (with the depth bound: a tree of at most 3 + 9 + 27)


class ToolFailed(Exception):
    """A tool refused or could not do what it was asked: the message goes back to the model."""


def _object(properties: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": list(required), "additionalProperties": False}


_ID = {"type": "integer", "minimum": 1}
SPECS = [
    ToolSpec("sql", "Run one read-only SELECT over this environment's records, as the table `records` with columns "
             "id, data_stream_key, date (YYYY-MM-DD), amount (integer, minor units), currency, decimal_places, "
             "direction ('credit' or 'debit'), description, external_id, metadata (JSON text). "
             "Answers a compact table of at most 200 rows.",
             _object({"query": {"type": "string", "description": "One SELECT statement"}}, ("query",))),
    ToolSpec("list_reconciliations", "List this environment's reconciliations (newest first) with their streams.",
             _object({"cursor": {"type": "string", "description": "next_cursor of the previous page"}})),
    ToolSpec("get_reconciliation", "One reconciliation: its streams, last run, rules and open exception count.",
             _object({"id": _ID}, ("id",))),
    ToolSpec("list_exceptions", "List exceptions (newest first), optionally of one reconciliation and status.",
             _object({"reconciliation_id": _ID,
                      "status": {"type": "string", "enum": [s.value for s in ExceptionStatus]},
                      "limit": {"type": "integer", "minimum": 1, "maximum": LIST_LIMIT}})),
    ToolSpec("get_exception", "One exception with its records' aggregates, comments and assignees.",
             _object({"id": _ID}, ("id",))),
    ToolSpec("comment_on_exception", "Add a comment to an exception (signed as this agent).",
             _object({"id": _ID, "body": {"type": "string", "minLength": 1, "maxLength": 5000}}, ("id", "body"))),
    ToolSpec("start_reconciliation_run", "Start a run of a reconciliation's rules over its open records.",
             _object({"reconciliation_id": _ID}, ("reconciliation_id",))),
    ToolSpec("read_input_file", "Read one of this run's input files as text.",
             _object({"filename": {"type": "string"}, "offset": {"type": "integer", "minimum": 0}}, ("filename",))),
    ToolSpec("write_output_file", "Write a text file as this run's output (delivered by mail when the agent "
             "delivers). Writing the same name again replaces it.",
             _object({"filename": {"type": "string"}, "content": {"type": "string"}}, ("filename", "content"))),
    ToolSpec("run_agent", "Start a run of another agent that your instructions mention (it runs on its own; "
             "this answers its run id).", _object({"agent_id": {"type": "string"}}, ("agent_id",))),
]


class AgentToolBox:
    """The tools of one run of `agent`, bound to its environment."""

    def __init__(self, ports: Ports, agent: Agent, run: AgentRun) -> None:
        self._ports, self._agent, self._run = ports, agent, run
        self._environment = agent.environment
        self.specs = SPECS
        self._schemas = {spec.name: spec.parameters for spec in SPECS}
        self.output_files: list[OutputFile] = list(run.output_files)
        self._agents_started = 0
        self._handlers: dict[str, Callable[[dict[str, Any]], str]] = {
            "sql": self._sql, "list_reconciliations": self._list_reconciliations,
            "get_reconciliation": self._get_reconciliation, "list_exceptions": self._list_exceptions,
            "get_exception": self._get_exception, "comment_on_exception": self._comment,
            "start_reconciliation_run": self._start_run, "read_input_file": self._read_input,
            "write_output_file": self._write_output, "run_agent": self._run_agent}

    def call(self, call: ToolCall) -> ToolResult:
        handler = self._handlers.get(call.name)
        if handler is None:
            return ToolResult(call.id, f"no tool named {call.name!r}; the tools are: {', '.join(self._handlers)}",
                              is_error=True)
        if call.arguments is None:
            return ToolResult(call.id, "the arguments are not a JSON object; send the tool's input as an object",
                              is_error=True)
        if mismatch := _against_schema(self._schemas[call.name], call.arguments):
            return ToolResult(call.id, mismatch, is_error=True)
        try:
            return ToolResult(call.id, handler(call.arguments))
        except (ToolFailed, DomainError) as refused:
            return ToolResult(call.id, str(refused), is_error=True)
        except (KeyError, TypeError, ValueError) as bad:
            return ToolResult(call.id, f"bad input: {type(bad).__name__}: {bad}", is_error=True)
        except Exception as error:  # the service's own failure: the run goes on, the log has the details
            logger.exception("agent tool failed", extra={"tool": call.name})
            return ToolResult(call.id, f"{call.name} failed ({type(error).__name__}); try again later or another way",
                              is_error=True)

    # Data --------------------------------------------------------------------------------------

    def _sql(self, args: dict[str, Any]) -> str:
        engine = self._ports.records_sql
        if engine is None:
            raise ToolFailed("sql is not available in this process")
        try:
            return engine.as_table(engine.query(self._environment, str(args["query"])))
        except SqlRefused as refused:
            raise ToolFailed(f"refused: {refused}") from None

    def _list_reconciliations(self, args: dict[str, Any]) -> str:
        page, cursor = self._ports.reconciliations.list_page(self._environment, LIST_LIMIT, args.get("cursor"))
        return _json({"data": [_plain(r) for r in reconciliations_out(page, self._environment)],
                      "next_cursor": cursor})

    def _get_reconciliation(self, args: dict[str, Any]) -> str:
        reconciliation = self._ports.reconciliations.get(self._environment, _int(args["id"]))
        rules = [r for r in self._ports.reconciliation_rules.list_of(self._environment, reconciliation.id)
                 if r.holds_priority]  # its rule set: suggestions (docs/learned-rules.md) are not rules yet
        open_count = _open_exceptions(self._ports, self._environment, reconciliation.id)
        return _json({**_plain(reconciliations_out([reconciliation], self._environment)[0]),
                      "rules": [_plain(rule_out(r)) for r in rules], "open_exceptions": open_count})

    def _list_exceptions(self, args: dict[str, Any]) -> str:
        status = ExceptionStatus(args["status"]) if args.get("status") else None
        query = exception_service.ExceptionQuery(
            reconciliation_id=_int(args["reconciliation_id"]) if args.get("reconciliation_id") else None,
            status=status)
        limit = min(_int(args.get("limit", 20)), LIST_LIMIT)
        found, more = exception_service.list_exceptions(self._ports, self._environment, query, 0, limit)
        return _json({"data": [_plain(e) for e in exceptions_out(self._environment, found)], "more": more})

    def _get_exception(self, args: dict[str, Any]) -> str:
        exception = self._ports.exceptions.get(self._environment, _int(args["id"]))
        return _json(_plain(detail_out(self._environment, exception, RecordFilter())))

    def _comment(self, args: dict[str, Any]) -> str:
        with self._change("reconciliation_exception.commented", "reconciliation_exception", _int(args["id"])) as noted:
            comment = exception_service.add_comment(self._ports, self._environment, _int(args["id"]),
                                                    body=str(args["body"]), author_idp_id=f"agent:{self._agent.id}",
                                                    mentions=[])
            noted.summary["comment_id"] = comment.id
        return _json({"comment_id": comment.id, "exception_id": _int(args["id"])})

    def _start_run(self, args: dict[str, Any]) -> str:
        with self._change("reconciliation_run.created", "reconciliation_run") as noted:
            run = start_run(self._ports, self._environment, _int(args["reconciliation_id"]), trigger=RunTrigger.AGENT)
            noted.resource_id = run.id
            noted.summary.update(reconciliation_id=run.reconciliation_id, status=run.status.value)
        return _json(_plain(RunOut.model_validate(run)))

    def _change(self, action: str, resource_type: str,
                resource_id: int | str | None = None) -> AbstractContextManager[audit.NotedChange]:
        """Around a tool's change: its audit entry, with the agent as the actor and its run in the
        summary (audit.change_in_flight: should the run die before the entry is written, the
        sweeper writes it; a tool that refuses changed nothing and writes none)."""
        return audit.change_in_flight(self._ports, self._environment, request_id=uuid.uuid4().hex,
                                      actor=agent_actor(self._agent.id), action=action, resource_type=resource_type,
                                      resource_id=resource_id, summary={"agent_run_id": self._run.id},
                                      refusals=(ToolFailed, DomainError))

    # Files -------------------------------------------------------------------------------------

    def input_files(self) -> dict[str, tuple[AgentFile, str | None]]:
        """This run's inputs by lower-cased name: the agent's files, then the dropped file."""
        attached = agent_service.files_of(self._ports, self._environment, self._agent.id)
        files: dict[str, tuple[AgentFile, str | None]] = {
            f.filename.lower(): (f, None) for f in attached if f.byte_size is not None}  # landed ones only
        extra = self._run.extra_input
        if extra is not None:
            dropped = AgentFile(environment=self._environment, agent_id=self._agent.id, id="dropped",
                                filename=extra.filename, byte_size=extra.byte_size,
                                content_type=content_type_for(extra.filename), created_at=self._run.created_at)
            files[extra.filename.lower()] = (dropped, extra.key)
        return files

    def _read_input(self, args: dict[str, Any]) -> str:
        files = self.input_files()
        name = str(args["filename"])
        found = files.get(name.lower())
        if found is None:
            raise ToolFailed(f"no input file named {name!r}; the input files are: "
                             f"{', '.join(f.filename for f, _ in files.values()) or 'none'}")
        file, dropped_key = found
        offset = _int(args.get("offset", 0))
        if file.byte_size is not None and file.byte_size > MAX_READ_BYTES:
            raise ToolFailed(f"{file.filename} is {file.byte_size} bytes; a tool reads files of at most "
                             f"{MAX_READ_BYTES}")
        try:
            raw = (self._ports.payloads.get_bytes(dropped_key) if dropped_key is not None
                   else self._ports.agent_files.read(file, MAX_READ_BYTES))
        except FileTooLarge as large:
            raise ToolFailed(f"{file.filename} is {large.byte_size} bytes; a tool reads files of at most "
                             f"{MAX_READ_BYTES}") from None
        text = raw.decode("utf-8", errors="replace")
        chunk = text[offset:offset + READ_CHARS]
        rest = len(text) - offset - len(chunk)
        return chunk + (f"\n[... {rest} more characters: read again with offset {offset + len(chunk)}]" if rest > 0
                        else "")

    def _write_output(self, args: dict[str, Any]) -> str:
        try:
            filename = safe_filename(str(args["filename"]))
        except BadFilename as bad:
            raise ToolFailed(str(bad)) from None
        body = spreadsheet_safe(filename, str(args["content"]).encode("utf-8"))
        if len(body) > MAX_INLINE_BYTES:
            raise ToolFailed(f"the content is {len(body)} bytes; an output file holds at most {MAX_INLINE_BYTES}")
        previous = next((f for f in self.output_files if f.filename.lower() == filename.lower()), None)
        output = OutputFile(id=previous.id if previous else str(uuid.uuid4()), filename=filename,
                            byte_size=len(body), content_type=content_type_for(filename), created_at=utc_now())
        with self._change("agent_file.written", "agent_run", self._run.id) as noted:
            self._ports.agent_files.put(self._run.stored(output), body)
            noted.summary.update(filename=filename, byte_size=len(body))
        self.output_files = [f for f in self.output_files if f is not previous] + [output]
        return _json({"filename": filename, "byte_size": len(body)})

    # Agents ------------------------------------------------------------------------------------

    def _run_agent(self, args: dict[str, Any]) -> str:
        target = str(args["agent_id"]).lower()
        mentioned = {str(m.id).lower() for m in self._agent.mentions if m.type is MentionType.AGENT}
        if target not in mentioned:
            raise ToolFailed(f"agent {target} is not mentioned in this agent's instructions; only mentioned agents "
                             f"can be run ({', '.join(sorted(mentioned)) or 'none are'})")
        chain = (*self._run.callers, self._agent.id)
        if target in chain:
            raise ToolFailed(f"agent {target} is already running above this run (a cycle: {' -> '.join(chain)})")
        if len(chain) >= MAX_AGENT_DEPTH:
            raise ToolFailed(f"agents may start agents {MAX_AGENT_DEPTH} levels deep at most")
        if self._agents_started >= MAX_AGENTS_STARTED:
            raise ToolFailed(f"a run starts at most {MAX_AGENTS_STARTED} agent runs")
        self._agents_started += 1
        with self._change("agent_run.created", "agent_run") as noted:
            run = agent_runs.queue_run(self._ports, self._environment, target, AgentRunTrigger.AGENT, callers=chain)
            noted.resource_id = run.id
            noted.summary["agent_id"] = target
        return _json({"agent_id": target, "run_id": run.id, "status": run.status.value})


class AgentRunContext:
    """The prompt of a run: the standing instructions, what its mentions name, its input files and
    the current time in the agent's timezone."""

    def __init__(self, ports: Ports, agent: Agent, run: AgentRun, tools: AgentToolBox,
                 now: datetime | None = None) -> None:
        self._ports, self._agent, self._run, self._tools = ports, agent, run, tools
        self._now = now or utc_now()

    def system_prompt(self) -> str:
        return (
            f"You are \"{self._agent.name}\", an agent of a financial reconciliation service. You act on one "
            "environment's data, and only through the tools you are given. Amounts are integers in minor units "
            "(cents for USD; see decimal_places). Be exact: never round or invent figures; query them. Write files "
            "with write_output_file when your instructions ask for a file. When you are done, answer with a short "
            "summary of what you did.")

    def user_prompt(self) -> str:
        local = self._now.astimezone(ZoneInfo(self._agent.schedule.timezone))
        parts = [f"Instructions:\n{self._agent.instructions or '(none)'}"]
        if self._agent.mentions:
            parts.append("What the instructions mention:\n" + "\n".join(
                f"- {self._mention(m)}" for m in self._agent.mentions))
        files = self._tools.input_files()
        parts.append("Input files (read_input_file):\n" + ("\n".join(
            f"- {f.filename} ({f.byte_size} bytes)" for f, _ in files.values()) or "- none"))
        parts.append(f"Now: {local:%A %Y-%m-%d %H:%M} ({self._agent.schedule.timezone}); "
                     f"this is run {self._run.id}, started by {self._run.trigger.value}.")
        return "\n\n".join(parts)

    def _mention(self, mention: Mention) -> str:
        try:
            match mention.type:
                case MentionType.RECONCILIATION:
                    return self._reconciliation(int(mention.id))
                case MentionType.DATA_STREAM:
                    return self._stream(mention)
                case MentionType.AGENT:
                    other = self._ports.agents.get(self._agent.environment, str(mention.id))
                    return (f"agent {other.id} \"{other.name}\": {other.description or 'no description'}; start it "
                            "with the run_agent tool")
                case MentionType.USER:
                    return f"user \"{mention.label or mention.id}\" (identity provider id {mention.id})"
        except DomainError:
            pass
        return f"{mention.type.value} {mention.id} (no longer exists)"

    def _reconciliation(self, reconciliation_id: int) -> str:
        environment = self._agent.environment
        reconciliation = self._ports.reconciliations.get(environment, reconciliation_id)
        rules = [r for r in self._ports.reconciliation_rules.list_of(environment, reconciliation_id)
                 if r.holds_priority]
        return (f"reconciliation {reconciliation.id} \"{reconciliation.name}\" ({reconciliation.run_type.value}): "
                f"side A streams {', '.join(reconciliation.side_a_stream_keys)}; side B streams "
                f"{', '.join(reconciliation.side_b_stream_keys)}; {len(rules)} rule(s): "
                f"{_json([_plain(rule_out(r)) for r in rules])}; open exceptions: "
                f"{_open_exceptions(self._ports, environment, reconciliation_id)}")

    def _stream(self, mention: Mention) -> str:
        environment = self._agent.environment
        stream = (self._ports.data_streams.find_by_id(environment, mention.id) if isinstance(mention.id, int)
                  else self._ports.data_streams.get(environment, str(mention.id)))
        if stream is None:
            raise NotFound(f"data stream {mention.id} not found")
        definitions = self._ports.property_definitions.list(environment, stream.key)
        properties = ", ".join(f"{d.key} ({d.type.value}{', optional' if d.optional else ''})" for d in definitions)
        return (f"data stream `{stream.key}` (id {stream.id}) \"{stream.name}\", type {stream.type.value}, "
                f"{stream.records_count} records; properties: {properties or 'none'}")


def workbench(ports: Ports, agent: Agent, run: AgentRun) -> tuple[AgentToolBox, AgentRunContext]:
    tools = AgentToolBox(ports, agent, run)
    return tools, AgentRunContext(ports, agent, run, tools)


def _open_exceptions(ports: Ports, environment: str, reconciliation_id: int) -> str:
    query = exception_service.ExceptionQuery(reconciliation_id=reconciliation_id, status=ExceptionStatus.OPEN)
    found, more = exception_service.list_exceptions(ports, environment, query, 0, 100)
    return f"{len(found)}{'+' if more else ''}"


def _against_schema(schema: dict[str, Any], arguments: dict[str, Any]) -> str | None:
    """What in the arguments the tool's schema does not take (its keys; the handlers check values)."""
    unknown = sorted(set(arguments) - set(schema["properties"]))
    missing = [name for name in schema["required"] if name not in arguments]
    if unknown or missing:
        return "; ".join(part for part in (
            f"unknown argument(s) {', '.join(unknown)}" if unknown else "",
            f"missing argument(s) {', '.join(missing)}" if missing else "") if part) + (
            f"; the tool takes {', '.join(schema['properties']) or 'no arguments'}")
    return None


def _plain(view: BaseModel) -> dict[str, Any]:
    return view.model_dump(mode="json", exclude_none=True)


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int | str) or not str(value).isdigit():
        raise ToolFailed(f"{value!r} is not an id (a positive integer)")
    return int(value)
