"""The fakes keep their adapters' surface: the same public methods, with the same signatures
(parameter names, kinds, defaults and annotations, and the return annotation). What a fake leaves
out on purpose is the storage format: `to_item` (a DynamoDB item) and `key` (a table key builder)."""
from __future__ import annotations

import inspect
import typing

import pytest

from chalicelib.adapters.blobs import PayloadStore
from chalicelib.adapters.dynamodb.agent_runs import AgentRunRepository
from chalicelib.adapters.dynamodb.agents import AgentRepository
from chalicelib.adapters.dynamodb.api_keys import ApiKeyRepository
from chalicelib.adapters.dynamodb.audit import AuditRepository
from chalicelib.adapters.dynamodb.balances import BalanceRepository
from chalicelib.adapters.dynamodb.bulk_actions import BulkActionRepository
from chalicelib.adapters.dynamodb.counters import Counters
from chalicelib.adapters.dynamodb.data_streams import DataStreamRepository
from chalicelib.adapters.dynamodb.event_ledger import EventLedger
from chalicelib.adapters.dynamodb.investigations import InvestigationRepository
from chalicelib.adapters.dynamodb.jobs import IngestionJobRepository
from chalicelib.adapters.dynamodb.matches import ClaimRepository, MatchRepository
from chalicelib.adapters.dynamodb.period_closes import PeriodCloseRepository
from chalicelib.adapters.dynamodb.property_definitions import PropertyDefinitionRepository
from chalicelib.adapters.dynamodb.reconciliation_exceptions import ExceptionRepository
from chalicelib.adapters.dynamodb.reconciliations import ReconciliationRepository, ReconciliationRuleRepository
from chalicelib.adapters.dynamodb.records import RecordRepository
from chalicelib.adapters.dynamodb.runs import RunRepository
from chalicelib.adapters.dynamodb.stories import StoryRepository
from chalicelib.adapters.dynamodb.users import UserRepository
from chalicelib.adapters.dynamodb.webhooks import WebhookRepository
from chalicelib.adapters.events import EventBridgePublisher
from chalicelib.adapters.mirror import AnalyticsMirror
from chalicelib.adapters.queues import WorkQueue
from chalicelib.adapters.records_sql import RecordsSql
from chalicelib.adapters.run_files import RunFiles
from chalicelib.adapters.secrets import SecretsManagerBrowserSecrets
from chalicelib.adapters.webhook_sender import HttpWebhookSender
from chalicelib.adapters.workflows import StepFunctionsTaskTokens, StepFunctionsWorkflows
from chalicelib.local.statemachines import LocalWorkflows
from tests import fakes
from tests.fakes.browser import FakeBrowserSecrets, FakeTaskTokens

PAIRS = [
    (Counters, fakes.FakeCounters), (ApiKeyRepository, fakes.FakeApiKeyRepository),
    (DataStreamRepository, fakes.FakeDataStreamRepository),
    (PropertyDefinitionRepository, fakes.FakePropertyDefinitionRepository),
    (ReconciliationRepository, fakes.FakeReconciliationRepository),
    (ReconciliationRuleRepository, fakes.FakeReconciliationRuleRepository),
    (IngestionJobRepository, fakes.FakeIngestionJobRepository), (RunRepository, fakes.FakeRunRepository),
    (InvestigationRepository, fakes.FakeInvestigationRepository), (PayloadStore, fakes.FakePayloadStore),
    (WorkQueue, fakes.FakeWorkQueue), (RunFiles, fakes.FakeRunFiles),
    (RecordRepository, fakes.FakeRecordRepository), (MatchRepository, fakes.FakeMatchRepository),
    (ClaimRepository, fakes.FakeClaimRepository),
    (ExceptionRepository, fakes.FakeExceptionRepository), (AnalyticsMirror, fakes.FakeAnalyticsMirror),
    (StepFunctionsWorkflows, fakes.FakeWorkflows), (LocalWorkflows, fakes.FakeWorkflows),
    (StoryRepository, fakes.FakeStoryRepository), (AgentRepository, fakes.FakeAgentRepository),
    (AgentRunRepository, fakes.FakeAgentRunRepository),
    (SecretsManagerBrowserSecrets, FakeBrowserSecrets), (StepFunctionsTaskTokens, FakeTaskTokens),
    (AuditRepository, fakes.FakeAuditRepository), (EventLedger, fakes.FakeEventLedger),
    (PeriodCloseRepository, fakes.FakePeriodCloseRepository),
    (EventBridgePublisher, fakes.FakeEventPublisher), (BalanceRepository, fakes.FakeBalanceRepository),
    (WebhookRepository, fakes.FakeWebhookRepository), (HttpWebhookSender, fakes.FakeWebhookSender),
    (RecordsSql, fakes.FakeRecordsSql), (UserRepository, fakes.FakeUserRepository),
    (BulkActionRepository, fakes.FakeBulkActionRepository),
]
STORAGE_FORMAT = {"to_item", "key"}
LIFECYCLE = {"request_stop", "stop"}  # the local driver stops with the stack: the process's business, not the port's


