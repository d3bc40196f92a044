"""An agent run's overhead outside the model, on the local stack.

A scripted OpenAI-compatible server answers at once (tests/support/model_servers.py), so what a
run takes is the service's own work: queue pickup, the prompt's context, each tool call, saving
steps, writing files, mailing. Two agents run in turns in the same stack:

- baseline: one model turn, no tool (what any run costs);
- working: three model turns with four tool calls (list_reconciliations, get_reconciliation,
  sql over the mirror, write_output_file), then a delivery by mail of the file it wrote;
- no sql: the same without the `sql` call (what the query's own process costs is the difference).

Times come from the runs themselves (`started_at`, `completed_at`), and the time the model took is
measured beside them as the round trip of the same requests to the same server.

    .venv/bin/python bench/agent_run.py [--runs 10]
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
import urllib.request
from datetime import date, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from chalicelib.local.launcher import StackProcess  # noqa: E402
from tests.support.model_servers import ScriptedChatServer  # noqa: E402

TODAY = date.today().isoformat()


def post(stack: StackProcess, path: str, body: dict | None = None) -> dict:
    response = stack.request("POST", path, body)
    assert response.status_code in (201, 202), response.text
    return response.json()


def finished(stack: StackProcess, agent_id: str, run_id: int) -> dict:
    while True:
        run = stack.request("GET", f"/agents/{agent_id}/runs/{run_id}").json()
        if run["status"] in ("completed", "failed"):
            assert run["status"] == "completed", run
            return run
        time.sleep(0.05)


def seconds(run: dict, start: str, end: str) -> float:
    def parse(value: str) -> datetime:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    return (parse(run[end]) - parse(run[start])).total_seconds()


def model_round_trip(server: ScriptedChatServer, count: int = 50) -> float:
    """Median seconds of one request to the scripted server, as the adapter sends it."""
    server.add(*[server.text("ok") for _ in range(count)])
    body = json.dumps({"model": "scripted", "messages": [{"role": "user", "content": "x" * 4000}]}).encode()
    timings = []
    for _ in range(count):
        started = time.perf_counter()
        request = urllib.request.Request(f"{server.base_url}/chat/completions", data=body,
                                         headers={"Content-Type": "application/json"})
        urllib.request.urlopen(request, timeout=10).read()
        timings.append(time.perf_counter() - started)
    return statistics.median(timings)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="agent-run-bench-"))
    with ScriptedChatServer() as model:
        stack = StackProcess(workdir / "data", api_key="rk_bench",
                             extra_env={"OPENAI_BASE_URL": model.base_url, "RECON_DEFAULT_MODEL": "scripted"})
        stack.start()
        try:
            for key in ("bank", "ledger"):
                post(stack, "/data_streams", {"key": key, "name": key.title()})
            bulk = post(stack, "/records/bulk", {"records": [
                {"data_stream_key": "bank" if i % 2 else "ledger", "external_id": f"r{i}", "amount": 100 + i,
                 "date": TODAY, "direction": "credit"} for i in range(500)]})
            while stack.request("GET", f"/bulk_requests/{bulk['id']}").json()["status"] != "completed":
                time.sleep(0.2)
            recon = post(stack, "/reconciliations", {"name": "Bank to ledger", "run_type": "batch",
                                                     "side_a_stream_keys": ["bank"], "side_b_stream_keys": ["ledger"]})
            baseline = post(stack, "/agents", {"name": "Baseline", "instructions": "Say hello."})
            working = post(stack, "/agents", {
                "name": "Working", "instructions": "Sum the records per stream and mail a CSV.",
                "delivery_enabled": True, "delivery_recipients": ["treasury@acme.test"],
                "mentions": [{"type": "reconciliation", "id": recon["id"], "label": "Bank"}]})
            results: dict[str, list[tuple[float, float, int]]] = {"baseline": [], "working": [], "no sql": []}
            for n in range(args.runs + 1):  # the first of each is a warm-up
                model.add(model.text("hello"))
                run = post(stack, f"/agents/{baseline['id']}/runs")
                done = finished(stack, baseline["id"], run["id"])
                if n:
                    results["baseline"].append((seconds(done, "created_at", "started_at"),
                                                seconds(done, "started_at", "completed_at"), 1))
                for name, sql in (("working", True), ("no sql", False)):
                    calls = [("a", "list_reconciliations", {}), ("b", "get_reconciliation", {"id": recon["id"]})]
                    if sql:
                        calls.append(("c", "sql", {"query": "SELECT data_stream_key, count(*), sum(amount) "
                                                            "FROM records GROUP BY 1"}))
                    model.add(model.tool_calls(*calls),
                              model.tool_calls(("d", "write_output_file", {"filename": f"sums-{n}.csv",
                                                                           "content": "stream,total\nbank,1\n" * 50})),
                              model.text("Mailed it."))
                    run = post(stack, f"/agents/{working['id']}/runs")
                    done = finished(stack, working["id"], run["id"])
                    assert done["deliveries"][0]["status"] == "sent", done
                    if n:
                        results[name].append((seconds(done, "created_at", "started_at"),
                                              seconds(done, "started_at", "completed_at"), 3))
            round_trip = model_round_trip(model)
        finally:
            stack.stop()
    print(f"machine: {platform.processor() or platform.machine()}, python {platform.python_version()}, "
          f"{args.runs} runs each, model round trip {round_trip * 1000:.1f} ms")
    for name, rows in results.items():
        pickup = statistics.median(r[0] for r in rows)
        duration = statistics.median(r[1] for r in rows)
        outside = duration - rows[0][2] * round_trip
        print(f"{name:9s} queue pickup {pickup * 1000:6.0f} ms  run {duration * 1000:6.0f} ms  "
              f"outside the model {outside * 1000:6.0f} ms  ({rows[0][2]} model turn(s))")


if __name__ == "__main__":
    main()
