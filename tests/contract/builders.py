"""Domain objects for the contract tests, with every field a test does not care about filled in."""
from __future__ import annotations

from datetime import UTC, datetime

from chalicelib.domain.api_keys import ApiKey
from chalicelib.domain.data_streams import DataStream, PropertyDefinition, PropertyType, StreamType
from chalicelib.domain.ingestion import IngestionJob, JobSource, JobStatus, OnConflict
from chalicelib.domain.investigations.investigation import Investigation, InvestigationStatus
from chalicelib.domain.reconciliations import Reconciliation, RunType
from chalicelib.domain.rules import Rule, validate_rule
from chalicelib.domain.runs import Run, RunKind, RunStatus, RunTrigger

# Microseconds on purpose: both backends must read them back to the millisecond.
T0 = datetime(2024, 3, 1, 9, 30, 15, 987654, tzinfo=UTC)
T0_MS = datetime(2024, 3, 1, 9, 30, 15, 987000, tzinfo=UTC)
ENV = "acme"
OTHER_ENV = "globex"


def api_key(key_id: int, environment: str = ENV, **kw) -> ApiKey:
    return ApiKey(**{"id": key_id, "environment": environment, "key_hash": f"hash-{key_id}", "created_at": T0,
                     "label": f"key {key_id}", **kw})


def stream(stream_id: int, key: str | None = None, environment: str = ENV, **kw) -> DataStream:
    return DataStream(**{"environment": environment, "id": stream_id, "key": key or f"stream-{stream_id}",
                         "name": f"Stream {stream_id}", "type": StreamType.API, "created_at": T0, **kw})


def definition(definition_id: int, key: str = "ref", stream_key: str = "bank", environment: str = ENV,
               **kw) -> PropertyDefinition:
    return PropertyDefinition(**{"environment": environment, "id": definition_id, "key": key, "name": key.title(),
                                 "type": PropertyType.STRING, "data_stream_key": stream_key, "optional": True,
                                 "created_at": T0, **kw})


def reconciliation(reconciliation_id: int, side_a=("bank",), side_b=("ledger",), environment: str = ENV,
                   **kw) -> Reconciliation:
    return Reconciliation(**{"environment": environment, "id": reconciliation_id,
                             "name": f"Reconciliation {reconciliation_id}", "run_type": RunType.BATCH,
                             "side_a_stream_keys": tuple(side_a), "side_b_stream_keys": tuple(side_b),
                             "exception_after_days": 3, "created_at": T0, "updated_at": T0, **kw})


def rule(rule_id: int, priority: int, reconciliation_id: int = 1, environment: str = ENV, **kw) -> Rule:
    definition_ = validate_rule({"name": f"Rule {rule_id}", "priority": priority, "conditions": [
        {"field": "amount", "operator": "within", "tolerance_percent": 0.5},
        {"field": "description", "operator": "similar", "threshold": 0.8, "normalize": ["case"]}]})
    return Rule(**{"environment": environment, "id": rule_id, "reconciliation_id": reconciliation_id,
                   "definition": definition_, "created_at": T0, **kw})


def job(job_id: int, environment: str = ENV, source: JobSource = JobSource.BULK_API,
        status: JobStatus = JobStatus.PENDING, total_items: int = 600, **kw) -> IngestionJob:
    return IngestionJob(**{"environment": environment, "id": job_id, "source": source, "status": status,
                           "total_items": total_items, "on_conflict": OnConflict.SKIP, "created_at": T0, **kw})


def run(run_id: int, reconciliation_id: int = 1, environment: str = ENV, status: RunStatus = RunStatus.PENDING,
        **kw) -> Run:
    return Run(**{"environment": environment, "id": run_id, "reconciliation_id": reconciliation_id,
                  "kind": RunKind.BATCH, "trigger": RunTrigger.MANUAL, "status": status, "created_at": T0, **kw})


def investigation(investigation_id: int, exception_id: int = 7, environment: str = ENV,
                  status: InvestigationStatus = InvestigationStatus.PENDING, **kw) -> Investigation:
    return Investigation(**{"environment": environment, "id": investigation_id, "exception_id": exception_id,
                            "reconciliation_id": 1, "status": status, "created_at": T0, **kw})
