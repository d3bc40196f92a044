"""Composition root: builds the adapters once per process, and `ports`, the one set of them the
services and routes use. Tests and the local stack install their own container built from their
own Settings (moto, or the embedded local AWS)."""
from __future__ import annotations

import tempfile
import threading
from collections.abc import Callable
from datetime import timedelta
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

from chalicelib.adapters.agent_files import AgentFileStore
from chalicelib.adapters.aws import AwsClients
from chalicelib.adapters.blobs import PayloadStore
from chalicelib.adapters.dynamodb.agent_runs import AgentRunRepository
from chalicelib.adapters.dynamodb.agents import AgentRepository
from chalicelib.adapters.dynamodb.api_keys import ApiKeyRepository
from chalicelib.adapters.dynamodb.approvals import ApprovalRepository
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
from chalicelib.adapters.dynamodb.service_levels import ServiceLevelRepository
from chalicelib.adapters.dynamodb.stories import StoryRepository
from chalicelib.adapters.dynamodb.table import DynamoTable
from chalicelib.adapters.dynamodb.tallies import TallyRepository
from chalicelib.adapters.dynamodb.users import UserRepository
from chalicelib.adapters.dynamodb.webhooks import WebhookRepository
from chalicelib.adapters.events import EventBridgePublisher
from chalicelib.adapters.language_models import language_model
from chalicelib.adapters.mailer import SesMailer
from chalicelib.adapters.mirror import AnalyticsMirror
from chalicelib.adapters.queues import WorkQueue
from chalicelib.adapters.records_sql import RecordsSql
from chalicelib.adapters.run_files import RunFiles
from chalicelib.adapters.schedules import AgentSchedules
from chalicelib.adapters.secrets import SecretsManagerBrowserSecrets
from chalicelib.adapters.webhook_sender import HttpWebhookSender
from chalicelib.adapters.workflows import StepFunctionsTaskTokens, StepFunctionsWorkflows
from chalicelib.domain.agents.browser import Portal, PortalJob, PortalOutcome
from chalicelib.domain.agents.conversation import LanguageModel
from chalicelib.domain.errors import BrokenInvariant, Unauthorized
from chalicelib.domain.users import VerifiedToken
from chalicelib.domain.webhooks import UrlPolicy
from chalicelib.services.ports import AgentLimits, IdentityProvider, Limits, Ports, TaskTokens, Workflows
from chalicelib.settings import Settings, current_settings

if TYPE_CHECKING:
    from chalicelib.adapters.dynamodb.rate_streams import RateStreamRepository
    from chalicelib.adapters.dynamodb.unmatch_decisions import UnmatchDecisionRepository
    from chalicelib.adapters.identity import CognitoIdentity
    from chalicelib.services.export_ports import ExportPorts


# A period close waits this long for its writers' records to reach DynamoDB's global secondary indexes
# (eventually consistent; typically well under a second) before it counts from them.
INDEX_SETTLE = timedelta(seconds=1)


