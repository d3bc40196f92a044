"""Agents: stored whole and read back, listed newest first per environment, edits race-safe by
version, and one file-drop handler per environment."""
from __future__ import annotations

import uuid
from datetime import timedelta

import pytest

from chalicelib.domain.agents.agent import Agent
from chalicelib.domain.agents.definition import Delivery, Mention, MentionType
from chalicelib.domain.agents.files import AgentFile
from chalicelib.domain.agents.schedule import Cadence, Schedule
from chalicelib.domain.errors import Conflict, NotFound
from tests.contract.builders import ENV, OTHER_ENV
from tests.contract.builders import T0_MS as T0


def agent(n: int = 1, environment: str = ENV, **changes) -> Agent:
    return Agent(**{"environment": environment, "id": str(uuid.UUID(int=n)), "name": f"Agent {n}",
                    "schedule": Schedule(Cadence.WEEKLY, "America/New_York", 8, 30, 0),
                    "created_at": T0 + timedelta(seconds=n), "updated_at": T0 + timedelta(seconds=n),
                    "description": "Mails yesterday's unmatched payouts", "instructions": "List them as CSV",
                    "model": None, "delivery": Delivery(True, ("treasury@acme.test",), "*.csv"),
                    "mentions": (Mention(MentionType.RECONCILIATION, 4, "Bank to ledger"),
                                 Mention(MentionType.DATA_STREAM, "stripe"),
                                 Mention(MentionType.AGENT, str(uuid.UUID(int=99)))), **changes})


def test_an_agent_reads_back_as_written_in_its_environment_only(agents):
    agents.add(agent(1))
    assert agents.get(ENV, agent(1).id) == agent(1)
    with pytest.raises(NotFound):
        agents.get(OTHER_ENV, agent(1).id)
    manual = agent(2, schedule=Schedule(Cadence.MANUAL, "UTC"), model="anthropic.claude", active=False,
                   last_run_at=T0, mentions=())
    agents.add(manual)
    assert agents.get(ENV, manual.id) == manual


def test_agents_are_listed_newest_first_a_page_at_a_time(agents):
    for n in range(1, 6):
        agents.add(agent(n))
    agents.add(agent(9, environment=OTHER_ENV))
    first, cursor = agents.list_page(ENV, 3, None)
    second, last = agents.list_page(ENV, 3, cursor)
    assert [a.name for a in first + second] == ["Agent 5", "Agent 4", "Agent 3", "Agent 2", "Agent 1"]
    assert last is None


def test_an_edit_made_from_a_stale_read_is_refused_and_a_removed_agent_is_gone(agents):
    agents.add(agent(1))
    read = agents.get(ENV, agent(1).id)
    renamed = read.edited(T0 + timedelta(minutes=1), name="Treasury mailer")
    agents.save(renamed, previous=read)
    with pytest.raises(Conflict):
        agents.save(read.edited(T0 + timedelta(minutes=2), name="Lost"), previous=read)
    assert agents.get(ENV, read.id).name == "Treasury mailer"
    agents.remove(renamed)
    with pytest.raises(NotFound):
        agents.get(ENV, read.id)
    with pytest.raises(NotFound):
        agents.save(renamed.edited(T0, name="x"), previous=renamed)


def test_one_agent_per_environment_holds_file_drops(agents):
    first, second = agent(1).id, agent(2).id
    assert agents.claim_file_drops(ENV, first) is None
    assert agents.claim_file_drops(ENV, first) is None  # again: still its own
    assert agents.claim_file_drops(ENV, second) == first  # names the holder
    assert agents.claim_file_drops(OTHER_ENV, second) is None  # another environment's own
    agents.release_file_drops(ENV, second)  # not the holder: nothing changes
    assert agents.file_drops_holder(ENV) == first
    agents.release_file_drops(ENV, first)
    assert agents.file_drops_holder(ENV) is None and agents.claim_file_drops(ENV, second) is None


def test_a_guard_left_by_an_agent_is_taken_over_only_from_that_agent(agents):
    stale, newcomer, other = agent(1).id, agent(2).id, agent(3).id
    agents.claim_file_drops(ENV, stale)
    assert not agents.take_over_file_drops(ENV, other, newcomer)  # not the holder it read
    assert agents.take_over_file_drops(ENV, stale, newcomer)
    assert agents.file_drops_holder(ENV) == newcomer


def test_an_edit_keeps_the_last_run_a_run_set_meanwhile(agents):
    agents.add(agent(1))
    read = agents.get(ENV, agent(1).id)
    agents.set_last_run(ENV, read.id, T0 + timedelta(hours=1))
    agents.save(read.edited(T0 + timedelta(hours=2), name="Renamed"), previous=read)
    stored = agents.get(ENV, read.id)
    assert (stored.name, stored.last_run_at) == ("Renamed", T0 + timedelta(hours=1))
    agents.set_last_run(ENV, str(uuid.UUID(int=77)), T0)  # an agent deleted meanwhile: nothing written
    with pytest.raises(NotFound):
        agents.get(ENV, str(uuid.UUID(int=77)))


def test_input_files_are_kept_in_order_sized_once_landed_and_go_with_their_agent(agents):
    agents.add(agent(1))
    first = AgentFile(ENV, agent(1).id, str(uuid.UUID(int=5)), "rates.csv", 6, "text/csv", T0)
    later = AgentFile(ENV, agent(1).id, str(uuid.UUID(int=4)), "big.csv", None, "text/csv", T0 + timedelta(seconds=1))
    agents.add_file(later)
    agents.add_file(first)
    assert agents.files(ENV, agent(1).id) == [first, later]
    assert agents.files(OTHER_ENV, agent(1).id) == []
    agents.set_file_size(later, 2048)
    assert agents.get_file(ENV, agent(1).id, later.id).byte_size == 2048
    agents.remove_file(first)
    with pytest.raises(NotFound):
        agents.remove_file(first)
    agents.remove(agent(1))
    assert agents.files(ENV, agent(1).id) == []


def test_scheduled_agents_are_listed_across_environments_while_scheduled(agents):
    agents.add(agent(1))
    agents.add(agent(2, environment=OTHER_ENV))
    agents.add(agent(3, schedule=Schedule(Cadence.MANUAL, "UTC")))
    assert sorted(agents.scheduled()) == sorted([(ENV, agent(1).id), (OTHER_ENV, agent(2).id)])
    read = agents.get(ENV, agent(1).id)
    agents.save(read.edited(T0, active=False), previous=read)
    assert agents.scheduled() == [(OTHER_ENV, agent(2).id)]
