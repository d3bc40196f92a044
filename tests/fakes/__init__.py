"""In-memory fakes of the repositories and ports of `chalicelib/adapters`, for service tests that
need the ports' behaviour but not DynamoDB, S3 or SQS: plain dicts and lists inside, no AWS.

Each fake has exactly the public methods of its adapter (names, signatures, return types), and
behaves as the adapter does: the same domain errors (NotFound, Conflict, TransitionRefused, ...),
the same ordering and paging (newest first, a cursor only when more follows, BadRequest for a
cursor of another list), the same conditional-write outcomes (claims once, moves only from the
statuses the domain's StatusMachine allows, chunks counted once), timestamps read back to the
millisecond, and time read from `chalicelib.domain.clock.utc_now`.

They cannot drift silently: `tests/contract/` runs one suite against each fake and against its
real adapter on moto, and checks that their public methods and signatures stay the same. When the
two disagree, the adapter is the truth.

`fake_ports(**overrides)` wires them as the container wires the adapters into a real
`chalicelib.services.ports.Ports` (one set of counters; one record store under the records,
matches and exceptions; the runs' slot and pending work on the reconciliations' rows), so that
mypy checks every fake against its Protocol. `FakePorts()` is the part of that wiring the
contract suite builds its fake backend from.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from chalicelib.services.ports import Limits, Ports
from tests.fakes.agent_runs import FakeAgentFileStore, FakeAgentRunRepository, FakeAgentSchedules
from tests.fakes.agent_world import FakeLanguageModels, FakeMailer, FakePortal, FakeRecordsSql
from tests.fakes.agents import FakeAgentRepository
from tests.fakes.api_keys import FakeApiKeyRepository
from tests.fakes.audit import FakeAuditRepository
from tests.fakes.balances import FakeBalanceRepository
from tests.fakes.browser import FakeBrowserSecrets, FakeTaskTokens
from tests.fakes.bulk_actions import FakeBulkActionRepository
from tests.fakes.counters import FakeCounters
from tests.fakes.data_streams import FakeDataStreamRepository, FakePropertyDefinitionRepository
from tests.fakes.events import FakeEventLedger, FakeEventPublisher
from tests.fakes.identity import FakeIdentityProvider
from tests.fakes.investigations import FakeInvestigationRepository
from tests.fakes.jobs import FakeIngestionJobRepository
from tests.fakes.matches import FakeClaimRepository, FakeMatchRepository
from tests.fakes.mirror import FakeAnalyticsMirror
from tests.fakes.period_closes import FakePeriodCloseRepository
from tests.fakes.reconciliation_exceptions import FakeExceptionRepository
from tests.fakes.reconciliations import FakeReconciliationRepository, FakeReconciliationRuleRepository
from tests.fakes.records import FakeRecordRepository, FakeRecordStore
from tests.fakes.runs import FakeRunRepository
from tests.fakes.storage import FakePayloadStore, FakeRunFiles, FakeWorkQueue
from tests.fakes.stories import FakeStoryRepository
from tests.fakes.tallies import FakeTallyRepository
from tests.fakes.users import FakeUserRepository
from tests.fakes.webhooks import FakeWebhookRepository, FakeWebhookSender
from tests.fakes.workflows import FakeWorkflows

__all__ = [
    "FakeApiKeyRepository", "FakeBulkActionRepository", "FakePeriodCloseRepository", "FakeCounters", "FakeDataStreamRepository", "FakeIngestionJobRepository",
    "FakeInvestigationRepository", "FakePayloadStore", "FakePorts", "fake_ports", "FakePropertyDefinitionRepository",
    "FakeReconciliationRepository", "FakeReconciliationRuleRepository", "FakeRunFiles", "FakeRunRepository",
    "FakeStoryRepository", "FakeTallyRepository", "FakeAgentRepository", "FakeAgentRunRepository",
    "FakeAgentSchedules", "FakeAgentFileStore",
    "FakeWorkQueue",
    "FakeClaimRepository", "FakeMatchRepository", "FakeRecordRepository", "FakeRecordStore",
    "FakeAnalyticsMirror", "FakeExceptionRepository", "FakeWorkflows",
    "FakeAuditRepository", "FakeBalanceRepository", "FakeBrowserSecrets", "FakeEventLedger", "FakeEventPublisher",
    "FakeLanguageModels", "FakeMailer", "FakePortal", "FakeRecordsSql", "FakeTaskTokens", "FakeWebhookRepository",
    "FakeWebhookSender", "FakeUserRepository", "FakeIdentityProvider",
]


@dataclass
class FakePorts:
    """One of each storage fake, wired together (the workflows aside); attribute names follow the
    container's. `fake_ports()` builds a `Ports` from them."""
    counters: FakeCounters = field(default_factory=FakeCounters)
    api_keys: FakeApiKeyRepository = field(default_factory=FakeApiKeyRepository)
    ingestion_jobs: FakeIngestionJobRepository = field(default_factory=FakeIngestionJobRepository)
    investigations: FakeInvestigationRepository = field(default_factory=FakeInvestigationRepository)
    payloads: FakePayloadStore = field(default_factory=FakePayloadStore)
    run_files: FakeRunFiles = field(default_factory=FakeRunFiles)
    bulk_queue: FakeWorkQueue = field(default_factory=FakeWorkQueue)
    investigation_queue: FakeWorkQueue = field(default_factory=FakeWorkQueue)
    agent_run_queue: FakeWorkQueue = field(default_factory=FakeWorkQueue)
    schedules: FakeAgentSchedules = field(default_factory=FakeAgentSchedules)
    agent_files: FakeAgentFileStore = field(default_factory=FakeAgentFileStore)
    audit: FakeAuditRepository = field(default_factory=FakeAuditRepository)
    events: FakeEventPublisher = field(default_factory=FakeEventPublisher)
    balances: FakeBalanceRepository = field(default_factory=FakeBalanceRepository)
    webhooks: FakeWebhookRepository = field(default_factory=FakeWebhookRepository)
    webhook_delivery_queue: FakeWorkQueue = field(default_factory=FakeWorkQueue)
    webhook_sender: FakeWebhookSender = field(default_factory=FakeWebhookSender)
    browser_secrets: FakeBrowserSecrets = field(default_factory=FakeBrowserSecrets)
    task_tokens: FakeTaskTokens = field(default_factory=FakeTaskTokens)

    def __post_init__(self) -> None:
        self.data_streams = FakeDataStreamRepository(self.counters)
        self.property_definitions = FakePropertyDefinitionRepository(self.counters)
        self.reconciliations = FakeReconciliationRepository(self.counters)
        self.reconciliation_rules = FakeReconciliationRuleRepository(self.counters)
        self.runs = FakeRunRepository(self.reconciliations)
        self.record_store = FakeRecordStore()  # the record items the records and matches fakes share
        self.records = FakeRecordRepository(self.record_store, self.data_streams, self.ingestion_jobs)
        self.matches = FakeMatchRepository(self.record_store)
        self.claims = FakeClaimRepository(self.record_store, self.matches)
        self.exceptions = FakeExceptionRepository(self.counters, self.record_store)
        self.mirror = FakeAnalyticsMirror()
        self.stories = FakeStoryRepository(self.counters)
        self.tallies = FakeTallyRepository()
        self.agents = FakeAgentRepository()
        self.agent_runs = FakeAgentRunRepository(self.counters)
        self.event_ledger = FakeEventLedger(self.record_store)  # owed events' marks are on the store's items
        self.users = FakeUserRepository(self.counters)
        self.bulk_actions = FakeBulkActionRepository()
        self.period_closes = FakePeriodCloseRepository(self.record_store)


