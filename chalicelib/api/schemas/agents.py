"""Bodies and answers of /agents: agents, their input files and their runs."""
from __future__ import annotations

from typing import Annotated, Any, Literal
from zoneinfo import available_timezones

from pydantic import ConfigDict, Field, StringConstraints, WithJsonSchema, model_serializer

from chalicelib.api.schemas.common import (
    Description,
    Model,
    Name,
    RequestModel,
    Timestamp,
    documented,
    unchanged_when_absent,
    when,
)
from chalicelib.domain.agents.definition import EMAIL, MAX_MENTIONS, MAX_PATTERN, MAX_RECIPIENTS, AgentKind, MentionType
from chalicelib.domain.agents.schedule import NEEDS_HOUR, Cadence


class MentionIn(RequestModel):
    type: str = Field(description="reconciliation, data_stream, user or agent",
                      json_schema_extra={"enum": [t.value for t in MentionType]})
    id: int | str = Field(description="A reconciliation's id, a data stream's id or key, an agent's id (UUID), a "
                                      "user's identity provider id")
    label: str = Field(default="", max_length=200)


def _int_from(low: int, high: int) -> WithJsonSchema:
    return WithJsonSchema({"type": "integer", "minimum": low, "maximum": high})


def _schedule_rules() -> list[dict[str, Any]]:
    """The cadence table as the document states it (domain.agents.schedule.check_schedule checks it)."""
    def needs(cadences: list[str], fields: list[str]) -> dict[str, Any]:
        return when({"properties": {"cadence": {"enum": cadences}}, "required": ["cadence"]},
                    {"required": fields, "properties": {f: {"type": "integer"} for f in fields}})
    return [needs([c.value for c in NEEDS_HOUR], ["hour", "minute"]),
            needs([c.value for c in Cadence if c is not Cadence.MANUAL], ["minute"]),
            needs([Cadence.WEEKLY.value], ["day_of_week"]),
            when({"properties": {"delivery_enabled": {"const": True}}, "required": ["delivery_enabled"]},
                 {"required": ["delivery_recipients"], "properties": {"delivery_recipients": {"minItems": 1}}})]


class AgentFieldsIn(RequestModel):
    """Every writable field of an agent; the cadence rules are checked together (422 naming each field)."""
    # The rules below are checked by domain.agents (all of a body's problems in one 422), so the
    # models only document them.
    model_config = ConfigDict(json_schema_extra=documented(allOf=_schedule_rules()))
    description: Description = unchanged_when_absent()
    instructions: Annotated[str, StringConstraints(max_length=20_000)] = unchanged_when_absent(
        "The standing prompt every run executes")
    kind: str = unchanged_when_absent("llm (browser agents are set up by the operator)", enum=[AgentKind.LLM.value])
    model: Annotated[str, StringConstraints(min_length=1, max_length=200)] | None = Field(
        default=None, description="null: the platform's default")
    cadence: str = unchanged_when_absent("manual (the default), hourly, daily, weekdays or weekly",
                                         enum=[c.value for c in Cadence])
    hour: Annotated[int, _int_from(0, 23)] | None = Field(
        default=None, description="0-23; required for daily, weekdays and weekly")
    minute: Annotated[int, _int_from(0, 59)] | None = Field(
        default=None, description="0-59; required for every cadence but manual")
    day_of_week: Annotated[int, _int_from(0, 6)] | None = Field(
        default=None, description="0-6, 0 = Sunday; required for weekly")
    timezone: str = unchanged_when_absent("IANA name the schedule is evaluated in (default UTC)",
                                          enum=sorted(available_timezones()), examples=["UTC", "America/New_York"])
    active: bool = unchanged_when_absent("Inactive agents are never scheduled but can be run on demand")
    handles_file_drops: bool = unchanged_when_absent("At most one active agent per environment")
    delivery_enabled: bool = unchanged_when_absent("true needs at least one delivery_recipients")
    delivery_recipients: list[Annotated[str, WithJsonSchema({"type": "string", "format": "email",
                                                             "pattern": EMAIL.pattern})]] = unchanged_when_absent(
        "Email addresses; required when delivery is enabled", maxItems=MAX_RECIPIENTS)
    delivery_file_pattern: Annotated[str, StringConstraints(max_length=MAX_PATTERN)] = unchanged_when_absent(
        "Case-insensitive glob of the output files mailed (default *)", pattern=r"^[^/]*[^/\s][^/]*$",
        examples=["*.csv", "*"])
    mentions: list[MentionIn] = unchanged_when_absent(maxItems=MAX_MENTIONS)


class CreateAgent(AgentFieldsIn):
    name: Name


class UpdateAgent(AgentFieldsIn):
    name: Name = unchanged_when_absent()
    kind: str = unchanged_when_absent("Immutable; accepted only when it is the agent's own", readOnly=True)


