"""One contract suite, two backends: every test runs against the fakes of tests/fakes and against
the real adapters on moto, on the resources of the infra template as the `services` fixture
provisions them (but without the container and the app: the suite tests adapters, not wiring, and
stays runnable while those change). When they disagree, the adapter is the truth."""
from __future__ import annotations

import json
from datetime import UTC, datetime
from functools import cached_property

import pytest

from chalicelib.adapters.aws import AwsClients
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
from chalicelib.adapters.dynamodb.property_definitions import PropertyDefinitionRepository
from chalicelib.adapters.dynamodb.reconciliation_exceptions import ExceptionRepository
from chalicelib.adapters.dynamodb.reconciliations import ReconciliationRepository, ReconciliationRuleRepository
from chalicelib.adapters.dynamodb.records import RecordRepository
from chalicelib.adapters.dynamodb.runs import RunRepository
from chalicelib.adapters.dynamodb.stories import StoryRepository
from chalicelib.adapters.dynamodb.table import DynamoTable
from chalicelib.adapters.dynamodb.tallies import TallyRepository
from chalicelib.adapters.dynamodb.users import UserRepository
from chalicelib.adapters.dynamodb.webhooks import WebhookRepository
from chalicelib.adapters.mailer import SesMailer
from chalicelib.adapters.mirror import AnalyticsMirror
from chalicelib.adapters.queues import WorkQueue
from chalicelib.adapters.run_files import RunFiles
from chalicelib.adapters.secrets import SecretsManagerBrowserSecrets
from chalicelib.adapters.workflows import StepFunctionsTaskTokens, StepFunctionsWorkflows
from chalicelib.domain.clock import clock_in_use
from chalicelib.local.provision import provision
from chalicelib.settings import Settings
from tests.conftest import REGION, TEST_PARAMETERS
from tests.fakes import fake_ports
from tests.fakes.clock import FrozenClock
from tests.fakes.data_streams import FakeDataStreamRepository


class FakeBackend:
    """The fakes as `fake_ports()` wires them for the service tests."""
    name = "fake"

    def __init__(self) -> None:
        ports = fake_ports()
        for attribute in ("counters", "api_keys", "data_streams", "property_definitions", "reconciliations",
                          "reconciliation_rules", "ingestion_jobs", "runs", "investigations", "payloads",
                          "run_files", "records", "matches", "claims", "exceptions", "mirror", "stories", "tallies",
                          "agents", "agent_runs", "audit", "event_ledger", "balances", "webhooks", "browser_secrets",
                          "task_tokens", "mailer", "users", "bulk_actions"):
            setattr(self, attribute, getattr(ports, attribute))
        self.queue = ports.bulk_queue
        self.workflows = ports.file_import_workflows

    def data_streams_noting_no_blocks(self):
        return FakeDataStreamRepository(self.counters, note_changed_blocks=False)

    def received(self) -> list[dict]:
        """The messages the queue holds, in the order sent."""
        return list(self.queue.messages)

    def executions(self) -> dict[str, dict]:
        """The workflows' executions started: their inputs by name."""
        return dict(self.workflows.executions)