def public_methods(cls) -> dict[str, object]:
    return {name: getattr(cls, name) for name in dir(cls)
            if not name.startswith("_") and callable(getattr(cls, name)) and name not in STORAGE_FORMAT | LIFECYCLE}


def type_arguments(cls) -> dict[str, str]:
    """The names a generic base's type variables stand for (StatusMoves[Run, RunStatus]: E is Run)."""
    for base in getattr(cls, "__orig_bases__", ()):
        origin = typing.get_origin(base)
        if origin is not None and getattr(origin, "__parameters__", ()):
            return {p.__name__: a.__name__ for p, a in zip(origin.__parameters__, typing.get_args(base), strict=True)}
    return {}


def shape(function, arguments: dict[str, str]) -> tuple:
    """Parameters (a positional-only one's name is not part of the contract) and return annotation."""
    signature = inspect.signature(function)

    def annotation(value) -> str:
        return arguments.get(value, value) if isinstance(value, str) else str(value)
    return (tuple((None if p.kind is p.POSITIONAL_ONLY else p.name, p.kind, p.default, annotation(p.annotation))
                  for p in signature.parameters.values()), annotation(signature.return_annotation))


@pytest.mark.parametrize(("real", "fake"), PAIRS, ids=[real.__name__ for real, _ in PAIRS])
def test_a_fake_has_exactly_the_public_methods_of_its_adapter(real, fake):
    assert sorted(public_methods(fake)) == sorted(public_methods(real))


@pytest.mark.parametrize(("real", "fake"), PAIRS, ids=[real.__name__ for real, _ in PAIRS])
def test_each_method_has_the_same_signature(real, fake):
    real_methods, fake_methods = public_methods(real), public_methods(fake)
    arguments = type_arguments(real)
    shapes = {name: (shape(real_methods[name], arguments), shape(fake_methods[name], {}))
              for name in set(real_methods) & set(fake_methods)}
    differing = {name: pair for name, pair in shapes.items() if pair[0] != pair[1]}
    assert differing == {}


@pytest.mark.parametrize(("real", "fake"), PAIRS, ids=[real.__name__ for real, _ in PAIRS])
def test_static_methods_stay_static(real, fake):
    static = {name for name in public_methods(real) if isinstance(inspect.getattr_static(real, name), staticmethod)}
    assert {name for name in public_methods(fake) if isinstance(inspect.getattr_static(fake, name), staticmethod)} \
        == static


@pytest.mark.parametrize("real, fake", [(RunRepository, fakes.FakeRunRepository),
                                        (IngestionJobRepository, fakes.FakeIngestionJobRepository),
                                        (InvestigationRepository, fakes.FakeInvestigationRepository)])
def test_status_tables_are_the_domains_own(real, fake):
    assert (fake.statuses, fake.noun) == (real.statuses, real.noun)  # the same StatusMachine object
