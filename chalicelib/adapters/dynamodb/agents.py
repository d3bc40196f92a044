"""Agents in DynamoDB: one item each, listed newest first through gsi1, and the guard item that
keeps one active agent per environment handling file drops (claimed before the agent says so,
released after it stops)."""
from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from chalicelib.adapters.dynamodb import keys
from chalicelib.adapters.dynamodb.table import ConditionFailed, DynamoTable
from chalicelib.domain.agents.agent import Agent
from chalicelib.domain.agents.browser import Automation, BrowserSetup, BrowserState, VerificationReason
from chalicelib.domain.agents.definition import AgentKind, Delivery, Mention, MentionType
from chalicelib.domain.agents.files import AgentFile
from chalicelib.domain.agents.schedule import Cadence, Schedule
from chalicelib.domain.clock import iso, parse_iso, parse_optional_iso
from chalicelib.domain.errors import Conflict, NotFound


class AgentRepository:
    def __init__(self, table: DynamoTable) -> None:
        self._table = table

    def add(self, agent: Agent) -> None:
        if agent.browser is not None:  # first, so that no browser agent is there without it
            self._table.put({**keys.browser_agent_directory(agent.id), "entity": "browser_agent_directory",
                             "environment": agent.environment, "id": agent.id})
        self._table.put_new(self._to_item(agent))

    def environment_of(self, agent_id: str) -> str | None:
        """The environment of a browser agent, by its id alone."""
        item = self._table.get(keys.browser_agent_directory(agent_id))
        return item["environment"] if item else None

    def get(self, environment: str, agent_id: str) -> Agent:
        item = self._table.get(keys.agent(environment, agent_id))
        if item is None:
            raise NotFound(f"agent {agent_id} not found")
        return self._from_item(item)

    def list_page(self, environment: str, limit: int, cursor: str | None) -> tuple[list[Agent], str | None]:
        page = self._table.query_page(keys.GSI1, keys.agents_index_pk(environment), limit=limit, cursor=cursor)
        return [self._from_item(i) for i in page.items], page.cursor

    def save(self, updated: Agent, previous: Agent) -> None:
        """Write an edit made from `previous` (409 when another edit came first, 404 when gone).
        An update of the definition only: `last_run_at`, which runs set, is left as it is."""
        item = {k: v for k, v in self._to_item(updated).items() if k not in ("pk", "sk", "last_run_at", *STATE)}
        names = {f"#a{i}": name for i, name in enumerate(item)}
        values = {f":v{i}": value for i, value in enumerate(item.values())}
        expression = "SET " + ", ".join(f"#a{i} = :v{i}" for i in range(len(item)))
        if keys.GSI2.partition_key not in item:  # no longer scheduled: out of the list of scheduled agents
            expression += f" REMOVE {keys.GSI2.attributes}"
        try:
            self._table.update(keys.agent(previous.environment, previous.id), expression,
                               condition="attribute_exists(pk) AND #version = :seen",
                               names={**names, "#version": "version"}, values={**values, ":seen": previous.version},
                               keep_nulls=True)
        except ConditionFailed:
            if self._table.get(keys.agent(previous.environment, previous.id)) is None:
                raise NotFound(f"agent {previous.id} not found") from None
            raise Conflict(f"agent {previous.id} was changed meanwhile; read it again") from None

    def scheduled(self) -> list[tuple[str, str]]:
        """(environment, agent id) of every agent that has a schedule, in every environment."""
        items = self._table.index_items(keys.GSI2, keys.SCHEDULED_AGENTS_PK)
        return [(i["environment"], i["id"]) for i in items]

    def set_last_run(self, environment: str, agent_id: str, at: datetime) -> None:
        """A run started (the agent may have been deleted meanwhile: then nothing is written)."""
        try:
            self._table.update(keys.agent(environment, agent_id), "SET last_run_at = :at",
                               condition="attribute_exists(pk)", values={":at": iso(at)})
        except ConditionFailed:
            pass

    def set_browser_state(self, environment: str, agent_id: str, **changes: Any) -> None:
        """Change some fields of a browser agent's state (BrowserState's names), leaving the others
        as they are: a run and the command line each write only what they learned. Nothing is
        written when the agent is gone."""
        unknown = set(changes) - set(STATE)
        if unknown:
            raise ValueError(f"not browser state: {sorted(unknown)}")
        values = {name: (value.value if isinstance(value, VerificationReason) else
                         iso(value) if isinstance(value, datetime) else value) for name, value in changes.items()}
        try:
            self._table.update(keys.agent(environment, agent_id),
                               "SET " + ", ".join(f"#{name} = :{name}" for name in values),
                               condition="attribute_exists(pk)", names={f"#{name}": name for name in values},
                               values={f":{name}": value for name, value in values.items()}, keep_nulls=True)
        except ConditionFailed:
            pass

    def remove(self, agent: Agent) -> None:
        """Delete the agent, then what its partition holds beside it (input files, a run guard)."""
        try:
            self._table.delete(keys.agent(agent.environment, agent.id), condition="attribute_exists(pk)")
        except ConditionFailed:
            raise NotFound(f"agent {agent.id} not found") from None
        rest = self._table.query_all(keys.BASE_TABLE, keys.agent(agent.environment, agent.id)["pk"])
        self._table.batch_write(deletes=[{"pk": i["pk"], "sk": i["sk"]} for i in rest])
        if agent.browser is not None:
            self._table.delete(keys.browser_agent_directory(agent.id))

    # Input files ------------------------------------------------------------------------------

    def add_file(self, file: AgentFile) -> None:
        self._table.put_new({**keys.agent_file(file.environment, file.agent_id, file.id), "entity": "agent_file",
                             "environment": file.environment, "agent_id": file.agent_id, "id": file.id,
                             "filename": file.filename, "byte_size": file.byte_size,
                             "content_type": file.content_type, "created_at": iso(file.created_at)})

    def files(self, environment: str, agent_id: str) -> list[AgentFile]:
        """The agent's input files, oldest first."""
        items = self._table.query_all(keys.BASE_TABLE, keys.agent(environment, agent_id)["pk"],
                                      sort_prefix=keys.AGENT_FILE_PREFIX)
        return sorted((self._file_from_item(i) for i in items), key=lambda f: (f.created_at, f.id))

    def get_file(self, environment: str, agent_id: str, file_id: str) -> AgentFile:
        item = self._table.get(keys.agent_file(environment, agent_id, file_id))
        if item is None:
            raise NotFound(f"file {file_id} of agent {agent_id} not found")
        return self._file_from_item(item)

    def set_file_size(self, file: AgentFile, byte_size: int) -> None:
        """An uploaded file landed: its size, once known."""
        try:
            self._table.update(keys.agent_file(file.environment, file.agent_id, file.id), "SET byte_size = :n",
                               condition="attribute_exists(pk)", values={":n": byte_size})
        except ConditionFailed:
            pass

    def remove_file(self, file: AgentFile) -> None:
        try:
            self._table.delete(keys.agent_file(file.environment, file.agent_id, file.id),
                               condition="attribute_exists(pk)")
        except ConditionFailed:
            raise NotFound(f"file {file.id} of agent {file.agent_id} not found") from None

    @staticmethod
    def _file_from_item(item: dict[str, Any]) -> AgentFile:
        size = item.get("byte_size")
        return AgentFile(environment=item["environment"], agent_id=item["agent_id"], id=item["id"],
                         filename=item["filename"], byte_size=int(size) if size is not None else None,
                         content_type=item["content_type"], created_at=parse_iso(item["created_at"]))

    # The file-drop guard ----------------------------------------------------------------------

    def claim_file_drops(self, environment: str, agent_id: str) -> str | None:
        """Make the agent the environment's file-drop handler. None when it is (now or already);
        else the id of the agent that holds it."""
        return self._table.claim_guard(keys.file_drop_guard(environment), "file_drop_guard", "agent_id", agent_id)

    def take_over_file_drops(self, environment: str, stale_holder: str, agent_id: str) -> bool:
        """Take the guard from an agent that no longer handles file drops (False: it changed meanwhile)."""
        return self._table.take_over_guard(keys.file_drop_guard(environment), "file_drop_guard", "agent_id",
                                           stale_holder, agent_id)

    def release_file_drops(self, environment: str, agent_id: str) -> None:
        """Give the guard up, if this agent holds it."""
        self._table.release_guard(keys.file_drop_guard(environment), "agent_id", agent_id)

    def file_drops_holder(self, environment: str) -> str | None:
        item = self._table.get(keys.file_drop_guard(environment))
        return item["agent_id"] if item else None

    # Items ------------------------------------------------------------------------------------

    @staticmethod
    def _to_item(agent: Agent) -> dict[str, Any]:
        created = iso(agent.created_at)
        schedule = agent.schedule
        return {
            **keys.agent(agent.environment, agent.id), **keys.agent_index(agent.environment, created, agent.id),
            **(keys.scheduled_agent_index(agent.environment, agent.id) if agent.scheduled else {}),
            "entity": "agent", "environment": agent.environment, "id": agent.id, "name": agent.name,
            "kind": agent.kind.value, "description": agent.description, "instructions": agent.instructions,
            "model": agent.model, "cadence": schedule.cadence.value, "timezone": schedule.timezone,
            "hour": schedule.hour, "minute": schedule.minute, "day_of_week": schedule.day_of_week,
            "active": agent.active, "handles_file_drops": agent.handles_file_drops,
            "delivery_enabled": agent.delivery.enabled, "delivery_recipients": list(agent.delivery.recipients),
            "delivery_file_pattern": agent.delivery.file_pattern,
            "mentions": [{"type": m.type.value, "id": m.id, "label": m.label} for m in agent.mentions],
            "created_at": created, "updated_at": iso(agent.updated_at),
            "last_run_at": iso(agent.last_run_at) if agent.last_run_at else None, "version": agent.version,
            # The settings as JSON text: DynamoDB would turn their numbers into Decimals.
            "browser": ({"automation": agent.browser.automation.value, "portal_url": agent.browser.portal_url,
                         "settings": json.dumps(agent.browser.settings)} if agent.browser else None),
            **_state_item(agent.browser_state),
        }

    @staticmethod
    def _from_item(item: dict[str, Any]) -> Agent:
        def mention_id(value: Any) -> int | str:
            return value if isinstance(value, str) else int(value)
        return Agent(
            environment=item["environment"], id=item["id"], name=item["name"], kind=AgentKind(item["kind"]),
            description=item.get("description") or "", instructions=item.get("instructions") or "",
            model=item.get("model"),
            schedule=Schedule(Cadence(item["cadence"]), item["timezone"], item.get("hour"), item.get("minute"),
                              item.get("day_of_week")),
            active=bool(item["active"]), handles_file_drops=bool(item["handles_file_drops"]),
            delivery=Delivery(bool(item["delivery_enabled"]), tuple(item.get("delivery_recipients") or ()),
                              item["delivery_file_pattern"]),
            mentions=tuple(Mention(MentionType(m["type"]), mention_id(m["id"]), m.get("label") or "")
                           for m in item.get("mentions") or ()),
            created_at=parse_iso(item["created_at"]), updated_at=parse_iso(item["updated_at"]),
            last_run_at=parse_optional_iso(item.get("last_run_at")), version=int(item["version"]),
            browser=(BrowserSetup(Automation(browser["automation"]), browser["portal_url"],
                                  json.loads(browser["settings"])) if (browser := item.get("browser")) else None),
            browser_state=BrowserState(
                has_credentials=bool(item.get("has_credentials")),
                has_browser_context=bool(item.get("has_browser_context")),
                needs_verification=bool(item.get("needs_verification")),
                verification_reason=(VerificationReason(item["verification_reason"])
                                     if item.get("verification_reason") else None),
                verification_required_at=parse_optional_iso(item.get("verification_required_at"))))


# A browser agent's state: written by runs and the command line, never by an edit of the agent.
STATE = ("has_credentials", "has_browser_context", "needs_verification", "verification_reason",
         "verification_required_at")


def _state_item(state: BrowserState) -> dict[str, Any]:
    return {"has_credentials": state.has_credentials, "has_browser_context": state.has_browser_context,
            "needs_verification": state.needs_verification,
            "verification_reason": state.verification_reason.value if state.verification_reason else None,
            "verification_required_at": iso(state.verification_required_at) if state.verification_required_at
            else None}
