"""Agent use cases: create, change and delete an agent, with the rules that need storage: what a
mention names must exist in the environment, and one active agent per environment handles file
drops (its guard item is claimed before the agent says so, and given up after it stops).

`fields` are the body's fields as the client gave them (absent ones left out: a PATCH changes
only those; a null `model` means the platform's default, a null schedule field clears it)."""
from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from chalicelib.domain.agents.agent import Agent
from chalicelib.domain.agents.browser import Credentials, browser_setup
from chalicelib.domain.agents.definition import (
    AgentKind,
    Mention,
    MentionType,
    check_creatable_kind,
    check_delivery,
    check_mentions,
)
from chalicelib.domain.agents.files import MAX_INLINE_BYTES, AgentFile, BadFilename, content_type_for, safe_filename
from chalicelib.domain.agents.schedule import Cadence, check_schedule
from chalicelib.domain.clock import utc_now
from chalicelib.domain.errors import Conflict, FieldError, NotFound, ValidationFailed
from chalicelib.services import audit
from chalicelib.services.ports import Ports

SCHEDULE_FIELDS = ("cadence", "timezone", "hour", "minute", "day_of_week")
DEFAULTS: dict[str, Any] = {"cadence": Cadence.MANUAL.value, "timezone": "UTC", "description": "", "instructions": "",
                            "model": None, "active": True, "handles_file_drops": False, "delivery_enabled": False,
                            "delivery_recipients": [], "delivery_file_pattern": None, "mentions": []}


def create_agent(ports: Ports, environment: str, fields: Mapping[str, Any]) -> Agent:
    check_creatable_kind(fields.get("kind"))
    now = utc_now()
    given = {**DEFAULTS, **fields}
    agent = Agent(environment=environment, id=str(uuid.uuid4()), name=given["name"], created_at=now, updated_at=now,
                  **_checked(ports, environment, given))
    return _created(ports, agent)


def create_browser_agent(ports: Ports, environment: str, fields: Mapping[str, Any], automation: Any,
                         portal_url: Any, settings: Any) -> Agent:
    """A browser agent, as the operator sets one up (the command line): its settings checked, and
    the stream it imports into found in the environment."""
    given = {**DEFAULTS, **fields}
    errors: list[FieldError] = []
    setup = None
    try:
        setup = browser_setup(automation, portal_url, settings)
    except ValidationFailed as failed:
        errors += failed.errors
    try:
        checked = _checked(ports, environment, {**given, **BROWSER_FIXED})
    except ValidationFailed as failed:
        errors += failed.errors
    stream_key = settings.get("data_stream_key") if isinstance(settings, Mapping) else None
    named = {e.field for e in errors}
    if (isinstance(stream_key, str) and "settings.data_stream_key" not in named
            and not ports.data_streams.get_many(environment, [stream_key])):
        errors.append(FieldError("settings.data_stream_key", f"no data stream '{stream_key}' in environment "
                                                             f"{environment}"))
    if setup is not None:
        export = setup.export
        if export.format == "nacha" and export.import_options.decimal_places not in (None, 2):
            errors.append(FieldError("settings.import_options.decimal_places", "NACHA amounts are always in cents"))
    if errors or setup is None:
        raise ValidationFailed(errors)
    now = utc_now()
    return _created(ports, Agent(environment=environment, id=str(uuid.uuid4()), name=given["name"], created_at=now,
                                 updated_at=now, kind=AgentKind.BROWSER, browser=setup, **checked))


def set_credentials(ports: Ports, agent_id: str, credentials: Credentials,
                    environment: str | None = None) -> Agent:
    """Keep a browser agent's portal login (its own secret); the agent says it has one."""
    environment = environment or ports.agents.environment_of(agent_id)
    if environment is None:
        raise NotFound(f"no browser agent {agent_id}")
    agent = ports.agents.get(environment, agent_id)
    if agent.kind is not AgentKind.BROWSER:
        raise ValidationFailed.on("agent_id", "is not a browser agent: only browser agents have a portal login")
    if not credentials.username or not credentials.password:
        raise ValidationFailed.on("credentials", "both the username and the password are required")
    ports.browser_secrets.put_credentials(environment, agent_id, credentials)
    ports.agents.set_browser_state(environment, agent_id, has_credentials=True)
    return ports.agents.get(environment, agent_id)


def _created(ports: Ports, agent: Agent) -> Agent:
    environment = agent.environment
    _hold_file_drops(ports, agent)
    try:
        ports.agents.add(agent)
    except Exception:
        ports.agents.release_file_drops(environment, agent.id)
        raise
    try:
        _put_schedule(ports, agent)
    except Exception:  # an agent whose schedule could not be made is not kept
        ports.agents.remove(agent)
        ports.agents.release_file_drops(environment, agent.id)
        raise
    return agent