def fake_ports(**overrides: Any) -> Ports:
    """A `Ports` of fakes, wired as `Container.ports` wires the adapters; `overrides` replace fields
    by name (a fake of your own, smaller `limits`, ...; an unknown name is a TypeError).
    The fakes stay reachable through it: `ports.records.store` is the record store the records,
    matches and exceptions share, `ports.run_workflows.executions` the runs started (nothing runs:
    see FakeWorkflows), `ports.bulk_queue.messages` what was queued, `ports.events.published` the
    events out, `ports.audit.entries` the audit trail. What reaches the outside world (the mailer,
    the sql engine, the models, the browser, the webhook sender) records what it was asked and
    answers as scripted: see tests/fakes/agent_world.py and webhooks.py.

    The `Ports(...)` call is typed: mypy checks that every fake satisfies its field's Protocol."""
    wired = FakePorts()
    ports = Ports(
        api_keys=wired.api_keys, counters=wired.counters, data_streams=wired.data_streams,
        property_definitions=wired.property_definitions, reconciliations=wired.reconciliations,
        reconciliation_rules=wired.reconciliation_rules, records=wired.records, ingestion_jobs=wired.ingestion_jobs,
        matches=wired.matches, runs=wired.runs, exceptions=wired.exceptions, investigations=wired.investigations,
        claims=wired.claims,
        payloads=wired.payloads, mirror=wired.mirror, run_files=wired.run_files, bulk_queue=wired.bulk_queue,
        investigation_queue=wired.investigation_queue, file_import_workflows=FakeWorkflows(),
        run_workflows=FakeWorkflows(), stories=wired.stories, tallies=wired.tallies, agents=wired.agents,
        agent_runs=wired.agent_runs, agent_run_queue=wired.agent_run_queue, schedules=wired.schedules,
        agent_files=wired.agent_files, limits=Limits(),
        mailer=FakeMailer(), records_sql=FakeRecordsSql(), language_model=FakeLanguageModels(),
        browser_workflows=FakeWorkflows(), task_tokens=wired.task_tokens, browser_secrets=wired.browser_secrets,
        portal=FakePortal(), balances=wired.balances, events=wired.events, event_ledger=wired.event_ledger,
        webhooks=wired.webhooks, webhook_delivery_queue=wired.webhook_delivery_queue,
        webhook_sender=wired.webhook_sender, audit=wired.audit, users=wired.users,
        identity=FakeIdentityProvider(), bulk_actions=wired.bulk_actions,
        period_closes=wired.period_closes)
    return replace(ports, **overrides)
