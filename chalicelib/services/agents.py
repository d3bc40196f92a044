"""Agent use cases: create, change and delete an agent, with the rules that need storage: what a
mention names must exist in the environment, and one active agent per environment handles file
drops (its guard item is claimed before the agent says so, and given up after it stops).

`fields` are the body's fields as the client gave them (absent ones left out: a PATCH changes
only those; a null `model` means the platform's default, a null schedule field clears it)."""
from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from chalicelib.domain.agents.agent import Agent
from chalicelib.domain.agents.definition import (
    Mention,
    MentionType,
    check_creatable_kind,
    check_delivery,
    check_mentions,
)
from chalicelib.domain.agents.schedule import Cadence, check_schedule
from chalicelib.domain.clock import utc_now
from chalicelib.domain.errors import Conflict, FieldError, NotFound, ValidationFailed
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
    _hold_file_drops(ports, agent)
    try:
        ports.agents.add(agent)
    except Exception:
        ports.agents.release_file_drops(environment, agent.id)
        raise
    return agent


def update_agent(ports: Ports, environment: str, agent_id: str, fields: Mapping[str, Any]) -> Agent:
    """Apply a PATCH (`kind` never changes: a different one is 422)."""
    current = ports.agents.get(environment, agent_id)
    if "kind" in fields and fields["kind"] != current.kind.value:
        raise ValidationFailed.on("kind", "cannot change")
    merged = {**fields_of(current), **fields}
    updated = current.edited(utc_now(), name=merged["name"], **_checked(ports, environment, merged))
    if updated.holds_file_drops:
        _hold_file_drops(ports, updated)
    ports.agents.save(updated, previous=current)
    if current.holds_file_drops and not updated.holds_file_drops:
        ports.agents.release_file_drops(environment, agent_id)
    return updated


def delete_agent(ports: Ports, environment: str, agent_id: str) -> None:
    agent = ports.agents.get(environment, agent_id)
    ports.agents.remove(agent)
    ports.agents.release_file_drops(environment, agent_id)


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