def update_agent(ports: Ports, environment: str, agent_id: str, fields: Mapping[str, Any]) -> Agent:
    """Apply a PATCH (`kind` never changes: a different one is 422)."""
    current = ports.agents.get(environment, agent_id)
    if "kind" in fields and fields["kind"] != current.kind.value:
        raise ValidationFailed.on("kind", "cannot change")
    if current.kind is AgentKind.BROWSER:
        _check_browser_patch(fields)
    merged = {**fields_of(current), **fields}
    updated = current.edited(utc_now(), name=merged["name"], **_checked(ports, environment, merged))
    if updated.holds_file_drops:
        _hold_file_drops(ports, updated)
    ports.agents.save(updated, previous=current)
    audit.note_change(current, updated)
    if current.holds_file_drops and not updated.holds_file_drops:
        ports.agents.release_file_drops(environment, agent_id)
    _put_schedule(ports, updated)
    return updated


def _put_schedule(ports: Ports, agent: Agent, tries: int = 3) -> None:
    """Make the Scheduler hold the agent's schedule as the agent is stored now. Two edits (or an
    edit and a delete) may put in the other order than they saved: each put is checked against
    the stored agent afterwards and put again from it when it moved on meanwhile."""
    for _ in range(tries):
        ports.schedules.put(agent)
        try:
            stored = ports.agents.get(agent.environment, agent.id)
        except NotFound:  # deleted meanwhile: its delete removed the schedule, which this put made again
            ports.schedules.remove(agent.environment, agent.id)
            return
        if stored.version == agent.version:
            return
        agent = stored


def delete_agent(ports: Ports, environment: str, agent_id: str) -> None:
    """The schedule goes first (nothing fires for a deleted agent), then the runs and files, and the
    agent last: a failure part-way leaves the agent there, and deleting it again finishes the job
    (a run still going stops at its next step, finding its item gone)."""
    agent = ports.agents.get(environment, agent_id)
    ports.schedules.remove(environment, agent_id)
    ports.agent_runs.remove_all_of_agent(environment, agent_id)
    ports.agent_files.delete_agent(environment, agent_id)
    if agent.browser is not None:
        ports.browser_secrets.delete_agent(environment, agent_id)
    ports.agents.remove(agent)
    ports.agents.release_file_drops(environment, agent_id)


# What a browser agent's fields hold whatever is asked: it runs its automation, not a model.
BROWSER_FIXED: dict[str, Any] = {"instructions": "", "model": None, "handles_file_drops": False, "mentions": []}


def _check_browser_patch(fields: Mapping[str, Any]) -> None:
    """A browser agent's cadence, active flag, delivery, name and description change; what it runs
    does not (the operator sets that up)."""
    errors = [FieldError(name, "browser agents have none: their automation is set up by the operator")
              for name, fixed in BROWSER_FIXED.items() if name in fields and fields[name] != fixed]
    if errors:
        raise ValidationFailed(errors)


# Input files ------------------------------------------------------------------------------------

def add_file(ports: Ports, environment: str, agent_id: str, filename: str, content_type: str | None,
             content: bytes | None) -> tuple[AgentFile, str | None]:
    """Attach an input file: stored now when its content is given, else an upload URL to PUT it to."""
    ports.agents.get(environment, agent_id)  # 404 first
    try:
        name = safe_filename(filename)
    except BadFilename as bad:
        raise ValidationFailed.on("filename", str(bad)) from None
    if content is not None and len(content) > MAX_INLINE_BYTES:
        raise ValidationFailed.on("content_base64", f"is {len(content)} bytes decoded; at most {MAX_INLINE_BYTES} "
                                                    "inline (leave it out to get an upload_url)")
    file = AgentFile(environment=environment, agent_id=agent_id, id=str(uuid.uuid4()), filename=name,
                     byte_size=len(content) if content is not None else None,
                     content_type=content_type or content_type_for(name), created_at=utc_now())
    if content is not None:
        ports.agent_files.put(file, content)
    ports.agents.add_file(file)
    return file, (ports.agent_files.upload_url(file) if content is None else None)


def files_of(ports: Ports, environment: str, agent_id: str) -> list[AgentFile]:
    """The agent's input files; an uploaded one gets its size once it has landed."""
    files = []
    for file in ports.agents.files(environment, agent_id):
        if file.byte_size is None and (size := ports.agent_files.landed_size(file)) is not None:
            ports.agents.set_file_size(file, size)
            file = replace(file, byte_size=size)
        files.append(file)
    return files


