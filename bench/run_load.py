"""A run's load phase (`open_frames`: both sides' open records into frames) at N open records a
side, before and after issue 30, on two engines: the fake DynamoDB endpoint of bench/run_memory.py
(pages as DynamoDB sends them, generated once and cached) and dynalite (the local stack's
DynamoDB, filled with the records' index entries).

Each case runs in a fresh process; "before" runs the code of another checkout (`--before DIR`,
e.g. `git archive 0b65497 | tar -x -C DIR`) reading the unsharded open partition, as it did;
"after" runs this checkout, on records written before the shards (the unsharded partition, 16
empty shards beside it) and on records written now (16 shards). Wall and CPU seconds of the load
process, its peak RSS, and the machine's load average. This checkout reads through the service's own
DynamoDB client (bench/run_memory.py `ports_for`); a `--before` checkout through whatever its own
`ports_for` builds (boto3's client before 2026-11-30).

    .venv/bin/python bench/run_load.py --before /tmp/base [--records 100000 1000000] [--engines fake dynalite]
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import run_memory  # noqa: E402

RECONCILIATION = 10 ** 6


def child(code: Path, port: int, records: int, sharded: bool, workdir: Path) -> dict[str, Any]:
    """The load, with the code of `code` (its bench/run_memory.py builds the ports)."""
    sys.path[:0] = [str(code), str(code / "bench")]
    for name in [m for m in sys.modules if m == "run_memory" or m.startswith("chalicelib")]:
        del sys.modules[name]
    import run_memory as theirs  # noqa: F811

    ports, reconciliation, rule = theirs.ports_for(port, records, workdir)
    keys = (run_memory.stream_key("a", records, sharded), run_memory.stream_key("b", records, sharded))
    reconciliation = theirs.Reconciliation(RECONCILIATION, (keys[0],), (keys[1],), current_run_id=1)
    import polars  # noqa: F401  (imported before the clock starts, as in a warm worker)

    from chalicelib.services.reconciliation_runs import open_frames

    started, cpu = time.perf_counter(), _cpu()
    side_a, side_b = open_frames(ports, run_memory.ENVIRONMENT, reconciliation, [rule], None, adopt=True)
    result = {"wall_s": time.perf_counter() - started, "cpu_s": _cpu() - cpu, "loaded": side_a.height + side_b.height,
              "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
              "first_ids": side_a["id"].head(3).to_list()}
    return result


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def spawn(code: Path, port: int, records: int, sharded: bool, workdir: Path) -> dict[str, Any]:
    command = [sys.executable, __file__, "--child", str(code), "--port", str(port), "--records", str(records),
               "--workdir", str(workdir)] + (["--sharded"] if sharded else [])
    out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


# dynalite, filled with the open records' index entries -------------------------------------------

def start_dynalite(path: Path) -> tuple[subprocess.Popen, int]:
    from chalicelib.local import processes
    from chalicelib.local.stack import DYNALITE_CLI

    port = processes.free_port()
    server = subprocess.Popen(["node", str(DYNALITE_CLI), "--host", "127.0.0.1", "--port", str(port), "--path",
                               str(path), "--createTableMs", "0"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    run_memory._wait_for(port)
    return server, port


def fill_dynalite(port: int, records: int) -> float:
    """The table (infra/template.yaml's, named as the bench's ports name it), the stream adoptions,
    and both sides' records in both layouts. Seconds it took."""
    import boto3

    from chalicelib.adapters.dynamodb import keys
    from chalicelib.local.provision import Resolver, load_template, table_definitions
    from chalicelib.local.stack import LOCAL_PARAMETERS

    client = boto3.client("dynamodb", endpoint_url=f"http://127.0.0.1:{port}", region_name="us-east-1",
                          aws_access_key_id="bench", aws_secret_access_key="bench")
    template = load_template()
    [definition] = table_definitions(template, Resolver(template, LOCAL_PARAMETERS, "us-east-1"))
    client.create_table(**{**definition, "TableName": "recon"})
    started = time.perf_counter()
    adoptions = [{k: {"S": v} for k, v in keys.stream_adoption(run_memory.ENVIRONMENT, RECONCILIATION,
                                                               run_memory.stream_key(side, records, sharded)).items()}
                 for side in "ab" for sharded in (False, True)]
    batches = [[{"PutRequest": {"Item": a}} for a in adoptions]]
    for side in "ab":
        for sharded in (False, True):
            items = [run_memory.record_item(side, records, n, sharded) for n in range(records)]
            items = items if sharded else [_as_written_before(i) for i in items]
            batches += [[{"PutRequest": {"Item": i}} for i in items[s:s + 25]] for s in range(0, records, 25)]

    def write(batch: list[dict[str, Any]]) -> None:
        while batch:
            left = client.batch_write_item(RequestItems={"recon": batch}).get("UnprocessedItems", {})
            batch = left.get("recon", [])

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(write, batches))
    return time.perf_counter() - started


def _as_written_before(item: dict[str, Any]) -> dict[str, Any]:
    """The same record in the other layout: its own table key (the ids are the same in both)."""
    return {**item, "pk": {"S": item["pk"]["S"].replace("#REC#", "#RECL#")}}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--before", type=Path, help="a checkout of the code before the change")
    parser.add_argument("--records", type=int, nargs="*", default=[100_000, 1_000_000])
    parser.add_argument("--engines", nargs="*", default=["fake", "dynalite"])
    parser.add_argument("--pages", help="keep the fake's pages here, for the next run")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--child", type=Path)
    parser.add_argument("--fill", type=int)
    parser.add_argument("--port", type=int)
    parser.add_argument("--sharded", action="store_true")
    parser.add_argument("--workdir")
    args = parser.parse_args()
    if args.fill:
        print(fill_dynalite(args.fill, args.records[0]))
        return
    if args.child:
        print(json.dumps(child(args.child, args.port, args.records[0], args.sharded, Path(args.workdir))))
        return

    print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()}", flush=True)
    with tempfile.TemporaryDirectory(prefix="recon-bench-load-") as tmp:
        for engine in args.engines:
            for records in args.records:
                if engine == "fake":
                    pages = Path(args.pages or Path(tmp) / "pages")
                    pages.mkdir(parents=True, exist_ok=True)
                    port = run_memory.free_port()
                    server = subprocess.Popen([sys.executable, str(ROOT / "bench" / "run_memory.py"), "--serve",
                                               str(port), "--workdir", str(pages)])
                    run_memory._wait_for(port)
                else:
                    server, port = start_dynalite(Path(tmp) / f"dynalite-{records}")
                    filled = subprocess.run([sys.executable, __file__, "--fill", str(port), "--records", str(records)],
                                            check=True, capture_output=True, text=True).stdout  # its memory its own
                    print(json.dumps({"engine": engine, "records": records, "fill_s": float(filled)}), flush=True)
                try:
                    cases = [("before", args.before, False)] if args.before else []
                    cases += [("after, written before the shards", ROOT, False), ("after, sharded", ROOT, True)]
                    for attempt in range(args.repeat + (1 if engine == "fake" else 0)):  # the fake's first makes its pages
                        for name, code, sharded in cases:
                            result = spawn(code, port, records, sharded, Path(tmp) / "work")
                            print(json.dumps({"engine": engine, "records": records, "case": name, "attempt": attempt,
                                              "load_average": os.getloadavg()[0], **result}), flush=True)
                finally:
                    server.terminate()
                    server.wait()


if __name__ == "__main__":
    main()
