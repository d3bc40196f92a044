"""The service's configuration: one pydantic model, and the only place that reads os.environ."""
from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, SecretStr, model_validator
from pydantic.fields import FieldInfo

from chalicelib.domain.ingestion import MAX_IMPORT_BYTES
from chalicelib.domain.parsers.statements import MAX_STATEMENT_BYTES
from chalicelib.domain.runs import (
    CHUNK_RECORDS,
    FANOUT_RECORDS,
    MAP_CONCURRENCY,
    MAX_RUN_CHUNKS,
    PARTITION_RECORDS,
    RUN_RECORDS,
)
from chalicelib.domain.webhooks import TIMEOUT_SECONDS as WEBHOOK_TIMEOUT_SECONDS

ENVIRONMENT_PREFIX = "RECON_"


class Settings(BaseModel):
    """Each field from the environment: `RECON_<FIELD>` (any case), or the names its alias lists;
    what the code gives wins. (A plain model: pydantic-settings cost every cold start 0.13 s of
    CPU to import, for this one reader.)"""
    # populate_by_name: Settings(region=...) in code sets the field too (aliases are for the environment).
    model_config = ConfigDict(extra="ignore", populate_by_name=True, validate_default=True)

    stage: str = "dev"
    table_name: str = "recon-dev"
    bucket_name: str = "recon-dev-data"
    bulk_queue_name: str = "recon-dev-bulk"
    investigation_queue_name: str = "recon-dev-investigations"
    investigation_max_receives: int = 3  # the queue's maxReceiveCount (infra/template.yaml)
    file_import_state_machine: str = "recon-dev-file-import"
    reconciliation_run_state_machine: str = "recon-dev-reconciliation-run"
    region: str = Field(
        default="us-east-1",
        validation_alias=AliasChoices("RECON_REGION", "AWS_REGION", "AWS_DEFAULT_REGION"),
    )
    # Endpoints of the embedded local AWS; None means the real AWS endpoints.
    dynamodb_endpoint: str | None = Field(
        default=None,
        validation_alias=AliasChoices("RECON_DYNAMODB_ENDPOINT", "AWS_ENDPOINT_URL_DYNAMODB"),
    )
    aws_endpoint: str | None = Field(
        default=None, validation_alias=AliasChoices("RECON_AWS_ENDPOINT", "AWS_ENDPOINT_URL")
    )
    # S3's own (the local stack's s3rver); None means aws_endpoint's.
    s3_endpoint: str | None = Field(
        default=None, validation_alias=AliasChoices("RECON_S3_ENDPOINT", "AWS_ENDPOINT_URL_S3")
    )
    local_mode: bool = False
    # How the table's requests are sent (adapters/dynamodb/wire.py): "wire" speaks DynamoDB's protocol
    # directly, "botocore" through boto3's client. "auto": the wire on Lambda and wherever an endpoint
    # is given (the local stack), botocore elsewhere (moto's in-process mock, which only botocore
    # reaches) and behind an HTTP proxy (which only botocore follows).
    dynamodb_client: Literal["auto", "wire", "botocore"] = "auto"
    lambda_function_name: str | None = Field(default=None, validation_alias=AliasChoices("AWS_LAMBDA_FUNCTION_NAME"))
    http_proxy: str | None = Field(default=None, validation_alias=AliasChoices("HTTPS_PROXY", "HTTP_PROXY"))
    # The certificates that verify AWS's endpoints, where not botocore's own bundle (as botocore reads it).
    aws_ca_bundle: str | None = Field(default=None, validation_alias=AliasChoices("AWS_CA_BUNDLE"))

    @property
    def dynamodb_wire(self) -> bool:
        """Whether the table's requests go by the wire (see `dynamodb_client`)."""
        if self.dynamodb_client != "auto":
            return self.dynamodb_client == "wire"
        return not self.http_proxy and bool(self.dynamodb_endpoint or self.lambda_function_name)
    # People sign in at the stage's Cognito user pool (infra/template.yaml `UserPool`, its app client
    # `UserPoolClient`); their tokens are verified against its keys. None: no pool configured.
    user_pool_id: str | None = None
    user_pool_client_id: str | None = None

    # Local stack (`make run`).
    data_dir: Path = Path(".data")
    api_key: str | None = None
    # The local admin's sign-in at the local user pool (`make run` prints it); a fresh password each
    # start unless one is given (at least 12 characters, upper and lower case and a digit).
    local_admin_email: str = "admin@recon.local"
    local_admin_password: SecretStr | None = None
    port: int = Field(default=8000, validation_alias=AliasChoices("PORT", "RECON_PORT"))
    # How long a stopping stack (Ctrl-C) waits for its work to reach a checkpoint (a chunk written);
    # what has not is resumed at the next start.
    stop_grace_seconds: float = Field(default=5.0, ge=0, le=120)

    # HTTP limits. Lambda accepts at most 6 MB per synchronous request, envelope included.
    max_body_bytes: int = 5 * 1024 * 1024
    # A key's last_used_at is written at most this often, so auth costs no write per request.
    key_last_used_resolution_seconds: int = 60
    # The largest file a file import takes (domain/ingestion.py MAX_IMPORT_BYTES). At most the
    # statement parsers' own guard (domain/parsers/statements.py MAX_STATEMENT_BYTES), so that a
    # client only ever meets this limit.
    max_import_bytes: int = Field(default=MAX_IMPORT_BYTES, ge=1, le=MAX_STATEMENT_BYTES)
    # A file import or bulk request with no heartbeat (a chunk counted) for this long is stuck: the
    # sweeper restarts it from its checkpoint (domain/ingestion.py STUCK_AFTER).
    stuck_import_minutes: int = Field(default=5, ge=1)
    # Open records one match function holds (both sides; domain/runs.py RUN_RECORDS, from its memory).
    # A run with more fans out in partitions (docs/partitioned-matching.md) when its rules allow a
    # plan; when they do not, it fails at once with a message naming this limit and the plan's reason.
    max_run_records: int = Field(default=RUN_RECORDS, ge=1)
    # A fanned-out run: records a partition aims at (both sides), the most open records such a run
    # loads (past it, it fails at once naming the limit), and the partitions matched at once on AWS
    # (the Distributed Map's MaxConcurrency; locally, at most the machine's CPUs).
    run_partition_records: int = Field(default=PARTITION_RECORDS, ge=2)
    max_fanout_run_records: int = Field(default=FANOUT_RECORDS, ge=1)
    run_map_concurrency: int = Field(default=MAP_CONCURRENCY, ge=1, le=10_000)
    # Records of one persist chunk (domain/runs.py CHUNK_RECORDS): a run's progress moves a chunk at
    # a time. Smaller chunks mean more of them: max_run_records must fit in MAX_RUN_CHUNKS chunks.
    run_chunk_records: int = Field(default=CHUNK_RECORDS, ge=2)
    # A run's match of at most 8 records carries its members in its own item (adapters/dynamodb/
    # matches.py). Code from before that release reads member items only: a deployed stage keeps
    # writing them (infra/deploy.py sets false) until every function reads both (docs/upgrades.md).
    carry_match_members: bool = True
    # A new stream is marked as one whose records' changes are all noted as blocks, so that a run
    # reads from the analytics mirror all but the changed blocks (domain/record_changes.py). Code
    # from before that release changes records without noting blocks: a deployed stage marks no
    # stream (infra/deploy.py sets false) until no function of it may run (docs/upgrades.md).
    note_changed_blocks: bool = True
    # A run's claims go in transactions of whole matches (TransactWriteItems, up to 100 claims a
    # request), an exception refresh's holds on its records in transactions of 100, and so do the
    # conditional puts of an ingestion chunk that two executions may write (retried), rather
    # than one conditional write a record: a hundredth of the requests, but AWS
    # bills a transaction's writes twice: infra/deploy.py sets false on deployed stages (write units
    # a matched record stay as they were); the local stack, whose DynamoDB is the bound, keeps them.
    claims_in_transactions: bool = True

    # Deliveries of a bulk message before it goes to the dead-letter queue; the worker fails the
    # job on the last one. Must equal maxReceiveCount of BulkQueue in infra/template.yaml.
    bulk_max_receives: int = 5

    # Agents (infra/template.yaml: the agent-run queue, the schedule group and the role that lets
    # EventBridge Scheduler send to that queue).
    agent_run_queue_name: str = "recon-dev-agent-runs"
    # Domain events (infra/template.yaml `EventBus`): the webhook fan-out and any client rule read them.
    event_bus_name: str = "recon-dev"
    agent_run_max_receives: int = 3  # the queue's maxReceiveCount
    schedule_group_name: str = "recon-dev"
    scheduler_role_arn: str = "arn:aws:iam::123456789012:role/recon-dev-scheduler"
    # The language model of llm agents: Bedrock's Converse API, or any OpenAI-compatible Chat
    # Completions server (Ollama, llama.cpp's server, vLLM). None: bedrock on AWS, openai locally.
    model_provider: Literal["bedrock", "openai"] | None = None
    default_model: str | None = None  # None: the provider's default (adapters/language_models.py)
    # The models an agent may name (comma-separated ids), besides null (the default above); unset:
    # any the provider serves. Bedrock bills the account for whichever model a tenant's agent names.
    agent_models: str | None = None
    openai_base_url: str | None = Field(
        default=None, validation_alias=AliasChoices("RECON_OPENAI_BASE_URL", "OPENAI_BASE_URL"))
    openai_api_key: SecretStr | None = Field(
        default=None, validation_alias=AliasChoices("RECON_OPENAI_API_KEY", "OPENAI_API_KEY"))
    # Bedrock's own endpoint: the embedded local AWS (moto) has no Converse API.
    bedrock_endpoint: str | None = Field(
        default=None, validation_alias=AliasChoices("RECON_BEDROCK_ENDPOINT", "AWS_ENDPOINT_URL_BEDROCK_RUNTIME"))
    # Bounds of one agent run: model turns, tokens in and out, wall time.
    agent_max_turns: int = 24
    agent_max_tokens: int = 400_000
    # Checked before each model turn: the last turn (a model call, its tool calls) must still end
    # within the worker's 15 minutes.
    agent_max_seconds: int = 420
    # The sender of agent deliveries (an SES identity verified in the account).
    mail_sender: str = "agents@recon.local"

    # Browser agents: the state machine of their runs (infra/workflows.yaml), the prefix of their
    # secrets in Secrets Manager (portal logins and saved browser contexts), the Chromium the
    # browser worker drives (Debian's package; the container image has it at the same path), how
    # long it waits for a page's element and for a download, and how long a paused run waits for
    # its verification code.
    browser_run_state_machine: str = "recon-dev-browser-run"
    secrets_prefix: str = "recon-dev"
    chromium_path: str = "/usr/bin/chromium"
    browser_step_timeout_seconds: float = 15.0
    browser_download_timeout_seconds: float = 60.0
    # At most 2 hours: a waiting run older than that and a worker's lease is taken for abandoned
    # (domain/agents/runs.py, WAIT_LEASE).
    verification_timeout_seconds: int = Field(default=1800, ge=1, le=7200)

    # Webhooks (infra/template.yaml): the queue the event bus's rule fills (one message per event,
    # fanned out to the endpoints), the queue of delivery attempts, and one attempt's deadline
    # (from connecting to the answer read, in all).
    webhook_event_queue_name: str = "recon-dev-webhook-events"
    webhook_delivery_queue_name: str = "recon-dev-webhook-deliveries"
    webhook_timeout_seconds: float = Field(default=WEBHOOK_TIMEOUT_SECONDS, gt=0, le=30)

    log_level: str = "INFO"

    @model_validator(mode="before")
    @classmethod
    def _environment_under_what_is_given(cls, given: Any) -> Any:
        if not isinstance(given, dict):
            return given
        environment = {name.upper(): value for name, value in os.environ.items()}
        found: dict[str, str] = {}
        for name, field in cls.model_fields.items():
            names = _environment_names(name, field)
            if name in given or any(n in given for n in names):
                continue
            value = next((environment[n.upper()] for n in names if n.upper() in environment), None)
            if value is not None:
                found[name] = value
        return {**found, **given}

    @model_validator(mode="after")
    def _a_largest_run_fits_one_execution(self) -> Settings:
        chunks = -(-self.max_run_records // (self.run_chunk_records // 2))  # a chunk may hold half its size
        if chunks > MAX_RUN_CHUNKS:
            raise ValueError(
                f"RECON_RUN_CHUNK_RECORDS={self.run_chunk_records} makes a run of RECON_MAX_RUN_RECORDS="
                f"{self.max_run_records} records {chunks:,} persist chunks, more than the {MAX_RUN_CHUNKS:,} one "
                "execution's history holds: raise the chunk size or lower the records a run loads")
        return self

    @model_validator(mode="after")
    def _a_fanned_out_run_can_split(self) -> Settings:
        # A partition larger than one function holds would refuse every fan-out, and a fan-out
        # ceiling under one function's would refuse runs one function could match. Defaults follow
        # a smaller function's RECON_MAX_RUN_RECORDS; values given that contradict it are refused.
        if "run_partition_records" not in self.model_fields_set:
            self.run_partition_records = max(2, min(self.run_partition_records, self.max_run_records // 2))
        if "max_fanout_run_records" not in self.model_fields_set:
            self.max_fanout_run_records = max(self.max_fanout_run_records, self.max_run_records)
        if self.run_partition_records > self.max_run_records:
            raise ValueError(
                f"RECON_RUN_PARTITION_RECORDS={self.run_partition_records} is more than RECON_MAX_RUN_RECORDS="
                f"{self.max_run_records}: a partition must fit the one match function")
        if self.max_fanout_run_records < self.max_run_records:
            raise ValueError(
                f"RECON_MAX_FANOUT_RUN_RECORDS={self.max_fanout_run_records} is less than RECON_MAX_RUN_RECORDS="
                f"{self.max_run_records}: a fanned-out run may hold at least what one function does")
        return self

    @property
    def local_service_ports(self) -> frozenset[int]:
        """Locally, the loopback ports of the stack's own services (dynalite, the AWS server, s3rver)
        and of the API: a webhook may not be sent to them (domain/webhooks.UrlPolicy). None on AWS."""
        if not self.local_mode:
            return frozenset()
        ports = {urlsplit(url).port for url in (self.dynamodb_endpoint, self.aws_endpoint, self.s3_endpoint) if url}
        return frozenset(port for port in ports if port) | {self.port}


def _environment_names(name: str, field: FieldInfo) -> list[str]:
    alias = field.validation_alias
    if isinstance(alias, AliasChoices):
        return [choice for choice in alias.choices if isinstance(choice, str)]
    if isinstance(alias, str):
        return [alias]
    return [ENVIRONMENT_PREFIX + name.upper()]


@lru_cache(maxsize=1)
def settings_from_environment() -> Settings:
    return Settings()


_installed: Settings | None = None


def current_settings() -> Settings:
    """The process's settings: the environment's, unless the local stack installed its own."""
    return _installed or settings_from_environment()


def install_settings(settings: Settings | None) -> None:
    """Used by the local stack before it imports app.py, so event sources name local resources."""
    global _installed
    _installed = settings
