"""Composition root: builds the adapters once per process. Tests and the local stack install
their own container built from their own Settings (moto, or the embedded local AWS)."""
from __future__ import annotations

from datetime import timedelta
from functools import cached_property

from chalicelib.adapters.aws import AwsClients
from chalicelib.adapters.blobs import PayloadStore
from chalicelib.adapters.dynamodb.jobs import IngestionJobRepository
from chalicelib.adapters.dynamodb.reconciliations import ReconciliationRepository, ReconciliationRuleRepository
from chalicelib.adapters.dynamodb.records import RecordRepository
from chalicelib.adapters.dynamodb.api_keys import ApiKeyRepository
from chalicelib.adapters.dynamodb.counters import Counters
from chalicelib.adapters.dynamodb.data_streams import DataStreamRepository
from chalicelib.adapters.dynamodb.property_definitions import PropertyDefinitionRepository
from chalicelib.adapters.dynamodb.table import DynamoTable
from chalicelib.adapters.dynamodb.reconciliation_exceptions import ExceptionRepository
from chalicelib.adapters.dynamodb.investigations import InvestigationRepository
from chalicelib.adapters.dynamodb.matches import MatchRepository
from chalicelib.adapters.dynamodb.runs import RunRepository
from chalicelib.adapters.mirror import AnalyticsMirror
from chalicelib.adapters.run_files import RunFiles
from chalicelib.adapters.queues import WorkQueue
from chalicelib.adapters.workflows import StepFunctionsWorkflows
from chalicelib.services.ingestion import IngestionPorts
from chalicelib.services.file_imports import FilePorts
from chalicelib.services import reconciliation_runs
from chalicelib.services.reconciliation_exceptions import ExceptionPorts
from chalicelib.services.investigations import InvestigationPorts
from chalicelib.services.reconciliation_runs import RunPorts
from chalicelib.settings import Settings, current_settings


class Container:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    @cached_property
    def aws(self) -> AwsClients:
        return AwsClients(self.settings)

    @cached_property
    def table(self) -> DynamoTable:
        return DynamoTable(self.aws.dynamodb, self.settings.table_name)

    @cached_property
    def counters(self) -> Counters:
        return Counters(self.table)

    @cached_property
    def api_keys(self) -> ApiKeyRepository:
        return ApiKeyRepository(self.table)

    @cached_property
    def data_streams(self) -> DataStreamRepository:
        return DataStreamRepository(self.table, self.counters)

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
        return RecordRepository(self.table)

    @cached_property
    def mirror(self) -> AnalyticsMirror:
        return AnalyticsMirror(self.aws.s3, self.settings.bucket_name)

    @cached_property
    def ingestion_jobs(self) -> IngestionJobRepository:
        return IngestionJobRepository(self.table)

    @cached_property
    def ingestion(self) -> IngestionPorts:
        return IngestionPorts(
            jobs=self.ingestion_jobs, records=self.records, streams=self.data_streams,
            definitions=self.property_definitions, counters=self.counters,
            payloads=PayloadStore(self.aws.s3, self.settings.bucket_name),
            queue=WorkQueue(self.aws.sqs, self.settings.bulk_queue_name),
            mirror=self.mirror,
            after_ingestion=lambda job: reconciliation_runs.on_records_ingested(
                self.run_ports, job.environment, job.id, [k for k, n in job.created_per_stream.items() if n]),
        )

    @cached_property
    def workflows(self):
        """Step Functions on AWS; the local stack and tests install the in-process driver instead."""
        return StepFunctionsWorkflows(self.aws.client("stepfunctions"), self.settings.file_import_state_machine)

    @cached_property
    def run_workflows(self):
        return StepFunctionsWorkflows(self.aws.client("stepfunctions"), self.settings.reconciliation_run_state_machine)

    @cached_property
    def runs(self) -> RunRepository:
        return RunRepository(self.table)

    @cached_property
    def matches(self) -> MatchRepository:
        return MatchRepository(self.table)

    @cached_property
    def run_ports(self) -> RunPorts:
        return RunPorts(runs=self.runs, matches=self.matches, jobs=self.ingestion_jobs, reconciliations=self.reconciliations,
                        rules=self.reconciliation_rules, counters=self.counters,
                        files=RunFiles(self.aws.s3, self.settings.bucket_name), workflows=self.run_workflows,
                        exceptions=self.exception_ports)

    @cached_property
    def exceptions(self) -> ExceptionRepository:
        return ExceptionRepository(self.table, self.counters)

    @cached_property
    def investigations(self) -> InvestigationRepository:
        return InvestigationRepository(self.table)

    @cached_property
    def investigation_ports(self) -> InvestigationPorts:
        return InvestigationPorts(investigations=self.investigations, exceptions=self.exception_ports,
                                  runs=self.run_ports,
                                  queue=WorkQueue(self.aws.sqs, self.settings.investigation_queue_name))

    @cached_property
    def exception_ports(self) -> ExceptionPorts:
        return ExceptionPorts(exceptions=self.exceptions, reconciliations=self.reconciliations,
                              streams=self.data_streams, matches=self.matches)

    @cached_property
    def files(self) -> FilePorts:
        return FilePorts(ingestion=self.ingestion, workflows=self.workflows)

    @property
    def key_last_used_resolution(self) -> timedelta:
        return timedelta(seconds=self.settings.key_last_used_resolution_seconds)


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
