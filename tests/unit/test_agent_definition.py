"""What an agent is told besides its schedule (domain/agents/definition.py): kind, delivery, mentions."""
from __future__ import annotations

import pytest

from chalicelib.domain.agents.definition import (
    AgentKind,
    Delivery,
    Mention,
    MentionType,
    check_creatable_kind,
    check_delivery,
    check_mentions,
)
from chalicelib.domain.errors import ValidationFailed

AGENT_ID = "3f1c2b9e-8d7a-4c5b-9e0f-1a2b3c4d5e6f"


def errors_of(call, *args) -> dict[str, str]:
    with pytest.raises(ValidationFailed) as refused:
        call(*args)
    return {e.field: e.message for e in refused.value.errors}


def test_only_llm_agents_are_created_through_the_api():
    assert check_creatable_kind(None) is AgentKind.LLM and check_creatable_kind("llm") is AgentKind.LLM
    assert errors_of(check_creatable_kind, "browser") == {"kind": "browser agents are set up by the operator"}
    assert errors_of(check_creatable_kind, "robot") == {"kind": "must be llm"}


def test_delivery_needs_recipients_when_on_and_matches_files_by_glob_in_any_case():
    delivery = check_delivery(True, ["treasury@acme.test", "ops@acme.co.uk", "treasury@acme.test"], "*.CSV")
    assert delivery == Delivery(True, ("treasury@acme.test", "ops@acme.co.uk"), "*.CSV")
    assert delivery.delivers("payouts-2026-11-23.csv") and not delivery.delivers("notes.txt")
    assert not check_delivery(False, [], None).delivers("a.csv")  # off: nothing goes out
    assert check_delivery(False, [], None).file_pattern == "*"
    assert errors_of(check_delivery, True, [], "*") == {
        "delivery_recipients": "is required when delivery_enabled is true"}
    assert errors_of(check_delivery, False, ["ada@acme.test", "not an address", "x@localhost"], "") == {
        "delivery_recipients[1]": "is not an email address", "delivery_recipients[2]": "is not an email address",
        "delivery_file_pattern": "must be a file name glob such as *.csv (at most 200 characters, no /)"}


def test_mentions_take_each_resources_own_ids():
    assert check_mentions([
        {"type": "reconciliation", "id": "12", "label": "Bank to ledger"},
        {"type": "data_stream", "id": 3}, {"type": "data_stream", "id": "stripe-payouts"},
        {"type": "agent", "id": AGENT_ID.upper()}, {"type": "user", "id": "auth0|ada", "label": "Ada"}]) == (
        Mention(MentionType.RECONCILIATION, 12, "Bank to ledger"), Mention(MentionType.DATA_STREAM, 3),
        Mention(MentionType.DATA_STREAM, "stripe-payouts"), Mention(MentionType.AGENT, AGENT_ID),
        Mention(MentionType.USER, "auth0|ada", "Ada"))


def test_a_mention_of_the_wrong_shape_is_422_naming_it():
    assert errors_of(check_mentions, [
        {"type": "invoice", "id": 1}, {"type": "reconciliation", "id": 0}, {"type": "reconciliation", "id": True},
        {"type": "data_stream", "id": "Bad Key"}, {"type": "agent", "id": "42"}, {"type": "user", "id": " "},
        {"type": "user", "id": "ada", "label": 5}]) == {
        "mentions[0].type": "must be one of reconciliation, data_stream, user, agent",
        "mentions[1].id": "must be a reconciliation id (a positive integer)",
        "mentions[2].id": "must be a reconciliation id (a positive integer)",
        "mentions[3].id": "must be a data stream's id (a positive integer) or key",
        "mentions[4].id": "must be an agent's id (a UUID)",
        "mentions[5].id": "must be the user's identity provider id (text of at most 200 characters)",
        "mentions[6].label": "must be text of at most 200 characters"}
