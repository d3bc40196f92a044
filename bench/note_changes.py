"""`streams note-changes` on the local stack: how long finding an old stream's changed blocks takes
(`services/changed_blocks.py` `changed_blocks`: every record item of the stream read through its
listing, and its imports' ids read from the analytics mirror), beside the run's load from the table
it saves afterwards.

One stream of N records in one completed import, table and mirror (written as ingestion leaves them:
bench/open_records_mirror.py `fill`), one in a hundred reconciled by a run, and the stream made as a
release before the blocks made it (no `changes_noted`). The scan is timed twice; the table's load of
the stream's open records once, for scale.

    .venv/bin/python bench/note_changes.py [--records 250000]
"""
from __future__ import annotations

import argparse
import os
import platform
import shutil
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.open_records_mirror import ENVIRONMENT, _cpu, fill, servers_cpu  # noqa: E402
from chalicelib.adapters.dynamodb import keys  # noqa: E402
from chalicelib.domain.record_changes import change_block  # noqa: E402
from chalicelib.domain.records import RecordStatus  # noqa: E402
from chalicelib.local.__main__ import LocalService  # noqa: E402
from chalicelib.local.processes import free_port  # noqa: E402
from chalicelib.settings import Settings  # noqa: E402


def timed(what, work):
    started, cpu, servers = time.perf_counter(), _cpu(), servers_cpu()
    result = work()
    wall, after = time.perf_counter() - started, servers_cpu()
    spent = f"this process {_cpu() - cpu:.1f} s, " + ", ".join(
        f"{name} {after[name] - servers[name]:.1f} s" for name in servers)
    print(f"{what}: {wall:.1f} s (CPU: {spent}), load average {os.getloadavg()[0]:.1f}", flush=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=250_000)
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="recon-bench-note-changes-"))
    service = LocalService(Settings(data_dir=workdir / "data", port=free_port(), api_key="rk_bench"),
                           log=lambda m: None).start()
    try:
        import polars  # noqa: F401  (imported before the clock starts)

        from chalicelib.services.changed_blocks import changed_blocks

        ports, table = service.container.ports, service.container.table
        started = time.perf_counter()
        ids = fill(ports, table, "a", 901, 901, args.records, args.records)
        reconciled = ids[::100]
        ports.records.put_many([replace(ports.records.get(ENVIRONMENT, i), status=RecordStatus.RECONCILED)
                                for i in reconciled])  # (their items as a claim leaves them: status, indexes)
        table.update(keys.data_stream(ENVIRONMENT, "side-a"), "REMOVE changes_noted")
        print(f"filled: {args.records:,} records, {len(reconciled):,} reconciled, in "
              f"{time.perf_counter() - started:.0f} s", flush=True)
        print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, python {platform.python_version()}", flush=True)
        expected = {change_block(i) for i in reconciled}
        for attempt in range(2):
            found = timed(f"changed_blocks, attempt {attempt}, {args.records:,} records",
                          lambda: changed_blocks(ports, ENVIRONMENT, "side-a"))
            assert found == expected, found
        timed(f"for scale: the stream's records read from the table as a run's load reads them ({args.records:,})",
              lambda: sum(len(page["id"]) for page in ports.claims.open_record_columns(
                  ENVIRONMENT, "side-a", 77, adopted=False)))
    finally:
        service.stop()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