class Container:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        # Set by the local stack when it stops; never on Lambda, whose executions end with their call.
        self.stop_requested = threading.Event()

    @cached_property
    def aws(self) -> AwsClients:
        return AwsClients(self.settings)

    @cached_property
    def table(self) -> DynamoTable:
        return DynamoTable(self.aws.table_client, self.settings.table_name)

    @cached_property
    def counters(self) -> Counters:
        return Counters(self.table)

    @cached_property
    def api_keys(self) -> ApiKeyRepository:
        return ApiKeyRepository(self.table)

    @cached_property
    def data_streams(self) -> DataStreamRepository:
        return DataStreamRepository(self.table, self.counters, self.settings.note_changed_blocks)

    @cached_property
    def property_definitions(self) -> PropertyDefinitionRepository:
        return PropertyDefinitionRepository(self.table, self.counters)

    @cached_property
    def reconciliations(self) -> ReconciliationRepository:
        return ReconciliationRepository(self.table, self.counters)

    @cached_property
    def reconciliation_rules(self) -> ReconciliationRuleRepository:
        return ReconciliationRuleRepository(self.table, self.counters)

    @cached_property
    def records(self) -> RecordRepository:
        return RecordRepository(self.table, in_transactions=self.settings.claims_in_transactions)

    @cached_property
    def ingestion_jobs(self) -> IngestionJobRepository:
        return IngestionJobRepository(self.table)

    @cached_property
    def matches(self) -> MatchRepository:
        return MatchRepository(self.table)

    @cached_property
    def claims(self) -> ClaimRepository:
        return ClaimRepository(self.table, self.matches, in_transactions=self.settings.claims_in_transactions)

    @cached_property
    def runs(self) -> RunRepository:
        return RunRepository(self.table)

    @cached_property
    def exceptions(self) -> ExceptionRepository:
        return ExceptionRepository(self.table, self.counters, in_transactions=self.settings.claims_in_transactions)

    @cached_property
    def service_levels(self) -> ServiceLevelRepository:
        return ServiceLevelRepository(self.table, self.counters)

    @cached_property
    def bulk_actions(self) -> BulkActionRepository:
        return BulkActionRepository(self.table)

    @cached_property
    def approvals(self) -> ApprovalRepository:
        return ApprovalRepository(self.table)

    @cached_property
    def period_closes(self) -> PeriodCloseRepository:
        return PeriodCloseRepository(self.table)

    @cached_property
    def investigations(self) -> InvestigationRepository:
        return InvestigationRepository(self.table)

    @cached_property
    def payloads(self) -> PayloadStore:
        return PayloadStore(self.aws.s3, self.settings.bucket_name)

    @cached_property
    def mirror(self) -> AnalyticsMirror:
        return AnalyticsMirror(self.aws.s3, self.settings.bucket_name)

    @cached_property
    def run_files(self) -> RunFiles:
        return RunFiles(self.aws.s3, self.settings.bucket_name)

    @cached_property
    def bulk_queue(self) -> WorkQueue:
        return WorkQueue(self.aws.sqs, self.settings.bulk_queue_name)

    @cached_property
    def investigation_queue(self) -> WorkQueue:
        return WorkQueue(self.aws.sqs, self.settings.investigation_queue_name)

    # Step Functions on AWS; the local stack and tests install the in-process driver instead,
    # before the first use of `ports`.
    @cached_property
    def file_import_workflows(self) -> Workflows:
        return StepFunctionsWorkflows(self.aws.client("stepfunctions"), self.settings.file_import_state_machine)

    @cached_property
    def run_workflows(self) -> Workflows:
        return StepFunctionsWorkflows(self.aws.client("stepfunctions"), self.settings.reconciliation_run_state_machine)

    @cached_property
    def browser_workflows(self) -> Workflows:
        return StepFunctionsWorkflows(self.aws.client("stepfunctions"), self.settings.browser_run_state_machine)

    @cached_property
    def task_tokens(self) -> TaskTokens:
        return StepFunctionsTaskTokens(self.aws.client("stepfunctions"))

    @cached_property
    def browser_secrets(self) -> SecretsManagerBrowserSecrets:
        return SecretsManagerBrowserSecrets(self.aws.client("secretsmanager"), self.settings.secrets_prefix)

    @cached_property
    def portal(self) -> Portal:
        # Playwright is imported when a run drives the browser: only the browser worker has it.
        from chalicelib.adapters.browser_portal import PlaywrightPortal
        settings = self.settings
        return PlaywrightPortal(settings.chromium_path, settings.browser_step_timeout_seconds,
                                settings.browser_download_timeout_seconds)

    @cached_property
    def balances(self) -> BalanceRepository:
        return BalanceRepository(self.table)

    @cached_property
    def events(self) -> EventBridgePublisher:
        return EventBridgePublisher(self.aws.client("events"), self.settings.event_bus_name)

    @cached_property
    def event_ledger(self) -> EventLedger:
        return EventLedger(self.table)

    @cached_property
    def stories(self) -> StoryRepository:
        return StoryRepository(self.table, self.counters)

    @cached_property
    def agents(self) -> AgentRepository:
        return AgentRepository(self.table)

    @cached_property
    def agent_runs(self) -> AgentRunRepository:
        return AgentRunRepository(self.table, self.counters)

    @cached_property
    def agent_run_queue(self) -> WorkQueue:
        return WorkQueue(self.aws.sqs, self.settings.agent_run_queue_name)

    @cached_property
    def schedules(self) -> AgentSchedules:
        return AgentSchedules(self.aws.client("scheduler"), self.aws.sqs, self.settings.schedule_group_name,
                              self.settings.scheduler_role_arn, self.settings.agent_run_queue_name)

    @cached_property
    def agent_files(self) -> AgentFileStore:
        return AgentFileStore(self.aws.s3, self.settings.bucket_name)

    @cached_property
    def mailer(self) -> SesMailer:
        # Locally every message sent is also kept as an .eml file a person can open.
        outbox = self.settings.data_dir / "outbox" if self.settings.local_mode else None
        return SesMailer(self.aws.client("ses"), self.settings.mail_sender, outbox)

    @cached_property
    def records_sql(self) -> RecordsSql:
        # Published mirror parts never change: a warm Lambda (or the local stack) keeps the ones it read.
        cache = Path(tempfile.gettempdir()) / "recon-mirror-cache" / self.settings.bucket_name
        return RecordsSql(self.aws.s3, self.settings.bucket_name, cache)

    def language_model(self, model: str | None) -> LanguageModel:
        return language_model(self.settings, model)

    @property
    def limits(self) -> Limits:
        settings = self.settings
        return Limits(chunk_records=settings.run_chunk_records, carry_match_members=settings.carry_match_members,
                      max_import_bytes=settings.max_import_bytes,
                      run_records=settings.max_run_records, partition_records=settings.run_partition_records,
                      fanout_records=settings.max_fanout_run_records, map_concurrency=settings.run_map_concurrency,
                      stuck_import_after=timedelta(minutes=settings.stuck_import_minutes),
                      index_settle=timedelta(0) if settings.local_mode else INDEX_SETTLE,
                      agent=AgentLimits(max_turns=settings.agent_max_turns, max_tokens=settings.agent_max_tokens,
                                        max_seconds=settings.agent_max_seconds,
                                        verification_wait_seconds=settings.verification_timeout_seconds,
                                        models=None if settings.agent_models is None else frozenset(
                                            m.strip() for m in settings.agent_models.split(",") if m.strip())))

    @cached_property
    def audit(self) -> AuditRepository:
        return AuditRepository(self.table)

    @cached_property
    def webhooks(self) -> WebhookRepository:
        return WebhookRepository(self.table)

    @cached_property
    def webhook_delivery_queue(self) -> WorkQueue:
        return WorkQueue(self.aws.sqs, self.settings.webhook_delivery_queue_name)

    @cached_property
    def webhook_sender(self) -> HttpWebhookSender:
        # Locally a developer receives on their own machine: http and loopback addresses too.
        return HttpWebhookSender(UrlPolicy(local=self.settings.local_mode, own_ports=self.settings.local_service_ports),
                                 self.settings.webhook_timeout_seconds)

    @cached_property
    def users(self) -> UserRepository:
        return UserRepository(self.table)

    @cached_property
    def identity(self) -> IdentityProvider:
        """Where people sign in. A process without the user pool's settings has no sign-in: every
        token is 401 and no one can be invited."""
        settings = self.settings
        if not settings.user_pool_id or not settings.user_pool_client_id:
            return _NoIdentityProvider()
        return self.cognito

    @cached_property
    def cognito(self) -> CognitoIdentity:
        """The stage's user pool; its keys are fetched from the embedded AWS's endpoint locally."""
        # Imported here: joserfc and cryptography cost a cold start that only people's requests need.
        from chalicelib.adapters.identity import SESSION_CALLS, CognitoIdentity

        settings = self.settings
        if not settings.user_pool_id or not settings.user_pool_client_id:
            raise RuntimeError("no identity provider is configured: set RECON_USER_POOL_ID and "
                               "RECON_USER_POOL_CLIENT_ID (infra/template.yaml gives the API functions both)")
        return CognitoIdentity.for_pool(self.aws.client("cognito-idp"), settings.region, settings.user_pool_id,
                                        settings.user_pool_client_id,
                                        aws_endpoint=self.aws.endpoint("cognito-idp"),
                                        session_client=self.aws.client("cognito-idp", SESSION_CALLS))

    @cached_property
    def tallies(self) -> TallyRepository:
        return TallyRepository(self.table)

    @cached_property
    def ports(self) -> Ports:
        return Ports(
            api_keys=self.api_keys, counters=self.counters, data_streams=self.data_streams,
            property_definitions=self.property_definitions, reconciliations=self.reconciliations,
            reconciliation_rules=self.reconciliation_rules, records=self.records, ingestion_jobs=self.ingestion_jobs,
            matches=self.matches, runs=self.runs, exceptions=self.exceptions, investigations=self.investigations,
            claims=self.claims,
            payloads=self.payloads, mirror=self.mirror, run_files=self.run_files, bulk_queue=self.bulk_queue,
            investigation_queue=self.investigation_queue, file_import_workflows=self.file_import_workflows,
            run_workflows=self.run_workflows, stories=self.stories, tallies=self.tallies, agents=self.agents,
            agent_runs=self.agent_runs, agent_run_queue=self.agent_run_queue, schedules=self.schedules,
            agent_files=self.agent_files, mailer=self.mailer, records_sql=self.records_sql,
            language_model=self.language_model, limits=self.limits,
            browser_workflows=self.browser_workflows, task_tokens=self.task_tokens,
            browser_secrets=self.browser_secrets, portal=_Lazy(lambda: self.portal), balances=self.balances,
            events=self.events, event_ledger=self.event_ledger,
            audit=self.audit,
            webhooks=self.webhooks, webhook_delivery_queue=self.webhook_delivery_queue,
            webhook_sender=self.webhook_sender,
            users=self.users, identity=_IdentityOnFirstUse(lambda: self.identity), bulk_actions=self.bulk_actions,
            period_closes=self.period_closes,
            stopping=self.stop_requested.is_set, approvals=self.approvals,
            service_levels=self.service_levels,
            rate_streams=self.rate_streams,
            unmatch_decisions=self.unmatch_decisions,
        )

    @cached_property
    def unmatch_decisions(self) -> UnmatchDecisionRepository:
        from chalicelib.adapters.dynamodb.unmatch_decisions import UnmatchDecisionRepository

        return UnmatchDecisionRepository(self.table)

    @cached_property
    def rate_streams(self) -> RateStreamRepository:
        from chalicelib.adapters.dynamodb.rate_streams import RateStreamRepository

        return RateStreamRepository(self.table)

    @cached_property
    def export_ports(self) -> ExportPorts:
        """Exports' own ports beside `ports` (services/export_ports.py): built at their first use."""
        from chalicelib.adapters.dynamodb.exports import ExportRepository
        from chalicelib.adapters.export_files import ExportFiles
        from chalicelib.services.export_ports import ExportPorts

        return ExportPorts(ports=self.ports, exports=ExportRepository(self.table),
                           files=ExportFiles(self.aws.s3, self.settings.bucket_name), queue=self.bulk_queue)

    @property
    def key_last_used_resolution(self) -> timedelta:
        return timedelta(seconds=self.settings.key_last_used_resolution_seconds)

    @property
    def sign_in_resolution(self) -> timedelta:
        """How often a user's last_sign_in_at is written at most (as an API key's last use)."""
        return timedelta(seconds=self.settings.key_last_used_resolution_seconds)


