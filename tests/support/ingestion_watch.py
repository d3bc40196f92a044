"""Watching an ingestion job the way a client polls it: after every call a worker makes to the
job repository, the job is read through the API, and a final status whose counts do not add up
(or whose results are not one per item) is noted."""
from __future__ import annotations

from typing import Any

from chalicelib.adapters.dynamodb.jobs import IngestionJobRepository

FINAL = ("completed", "failed", "cancelled")


class FinalCountsWatch:
    """What a client saw of one job: each status read, and each read of a final status whose counts
    were not final. Noted, not raised: a worker may catch what is raised inside it."""

    def __init__(self, api: Any, job_id: int) -> None:
        self.api, self.job_id = api, job_id
        self.seen: list[str] = []
        self.violations: list[dict[str, Any]] = []

    def look(self) -> None:
        job = self.api.get(f"/v1/file_imports/{self.job_id}").json_body
        if not self.seen or self.seen[-1] != job["status"]:
            self.seen.append(job["status"])
        if job["status"] not in FINAL:
            return
        counts = {k: job[k] for k in ("total_items", "processed_items", "successful_items", "failed_items",
                                      "skipped_items")}
        results = self._results()
        if not (counts["total_items"] == counts["processed_items"]
                == counts["successful_items"] + counts["failed_items"] + counts["skipped_items"]
                and [r["index"] for r in results] == list(range(counts["total_items"]))):
            self.violations.append({"status": job["status"], **counts, "results": len(results)})

    def _results(self) -> list[dict[str, Any]]:
        results: list[dict[str, Any]] = []
        cursor = None
        while True:
            page = self.api.get(f"/v1/file_imports/{self.job_id}/results?limit=200"
                                + (f"&cursor={cursor}" if cursor else "")).json_body
            results += page["data"]
            cursor = page["next_cursor"]
            if not cursor:
                return results


# Every method of the repository that writes the job or its results.
WRITES = frozenset({"add", "move", "begin_ending", "reserve_record_ids", "begin_chunk", "save_chunk",
                    "save_chunk_and_begin_ahead",
                    "record_preparation", "link_to_streams", "count_restart", "set_aggregates",
                    "mark_counts_rolled_up", "request_cancellation"})


class WatchedJobs(IngestionJobRepository):
    """The adapter itself; after each of its writes, the watch looks."""

    def __init__(self, table: Any, watch: FinalCountsWatch) -> None:
        super().__init__(table)
        self._watch = watch

    def __getattribute__(self, name: str) -> Any:
        attribute = super().__getattribute__(name)
        if name not in WRITES:
            return attribute
        watch = super().__getattribute__("_watch")

        def watched(*args: Any, **kwargs: Any) -> Any:
            try:
                return attribute(*args, **kwargs)
            finally:
                watch.look()
        return watched
