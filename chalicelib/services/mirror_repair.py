"""The analytics mirror written again from the table, which is the truth of what records exist.

An import is in the mirror once its row marker is, in the import itself (adapters/mirror.py; the
repair first makes the stream's index of markers agree with those): an ended import that
wrote records into a stream and has no marker there is missing from the mirror (the mirror is
behind the table), which happens when the mirror's objects were lost. (A marker cannot say more:
once an import is rewritten, it counts the records left, fewer than it wrote.) Repairing
rewrites such an import from its records (its block of ids: `first_record_id` on, one per item),
publishes it, and recounts its streams, so that `records_count` never reads 0 for records that
exist. `everything` rewrites every import, for a mirror whose parts may be damaged although
their markers are there. An import that failed or was cancelled and was never settled (its
process died right after the move) is settled first: its results, replication and counts.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from chalicelib.domain.ingestion import ImportTotals, IngestionJob, JobStatus
from chalicelib.observability import logger
from chalicelib.services.data_streams import imports_of_stream, live_stream_keys, recount_records
from chalicelib.services.ingestion.lifecycle import settle
from chalicelib.services.ports import Ports

PART_ROWS = 20_000  # records per rewritten Parquet part (read from the table in one go)


@dataclass
class MirrorRepair:
    imports_rewritten: list[tuple[str, int]] = field(default_factory=list)  # (environment, import id)
    records_written: int = 0
    streams_recounted: int = 0
    imports_settled: list[tuple[str, int]] = field(default_factory=list)  # ended early, settled here

    def describe(self) -> str:
        settled = f"; settled {len(self.imports_settled)} import(s) that had ended early" \
            if self.imports_settled else ""
        if not self.imports_rewritten:
            return "the analytics mirror holds every import: nothing to repair" + settled
        return (f"rewrote {len(self.imports_rewritten)} import(s) ({self.records_written} records) into the "
                f"analytics mirror and recounted {self.streams_recounted} data stream(s)" + settled)


def repair_mirror(ports: Ports, environment: str | None = None, everything: bool = False) -> MirrorRepair:
    """Rewrite the imports missing from the mirror (or all of them) of one environment or of
    every environment that has API keys; then recount the streams they fed."""
    repair = MirrorRepair()
    environments = [environment] if environment else sorted({key.environment for key in ports.api_keys.list()})
    for env in environments:
        done: set[int] = set()
        touched: set[str] = set()
        for stream_key in live_stream_keys(ports, env):  # a stream going away stays gone
            published = ports.mirror.reindex(env, stream_key)  # from the imports' own markers, not the index
            for job in imports_of_stream(ports, env, stream_key):
                if job.id in done:
                    continue
                if job.finished and not job.counts_rolled_up and job.status is not JobStatus.COMPLETED:
                    done.add(job.id)
                    if _settled(ports, job):  # replicated and recounted too
                        repair.imports_settled.append((env, job.id))
                    continue
                if not _belongs_in_mirror(job, stream_key):
                    continue
                if everything or job.id not in published:
                    repair.records_written += rewrite_import(ports, job)
                    repair.imports_rewritten.append((env, job.id))
                    done.add(job.id)
                    touched.update(key for key, created in job.created_per_stream.items() if created)
        for stream_key in sorted(touched):
            ports.mirror.reindex(env, stream_key)  # a count that rolled up an import as it was forgotten
            recount_records(ports, env, stream_key)
            repair.streams_recounted += 1
    return repair


def _settled(ports: Ports, job: IngestionJob) -> bool:
    """Settle an import that ended early (one failure stops no other repair); True once rolled up."""
    try:
        return settle(ports, job).counts_rolled_up
    except Exception:
        logger.exception("settling an ended import failed", extra={"environment": job.environment,
                                                                   "job_id": job.id})
        return False


def rewrite_import(ports: Ports, job: IngestionJob) -> int:
    """Write the import's records that exist now into the mirror again, in place of whatever it
    held of it; its totals are stored again when they were lost with the mirror. Returns how
    many records it wrote."""
    streams = sorted(key for key, created in job.created_per_stream.items() if created)
    ports.mirror.forget_import(job.environment, job.id, streams)
    written = 0
    if job.first_record_id is not None:
        for part, start in enumerate(range(0, job.total_items, PART_ROWS)):
            ids = range(job.record_id(start), job.record_id(min(start + PART_ROWS, job.total_items)))
            found = ports.records.find_many(job.environment, ids)
            records = [found[i] for i in sorted(found) if found[i].data_stream_key in streams]
            ports.mirror.write_part(job.environment, job.id, part, records)
            written += len(records)
    ports.mirror.publish(job.environment, job.id, streams)
    totals = ports.mirror.summarize(job.environment, job.id, streams)
    if _totals_lost(job.aggregates, totals):
        ports.ingestion_jobs.set_aggregates(job, totals)
    logger.info("import rewritten into the analytics mirror",
                extra={"environment": job.environment, "job_id": job.id, "records": written})
    return written


def _totals_lost(stored: ImportTotals | None, rebuilt: ImportTotals) -> bool:
    """Totals read from a mirror that had lost the import say 0 records; later deletes must not
    rewrite the totals of an import that was read whole."""
    return rebuilt.total.count > 0 and (stored is None or stored.total.count == 0)


def _belongs_in_mirror(job: IngestionJob, stream_key: str) -> bool:
    """An ended import that wrote records into the stream, whose records have been published
    (a completed one, or one whose failure or cancel was settled)."""
    ended = job.status is JobStatus.COMPLETED or (job.finished and job.counts_rolled_up)
    return ended and job.created_per_stream.get(stream_key, 0) > 0
