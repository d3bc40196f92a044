"""Bulk actions at size, on the real local stack over HTTP: one request moves N open exceptions
(selected by the queue's filter) to `dismissed`, and the worker (the bulk queue's, in-process as
on Lambda) works them a chunk of 100 at a time, each item through the single PATCH's use case with
its event and audit entry. Timed from the request to the action read back `completed`. The
exceptions are written with the repository's own item layout (as bench/exceptions.py does).

    .venv/bin/python bench/bulk_actions.py [--exceptions 1000]
"""
from __future__ import annotations

import argparse
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.exceptions import fill  # noqa: E402
from chalicelib.container import Container  # noqa: E402
from chalicelib.local.launcher import StackProcess  # noqa: E402
from chalicelib.local.stack import StackInfo  # noqa: E402
from chalicelib.settings import Settings  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--exceptions", type=int, default=1000)
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="recon-bench-bulk-"))
    stack = StackProcess(workdir / "data", api_key="rk_bench").start()
    try:
        container = Container(StackInfo(**stack.stack_info()).settings(Settings(local_mode=True)))
        keys = ["bench-a", "bench-b"]
        for key in keys:
            assert stack.request("POST", "/data_streams", {"key": key, "name": key}).status_code == 201
        reconciliation = stack.request("POST", "/reconciliations", {
            "name": "Bench", "run_type": "batch", "side_a_stream_keys": keys[:1], "side_b_stream_keys": keys[1:]}).json()
        fill(container, args.exceptions * 4, keys, reconciliation["id"])  # a quarter of them open
        started = time.perf_counter()
        answer = stack.request("POST", "/reconciliation_exceptions/bulk", {
            "action": "status", "status": "dismissed", "filter": {"status": "open"}})
        accepted = time.perf_counter() - started
        assert answer.status_code == 202, answer.text
        url = answer.json()["url"].removeprefix("/v1")
        while True:
            action = stack.request("GET", f"{url}?limit=1").json()
            if action["status"] in ("completed", "failed"):
                break
            time.sleep(0.5)
        elapsed = time.perf_counter() - started
        audited, cursor = 0, None  # every item's entry, its bulk action named (four items at once share the chain)
        while True:
            page = stack.request("GET", "/audit_events?resource_type=reconciliation_exception&limit=200"
                                 + (f"&cursor={cursor}" if cursor else "")).json()
            audited += sum(e["action"] == "reconciliation_exception.updated"
                           and e["summary"].get("bulk_action_id") == action["id"] for e in page["data"])
            cursor = page["next_cursor"]
            if cursor is None:
                break
        print(f"machine: {platform.machine()}, {platform.system()} {platform.release()}, "
              f"python {platform.python_version()}, load average {os.getloadavg()[0]:.2f}\n")
        print(f"{action['total_items']:,} exceptions dismissed by one bulk action: {action['status']}, "
              f"{action['succeeded_items']:,} succeeded, {action['failed_items']} failed, "
              f"{action['skipped_items']} skipped")
        print(f"202 in {accepted * 1000:.0f} ms (the filter resolved over {args.exceptions * 4:,} exceptions); "
              f"completed in {elapsed:.1f} s, {elapsed * 1000 / max(action['total_items'], 1):.1f} ms an item; "
              f"{audited:,} audit entries")
    finally:
        stack.stop()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