def delete_file(ports: Ports, environment: str, agent_id: str, file_id: str) -> None:
    file = ports.agents.get_file(environment, agent_id, file_id)
    ports.agents.remove_file(file)
    ports.agent_files.delete(file)


def _checked(ports: Ports, environment: str, given: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of an agent from what was given, each rule checked (every error at once)."""
    errors: list[FieldError] = []
    checked: dict[str, Any] = {}
    for name, check in (
            ("schedule", lambda: check_schedule(*(given.get(f) for f in SCHEDULE_FIELDS))),
            ("delivery", lambda: check_delivery(bool(given["delivery_enabled"]), given["delivery_recipients"],
                                                given["delivery_file_pattern"])),
            ("mentions", lambda: _existing(ports, environment, check_mentions(given["mentions"])))):
        try:
            checked[name] = check()
        except ValidationFailed as failed:
            errors += failed.errors
    refused = ports.limits.agent.refused_model(given["model"])
    if refused is not None:
        errors.append(FieldError("model", refused))
    if errors:
        raise ValidationFailed(errors)
    return {**checked, "description": given["description"], "instructions": given["instructions"],
            "model": given["model"], "active": given["active"], "handles_file_drops": given["handles_file_drops"]}


def _existing(ports: Ports, environment: str, mentions: tuple[Mention, ...]) -> tuple[Mention, ...]:
    """The mentions, once every reconciliation, data stream and agent they name is found here."""
    found = ports.reconciliations.visible(
        environment, [int(m.id) for m in mentions if m.type is MentionType.RECONCILIATION])
    errors = []
    for i, mention in enumerate(mentions):
        if not _exists(ports, environment, mention, found):
            errors.append(FieldError(f"mentions[{i}].id", f"no {mention.type.value.replace('_', ' ')} "
                                                          f"{mention.id} in this environment"))
    if errors:
        raise ValidationFailed(errors)
    return mentions


def _exists(ports: Ports, environment: str, mention: Mention, reconciliations: Mapping[int, object]) -> bool:
    match mention.type:
        case MentionType.RECONCILIATION:
            return int(mention.id) in reconciliations
        case MentionType.DATA_STREAM:
            if isinstance(mention.id, int):
                return ports.data_streams.find_by_id(environment, mention.id) is not None
            return bool(ports.data_streams.get_many(environment, [mention.id]))
        case MentionType.AGENT:
            try:
                ports.agents.get(environment, str(mention.id))
                return True
            except NotFound:
                return False
    return True  # a user: users live in the identity provider


def _hold_file_drops(ports: Ports, agent: Agent) -> None:
    """Claim the environment's file-drop guard for an agent that will handle them (409 naming the
    active agent that does). A guard left by an agent that no longer handles them is taken over."""
    if not agent.holds_file_drops:
        return
    holder = ports.agents.claim_file_drops(agent.environment, agent.id)
    if holder is None:
        return
    try:
        still = ports.agents.get(agent.environment, holder).holds_file_drops
    except NotFound:
        still = False
    if still or not ports.agents.take_over_file_drops(agent.environment, holder, agent.id):
        raise Conflict(f"agent {holder} already handles file drops in this environment; turn it off there first")


def fields_of(agent: Agent) -> dict[str, Any]:
    """An agent as the fields a body gives (what a PATCH merges into, and what the API shows)."""
    schedule, delivery = agent.schedule, agent.delivery
    return {"name": agent.name, "description": agent.description, "instructions": agent.instructions,
            "model": agent.model, "cadence": schedule.cadence.value, "timezone": schedule.timezone,
            "hour": schedule.hour, "minute": schedule.minute, "day_of_week": schedule.day_of_week,
            "active": agent.active, "handles_file_drops": agent.handles_file_drops,
            "delivery_enabled": delivery.enabled, "delivery_recipients": list(delivery.recipients),
            "delivery_file_pattern": delivery.file_pattern,
            "mentions": [{"type": m.type.value, "id": m.id, "label": m.label} for m in agent.mentions]}


def restore_schedules(ports: Ports) -> int:
    """Put every scheduled agent's schedule again (the local stack's embedded Scheduler keeps its
    schedules in memory only, so each start puts them back); how many were put."""
    count = 0
    for environment, agent_id in ports.agents.scheduled():
        try:
            agent = ports.agents.get(environment, agent_id)
        except NotFound:
            continue  # deleted meanwhile
        ports.schedules.put(agent)
        count += 1
    return count