class _Lazy:
    """The portal, built at its first run: building `ports` must not need Playwright."""

    def __init__(self, build: Callable[[], Portal]) -> None:
        self._build = build

    def run(self, job: PortalJob) -> PortalOutcome:
        return self._build().run(job)


class _IdentityOnFirstUse:
    """The identity provider, built at its first use: building `ports` must not import joserfc."""

    def __init__(self, build: Callable[[], IdentityProvider]) -> None:
        self._build = build

    def invite(self, email: str, name: str | None) -> str:
        return self._build().invite(email, name)

    def find(self, email: str) -> str | None:
        return self._build().find(email)

    def disable(self, idp_user_id: str) -> None:
        self._build().disable(idp_user_id)

    def enable(self, idp_user_id: str) -> None:
        self._build().enable(idp_user_id)

    def verify(self, token: str) -> VerifiedToken:
        return self._build().verify(token)


class _NoIdentityProvider:
    """A process started without the user pool's settings (infra/template.yaml gives every function
    them): no token verifies and no one can be invited."""

    def invite(self, email: str, name: str | None) -> str:
        raise BrokenInvariant("the identity provider is not configured")

    def find(self, email: str) -> str | None:
        raise BrokenInvariant("the identity provider is not configured")

    def disable(self, idp_user_id: str) -> None:
        raise BrokenInvariant("the identity provider is not configured")

    def enable(self, idp_user_id: str) -> None:
        raise BrokenInvariant("the identity provider is not configured")

    def verify(self, token: str) -> VerifiedToken:
        raise Unauthorized("invalid token: sign-in with the identity provider is not configured")


_container: Container | None = None


def container() -> Container:
    global _container
    if _container is None:
        _container = Container(current_settings())
    return _container


def install(new: Container | None) -> None:
    """Replace the process-wide container (local stack, tests); None goes back to the default."""
    global _container
    _container = new
