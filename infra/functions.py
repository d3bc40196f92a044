"""Every Lambda function of the app, in one table: its permission group, whether it imports the
engine (and so gets the engine layer), and its size. `make deploy` writes the stage's Chalice
configuration from this table; tests hold it to the functions app.py defines."""
from __future__ import annotations

from dataclasses import dataclass

# Roles of infra/template.yaml, by group: `<Group>RoleArn` outputs.
GROUPS = ("api", "ingestion", "runs", "investigations", "sweeper", "agents", "browser", "webhooks")


@dataclass(frozen=True)
class Function:
    group: str
    engine: bool          # imports polars, numpy or rapidfuzz: gets the engine layer
    memory_mb: int
    timeout_s: int


FUNCTIONS: dict[str, Function] = {
    # Routes: dry runs and file-import aggregates use the engine. API Gateway waits 29 s at most.
    "api_handler": Function("api", engine=True, memory_mb=1769, timeout_s=30),
    "s3_object_created": Function("ingestion", engine=False, memory_mb=256, timeout_s=60),
    # Six times each consumer's timeout is its queue's visibility timeout (infra/template.yaml).
    "bulk_worker": Function("ingestion", engine=True, memory_mb=2048, timeout_s=900),
    "file_import_prepare": Function("ingestion", engine=True, memory_mb=3008, timeout_s=900),
    "file_import_chunks": Function("ingestion", engine=True, memory_mb=2048, timeout_s=300),
    "file_import_finish": Function("ingestion", engine=True, memory_mb=2048, timeout_s=900),
    "file_import_fail": Function("ingestion", engine=True, memory_mb=2048, timeout_s=900),
    # bench/run_memory.py, 1M open records a side: load peaks at 469 MB, match at 969 MB (polars uses both
    # vCPUs), a persist or undo chunk at 116 MB. The load of a run that fans out holds both sides, up to 10M
    # a side (settings.max_fanout_run_records), and splits them: about 190 bytes a record read, 4-5 GB at 20M
    # with the split (bench/RESULTS.md, issue 32): Lambda's largest, paid only for the seconds a load runs.
    "reconciliation_run_load": Function("runs", engine=True, memory_mb=10240, timeout_s=900),
    "reconciliation_run_match": Function("runs", engine=True, memory_mb=3008, timeout_s=900),
    # A run that fans out: a partition holds at most what the match function holds (settings.max_run_records,
    # sized from its memory; 2M records peaked at 596-787 MB); the merge holds every partition's matches, the
    # sides' persisted columns and the plan's chunks: 7.3-8.6 GB at 10M x 10M (bench/fanout.py), Lambda's largest.
    "reconciliation_run_partition": Function("runs", engine=True, memory_mb=3008, timeout_s=900),
    "reconciliation_run_merge": Function("runs", engine=True, memory_mb=10240, timeout_s=900),
    "reconciliation_run_persist": Function("runs", engine=True, memory_mb=1024, timeout_s=300),
    "reconciliation_run_exceptions": Function("runs", engine=True, memory_mb=2048, timeout_s=900),
    "reconciliation_run_finish": Function("runs", engine=True, memory_mb=1024, timeout_s=300),
    "reconciliation_run_fail": Function("runs", engine=True, memory_mb=1024, timeout_s=900),
    "investigation_worker": Function("investigations", engine=True, memory_mb=3008, timeout_s=300),
    "sweep_stuck_jobs": Function("sweeper", engine=True, memory_mb=2048, timeout_s=900),
    # An agent run: model turns, and its `sql` tool, which runs on polars.
    "agent_worker": Function("agents", engine=True, memory_mb=2048, timeout_s=900),
    # Browser agents' runs (infra/statemachines/browser_run.asl.json): the pause that keeps a task token,
    # the expiry of a code never given, the failure of a task that gave up; table and secrets writes only.
    # Their attempts run in the browser worker, a container image of the infrastructure stack
    # (BrowserRunAttemptFunction), in the same role.
    "browser_run_pause": Function("browser", engine=False, memory_mb=256, timeout_s=60),
    "browser_run_expire": Function("browser", engine=False, memory_mb=256, timeout_s=60),
    "browser_run_fail": Function("browser", engine=False, memory_mb=256, timeout_s=60),
    # Webhooks: the fan-out of an event to its deliveries, and one delivery attempt (an HTTP call of
    # at most 10 s to connect and 10 s to read); no engine.
    "webhook_fanout": Function("webhooks", engine=False, memory_mb=256, timeout_s=60),
    "webhook_worker": Function("webhooks", engine=False, memory_mb=256, timeout_s=60),
}


def role_output(group: str) -> str:
    """The infrastructure stack's output holding a group's role ARN: 'runs' -> 'RunsRoleArn'."""
    return f"{group.capitalize()}RoleArn"
