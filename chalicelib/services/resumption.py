"""Work resumed at once when the executions that ran it are known to be dead: the local stack
runs its state machines and queue handlers in its own process, so at its start everything still
in flight lost its execution with the previous process (a Ctrl-C or a crash). Each phase resumes
from its checkpoint (an import's written chunks, a run's persisted chunks), as a restart by the
sweeper would, without waiting for the sweeper's thresholds. A restart is claimed (counted)
once, so two starters never double one; messages already queued may deliver it a second time,
which every handler takes (they are idempotent).
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from chalicelib.domain.ingestion import JobStatus
from chalicelib.observability import logger
from chalicelib.services import file_imports, reconciliation_runs
from chalicelib.services.ports import Ports


@dataclass
class Resumed:
    file_imports: list[tuple[str, int]] = field(default_factory=list)
    bulk_requests: list[tuple[str, int]] = field(default_factory=list)
    runs: list[tuple[str, int]] = field(default_factory=list)
    investigations: list[tuple[str, int]] = field(default_factory=list)

    def describe(self) -> str:
        parts = [f"{len(ids)} {what}" for what, ids in (
            ("file import(s)", self.file_imports), ("bulk request(s)", self.bulk_requests),
            ("reconciliation run(s)", self.runs), ("investigation(s)", self.investigations)) if ids]
        return "resumed " + ", ".join(parts) if parts else "no work was in flight"


def resume_interrupted(ports: Ports) -> Resumed:
    """Start again every job, run and investigation that is pending or running. One that cannot
    be resumed is logged and left to the sweeper; it stops no other."""
    resumed = Resumed()
    for job in ports.ingestion_jobs.active():
        waiting_for_upload = (job.is_file and job.status is JobStatus.PENDING
                              and not ports.payloads.exists(job.import_file_key))
        if job.finished or waiting_for_upload:
            continue
        with _logged("import", job.environment, job.id):
            if file_imports.restart(ports, job):
                (resumed.file_imports if job.is_file else resumed.bulk_requests).append((job.environment, job.id))
    for run in ports.runs.active():
        with _logged("run", run.environment, run.id):
            if reconciliation_runs.restart(ports, run):
                resumed.runs.append((run.environment, run.id))
    for investigation in ports.investigations.active():
        with _logged("investigation", investigation.environment, investigation.id):
            ports.investigation_queue.send({"environment": investigation.environment,
                                            "investigation_id": investigation.id})
            resumed.investigations.append((investigation.environment, investigation.id))
    return resumed


@contextmanager
def _logged(what: str, environment: str, entity_id: int) -> Iterator[None]:
    """Log a failure to resume one piece of work, and go on with the others."""
    try:
        yield
    except Exception:
        logger.exception("resuming interrupted work failed",
                         extra={"what": what, "environment": environment, "id": entity_id})