class MotoBackend:
    """The real adapters, each built from its class and the table or clients it needs."""
    name = "moto"

    def __init__(self, aws, settings) -> None:
        self._aws = aws
        self._settings = settings
        self._table = DynamoTable(aws.dynamodb, settings.table_name)

    @cached_property
    def counters(self):
        return Counters(self._table)

    @cached_property
    def api_keys(self):
        return ApiKeyRepository(self._table)

    @cached_property
    def data_streams(self):
        return DataStreamRepository(self._table, self.counters)

    def data_streams_noting_no_blocks(self):
        """As a deployed stage's until no function of a release before the blocks may run."""
        return DataStreamRepository(self._table, self.counters, note_changed_blocks=False)

    @cached_property
    def property_definitions(self):
        return PropertyDefinitionRepository(self._table, self.counters)

    @cached_property
    def reconciliations(self):
        return ReconciliationRepository(self._table, self.counters)

    @cached_property
    def reconciliation_rules(self):
        return ReconciliationRuleRepository(self._table, self.counters)

    @cached_property
    def ingestion_jobs(self):
        return IngestionJobRepository(self._table)

    @cached_property
    def runs(self):
        return RunRepository(self._table)

    @cached_property
    def investigations(self):
        return InvestigationRepository(self._table)

    @cached_property
    def records(self):
        return RecordRepository(self._table)

    @cached_property
    def matches(self):
        return MatchRepository(self._table)

    @cached_property
    def claims(self):
        return ClaimRepository(self._table, self.matches)

    @cached_property
    def exceptions(self):
        return ExceptionRepository(self._table, self.counters)

    @cached_property
    def stories(self):
        return StoryRepository(self._table, self.counters)

    @cached_property
    def tallies(self):
        return TallyRepository(self._table)

    @cached_property
    def agents(self):
        return AgentRepository(self._table)

    @cached_property
    def agent_runs(self):
        return AgentRunRepository(self._table, self.counters)

    @cached_property
    def audit(self):
        return AuditRepository(self._table)

    @cached_property
    def event_ledger(self):
        return EventLedger(self._table)

    @cached_property
    def balances(self):
        return BalanceRepository(self._table)

    @cached_property
    def webhooks(self):
        return WebhookRepository(self._table)

    @cached_property
    def users(self):
        return UserRepository(self._table)

    @cached_property
    def bulk_actions(self):
        return BulkActionRepository(self._table)

    @cached_property
    def browser_secrets(self):
        return SecretsManagerBrowserSecrets(self._aws.client("secretsmanager"), self._settings.secrets_prefix)

    @cached_property
    def task_tokens(self):
        return StepFunctionsTaskTokens(self._aws.client("stepfunctions"))

    @cached_property
    def mailer(self):
        ses = self._aws.client("ses")
        ses.verify_email_identity(EmailAddress=self._settings.mail_sender)  # as the stage's deploy does
        return SesMailer(ses, self._settings.mail_sender)

    @cached_property
    def mirror(self):
        return AnalyticsMirror(self._aws.s3, self._settings.bucket_name)

    @cached_property
    def workflows(self):
        return StepFunctionsWorkflows(self._aws.client("stepfunctions"), self._settings.file_import_state_machine)

    @cached_property
    def payloads(self):
        return PayloadStore(self._aws.s3, self._settings.bucket_name)

    @cached_property
    def run_files(self):
        return RunFiles(self._aws.s3, self._settings.bucket_name)

    @cached_property
    def queue(self):
        return WorkQueue(self._aws.sqs, self._settings.bulk_queue_name)

    def received(self) -> list[dict]:
        """The messages the queue holds, in the order sent (a standard queue on moto keeps it)."""
        sqs = self._aws.sqs
        url = sqs.get_queue_url(QueueName=self._settings.bulk_queue_name)["QueueUrl"]
        messages: list[dict] = []
        while True:
            batch = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=0).get("Messages", [])
            if not batch:
                return messages
            messages += [json.loads(m["Body"]) for m in batch]

    def executions(self) -> dict[str, dict]:
        """The file import state machine's executions (moto starts them and runs nothing): inputs by name."""
        sfn = self._aws.client("stepfunctions")
        arn = next(m["stateMachineArn"] for m in sfn.list_state_machines()["stateMachines"]
                   if m["name"] == self._settings.file_import_state_machine)
        return {e["name"]: json.loads(sfn.describe_execution(executionArn=e["executionArn"])["input"])
                for e in sfn.list_executions(stateMachineArn=arn)["executions"]}


@pytest.fixture(params=["fake", pytest.param("moto", marks=pytest.mark.moto)])
def backend(request):
    if request.param == "fake":
        yield FakeBackend()
    else:
        request.getfixturevalue("moto_aws")
        settings = Settings(region=REGION, local_mode=True)
        aws = AwsClients(settings)
        provision(aws, TEST_PARAMETERS, REGION, log=lambda _: None)
        yield MotoBackend(aws, settings)


# The port under test, from the backend of the test's parameter.

@pytest.fixture
def counters(backend):
    return backend.counters


@pytest.fixture
def api_keys(backend):
    return backend.api_keys


@pytest.fixture
def users(backend):
    return backend.users


@pytest.fixture
def data_streams(backend):
    return backend.data_streams


@pytest.fixture
def property_definitions(backend):
    return backend.property_definitions


@pytest.fixture
def reconciliations(backend):
    return backend.reconciliations


@pytest.fixture
def rules(backend):
    return backend.reconciliation_rules


@pytest.fixture
def jobs(backend):
    return backend.ingestion_jobs


@pytest.fixture
def runs(backend):
    return backend.runs


@pytest.fixture
def investigations(backend):
    return backend.investigations


@pytest.fixture
def bulk_actions(backend):
    return backend.bulk_actions


@pytest.fixture
def payloads(backend):
    return backend.payloads


@pytest.fixture
def run_files(backend):
    return backend.run_files


@pytest.fixture
def queue(backend):
    return backend.queue


@pytest.fixture
def records(backend):
    return backend.records


@pytest.fixture
def matches(backend):
    return backend.matches


@pytest.fixture
def claims(backend):
    """The record side of matching."""
    return backend.claims


@pytest.fixture
def exceptions(backend):
    return backend.exceptions


@pytest.fixture
def stories(backend):
    return backend.stories


@pytest.fixture
def agents(backend):
    return backend.agents


@pytest.fixture
def agent_runs(backend):
    return backend.agent_runs


@pytest.fixture
def tallies(backend):
    return backend.tallies


@pytest.fixture
def mirror(backend):
    return backend.mirror


@pytest.fixture
def audit(backend):
    return backend.audit


@pytest.fixture
def event_ledger(backend):
    return backend.event_ledger


@pytest.fixture
def balances(backend):
    return backend.balances


@pytest.fixture
def webhooks(backend):
    return backend.webhooks


@pytest.fixture
def browser_secrets(backend):
    return backend.browser_secrets


@pytest.fixture
def task_tokens(backend):
    return backend.task_tokens


@pytest.fixture
def mailer(backend):
    return backend.mailer


@pytest.fixture
def workflows(backend):
    return backend.workflows


@pytest.fixture
def clock():
    """`utc_now` frozen for the adapters, the fakes and the domain, moved by `clock.advance(...)`."""
    with clock_in_use(FrozenClock(datetime(2024, 5, 1, 12, 0, 0, 123456, tzinfo=UTC))) as frozen:
        yield frozen
