"""Agent use cases (services/agents.py) on the fakes: defaults, the rules that need storage
(mentions that exist, one file-drop handler per environment) and PATCH merging."""
from __future__ import annotations

from dataclasses import replace

import pytest

from chalicelib.domain.agents.schedule import Cadence, Schedule
from chalicelib.domain.errors import Conflict, NotFound, ValidationFailed
from chalicelib.services.agents import create_agent, delete_agent, update_agent
from chalicelib.services.ports import AgentLimits
from tests.services.conftest import ENV, new_reconciliation, streams


def test_an_agent_gets_defaults_and_keeps_what_was_given(ports):
    agent = create_agent(ports, ENV, {"name": "Payout mailer"})
    assert (agent.schedule, agent.active, agent.model, agent.delivery.enabled) == (
        Schedule(Cadence.MANUAL, "UTC"), True, None, False)
    weekly = create_agent(ports, ENV, {"name": "Weekly", "cadence": "weekly", "hour": 8, "minute": 0,
                                       "day_of_week": 1, "timezone": "America/New_York"})
    assert ports.agents.get(ENV, weekly.id).schedule == Schedule(Cadence.WEEKLY, "America/New_York", 8, 0, 1)
    assert weekly.next_run_at(weekly.created_at) is not None and agent.next_run_at(agent.created_at) is None


def test_every_broken_rule_is_named_at_once_and_a_browser_agent_is_refused(ports):
    with pytest.raises(ValidationFailed) as refused:
        create_agent(ports, ENV, {"name": "A", "cadence": "daily", "timezone": "Nowhere/Here", "delivery_enabled": True,
                                  "mentions": [{"type": "reconciliation", "id": 999}]})
    assert {e.field for e in refused.value.errors} == {"hour", "minute", "timezone", "delivery_recipients",
                                                       "mentions[0].id"}
    with pytest.raises(ValidationFailed, match="browser agents are set up by the operator"):
        create_agent(ports, ENV, {"name": "B", "kind": "browser"})


def test_mentions_must_name_what_exists_in_the_environment(ports):
    streams(ports, "bank", "ledger")
    recon = new_reconciliation(ports)
    other = create_agent(ports, ENV, {"name": "Other"})
    bank = ports.data_streams.get(ENV, "bank")
    agent = create_agent(ports, ENV, {"name": "A", "mentions": [
        {"type": "reconciliation", "id": recon.id}, {"type": "data_stream", "id": bank.id},
        {"type": "data_stream", "id": "ledger"}, {"type": "agent", "id": other.id}, {"type": "user", "id": "ada"}]})
    assert len(agent.mentions) == 5
    with pytest.raises(ValidationFailed) as refused:
        create_agent(ports, "elsewhere", {"name": "A", "mentions": [
            {"type": "reconciliation", "id": recon.id}, {"type": "data_stream", "id": "ledger"},
            {"type": "agent", "id": other.id}]})
    assert [e.message for e in refused.value.errors] == [
        f"no reconciliation {recon.id} in this environment", "no data stream ledger in this environment",
        f"no agent {other.id} in this environment"]


def test_one_active_agent_handles_file_drops_and_turning_it_off_frees_the_place(ports):
    first = create_agent(ports, ENV, {"name": "First", "handles_file_drops": True})
    with pytest.raises(Conflict, match=first.id):
        create_agent(ports, ENV, {"name": "Second", "handles_file_drops": True})
    assert create_agent(ports, "elsewhere", {"name": "Theirs", "handles_file_drops": True})
    update_agent(ports, ENV, first.id, {"active": False})
    second = create_agent(ports, ENV, {"name": "Second", "handles_file_drops": True})
    with pytest.raises(Conflict, match=second.id):
        update_agent(ports, ENV, first.id, {"active": True})
    delete_agent(ports, ENV, second.id)
    assert update_agent(ports, ENV, first.id, {"active": True}).holds_file_drops


def test_a_guard_left_behind_by_a_crash_is_taken_over(ports):
    stale = create_agent(ports, ENV, {"name": "Crashed"})
    ports.agents.claim_file_drops(ENV, stale.id)  # claimed, then the request died before saving
    assert create_agent(ports, ENV, {"name": "New", "handles_file_drops": True}).holds_file_drops


def test_a_patch_changes_only_what_it_gives_and_never_the_kind(ports):
    agent = create_agent(ports, ENV, {"name": "A", "cadence": "daily", "hour": 7, "minute": 15, "model": "m1"})
    changed = update_agent(ports, ENV, agent.id, {"minute": 45, "model": None})
    assert (changed.name, changed.schedule.hour, changed.schedule.minute, changed.model) == ("A", 7, 45, None)
    with pytest.raises(ValidationFailed, match="cannot change"):
        update_agent(ports, ENV, agent.id, {"kind": "browser"})
    with pytest.raises(ValidationFailed):
        update_agent(ports, ENV, agent.id, {"cadence": "weekly"})  # a weekly agent needs its day
    with pytest.raises(NotFound):
        update_agent(ports, "elsewhere", agent.id, {"name": "B"})


def test_an_agent_names_only_a_model_the_operator_offers(ports):
    ports = replace(ports, limits=replace(ports.limits, agent=AgentLimits(models=frozenset({"amazon.nova-pro-v1:0"}))))
    with pytest.raises(ValidationFailed) as refused:
        create_agent(ports, ENV, {"name": "Costly", "model": "anthropic.claude-opus-4-v1:0"})
    assert [(e.field, e.message) for e in refused.value.errors] == [
        ("model", "model 'anthropic.claude-opus-4-v1:0' is not offered here; the models agents may name: "
                  "amazon.nova-pro-v1:0")]
    agent = create_agent(ports, ENV, {"name": "Listed", "model": "amazon.nova-pro-v1:0"})
    assert create_agent(ports, ENV, {"name": "Default"}).model is None  # null: the default, always offered
    with pytest.raises(ValidationFailed):
        update_agent(ports, ENV, agent.id, {"model": "anthropic.claude-opus-4-v1:0"})