class MentionOut(Model):
    type: Literal["reconciliation", "data_stream", "user", "agent"]
    id: int | str
    label: str


class AgentFileOut(Model):
    id: str
    filename: str
    byte_size: int | None = Field(description="null until an uploaded file lands")
    content_type: str
    created_at: Timestamp
    url: str = Field(description="A presigned download, valid for an hour")


class BrowserOut(Model):
    """A browser agent's automation, as the operator set it up (the portal login is never shown)."""
    automation: Literal["portal_export"]
    portal_url: str
    has_credentials: bool = Field(description="The operator stored the portal login (command line: "
                                  "`agents set-credentials`)")
    has_browser_context: bool = Field(description="A run saved the logged-in browser (cookies, storage); the next "
                                      "run reuses it and logs in only when its session expired")
    settings: dict[str, Any] = Field(description="What the automation does: login, verification, export, "
                                     "data_stream_key, import_options")
    needs_verification: bool = Field(description="The portal asked for a verification code: post it to "
                                     "/agents/{id}/verification")
    verification_reason: Literal["code_requested"] | None
    verification_required_at: Timestamp | None


class AgentOut(Model):
    id: str
    name: str
    description: str
    instructions: str
    kind: Literal["llm", "browser"]
    browser: BrowserOut | None = Field(default=None, description="Browser agents only")
    mentions: list[MentionOut]
    model: str | None
    cadence: Literal["manual", "hourly", "daily", "weekdays", "weekly"]
    hour: int | None
    minute: int | None
    day_of_week: int | None
    timezone: str
    active: bool
    handles_file_drops: bool
    delivery_enabled: bool
    delivery_recipients: list[str]
    delivery_file_pattern: str
    input_files: list[AgentFileOut] = Field(description="Files attached for every run")
    next_run_at: Timestamp | None
    last_run_at: Timestamp | None
    created_at: Timestamp
    updated_at: Timestamp

    @model_serializer(mode="wrap")
    def _browser_on_browser_agents_only(self, handler):  # type: ignore[no-untyped-def]
        # No return annotation: the documented schema stays the model's own.
        shown = handler(self)
        if shown.get("browser") is None:
            shown.pop("browser", None)
        return shown


class AgentPage(Model):
    data: list[AgentOut]
    next_cursor: str | None
    limit: int


# A media type as HTTP carries it: type/subtype and parameters, printable ASCII only (it is signed
# into the upload URL and stored as the object's Content-Type).
MEDIA_TYPE = r"^[A-Za-z0-9!#$&^_.+-]+/[A-Za-z0-9!#$&^_.+-]+( *; *[A-Za-z0-9!#$&^_.+-]+=[\x21-\x7e]+)*$"


class CreateAgentFile(RequestModel):
    filename: Annotated[str, StringConstraints(min_length=1, max_length=255)]
    content_type: Annotated[str, StringConstraints(max_length=200, pattern=MEDIA_TYPE)] | None = Field(
        default=None, description="A media type such as text/csv; default: from the filename's extension",
        examples=["text/csv", "application/pdf", "text/plain; charset=utf-8"])
    content_base64: str | None = Field(
        default=None, description="The file, base64; a request body is at most 5 MB, so about 3.7 MB of file. "
                                  "Omit it to get an upload_url instead")


class AgentFileCreatedOut(AgentFileOut):
    upload_url: str | None = Field(default=None, description="When no content was given: PUT the file here "
                                   "(with the same Content-Type) within an hour; byte_size fills in once it lands")


class AgentRunFileOut(Model):
    id: str
    filename: str
    byte_size: int
    content_type: str
    created_at: Timestamp
    url: str


class AgentRunDeliveryOut(Model):
    recipient: str
    status: Literal["sent", "failed"]
    message_id: str | None
    error: str | None


class AgentRunUsageOut(Model):
    input_tokens: int
    output_tokens: int
    model: str | None


class AgentRunStepOut(Model):
    name: str = Field(description="The tool called; `final_answer` for the model's last message")
    input: Any
    failed: bool
    result_preview: str


class VerificationCodeIn(RequestModel):
    code: str = Field(description="The code the portal sent (1 to 64 characters, no spaces)")


class AgentRunOut(Model):
    id: int
    agent_id: str
    status: Literal["queued", "running", "waiting_for_verification", "completed", "failed"]
    trigger: Literal["manual", "schedule", "file_drop", "agent"]
    created_at: Timestamp
    started_at: Timestamp | None
    completed_at: Timestamp | None
    error_message: str | None
    output_files: list[AgentRunFileOut]
    deliveries: list[AgentRunDeliveryOut]
    usage: AgentRunUsageOut
    steps: list[AgentRunStepOut]
    file_import_id: int | None = Field(default=None, description="Browser agents: the file import of what the "
                                       "portal exported")


class AgentRunPage(Model):
    data: list[AgentRunOut]
    next_cursor: str | None
    limit: int
