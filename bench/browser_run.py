"""A browser agent's run against the local test portal, on the local stack as `make run` starts it.

The portal (tests/support/portal.py) answers on loopback, so what a run takes is the service's own
work plus a real headless Chromium: queue pickup, the workflow, launching the browser, logging in,
the export's steps, the download, saving the session, importing the file (to its end: the
import's records written). Measured, each from the API:

- first run: POST /agents/{id}/runs to `waiting_for_verification` (logged in, code requested),
  then from posting the code to the run's import completed;
- later runs (the saved session reused): POST to the import completed;
- a run after the portal forgot its sessions (logs in again, no code): POST to the import completed;
- baseline: the same export driven by PlaywrightPortal alone in this process (no service around it).

The issue's target: a run against the local portal takes at most 20 s.

    .venv/bin/python bench/browser_run.py [--runs 5]
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from chalicelib.adapters.browser_portal import PlaywrightPortal  # noqa: E402
from chalicelib.domain.agents.browser import Credentials, PortalJob, check_settings  # noqa: E402
from chalicelib.local.launcher import ROOT, StackProcess  # noqa: E402
from tests.support.portal import PORTAL_SETTINGS, TestPortal  # noqa: E402

USERNAME, PASSWORD = "bench@acme.test", "bench-password"


def wait(stack: StackProcess, path: str, done, timeout: float = 120) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        body = stack.request("GET", path).json()
        if done(body):
            return body
        if time.monotonic() > deadline:
            raise TimeoutError(body)
        time.sleep(0.05)


def run_to_import(stack: StackProcess, agent_id: str, started: float, run_id: int) -> float:
    run = wait(stack, f"/agents/{agent_id}/runs/{run_id}", lambda r: r["status"] in ("completed", "failed"))
    if run["status"] != "completed":
        raise RuntimeError(run)
    wait(stack, f"/file_imports/{run['file_import_id']}", lambda j: j["status"] in ("completed", "failed"))
    return time.monotonic() - started


def start(stack: StackProcess, agent_id: str) -> tuple[float, int]:
    began = time.monotonic()
    response = stack.request("POST", f"/agents/{agent_id}/runs")
    response.raise_for_status()
    return began, response.json()["id"]


def baseline(portal: TestPortal, runs: int) -> list[float]:
    driver = PlaywrightPortal("/usr/bin/chromium", 15, 60)
    settings = check_settings(PORTAL_SETTINGS)
    job = PortalJob(portal_url=portal.url, settings=settings, credentials=Credentials(USERNAME, PASSWORD),
                    today=date.today())
    first = driver.run(job)
    state = driver.run(PortalJob(**{**job.__dict__, "storage_state": first.storage_state, "code": portal.code}))
    times = []
    for _ in range(runs):
        began = time.monotonic()
        driver.run(PortalJob(**{**job.__dict__, "storage_state": state.storage_state}))  # type: ignore[union-attr]
        times.append(time.monotonic() - began)
    return times


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, TestPortal(username=USERNAME, password=PASSWORD) as portal:
        stack = StackProcess(Path(tmp) / "data", api_key="rk_bench-browser").start()
        try:
            stack.request("POST", "/data_streams", {"key": "bank", "name": "Operating account"}).raise_for_status()
            settings_file = Path(tmp) / "portal.json"
            settings_file.write_text(json.dumps(PORTAL_SETTINGS))
            cli = [sys.executable, "-m", "chalicelib.cli", "agents"]
            made = subprocess.run([*cli, "create-browser", "--environment", "local", "--name", "Bench portal",
                                   "--automation", "portal_export", "--portal-url", portal.url,
                                   "--settings", str(settings_file)], cwd=ROOT, env=stack.env, capture_output=True,
                                  text=True, check=True)
            agent_id = made.stdout.strip()
            subprocess.run([*cli, "set-credentials", agent_id], cwd=ROOT, env=stack.env, input=f"{USERNAME}\n{PASSWORD}\n",
                           capture_output=True, text=True, check=True)

            began, run_id = start(stack, agent_id)
            wait(stack, f"/agents/{agent_id}/runs/{run_id}", lambda r: r["status"] == "waiting_for_verification")
            to_code = time.monotonic() - began
            posted = time.monotonic()
            stack.request("POST", f"/agents/{agent_id}/verification", {"code": portal.code}).raise_for_status()
            after_code = run_to_import(stack, agent_id, posted, run_id)

            reused = [run_to_import(stack, agent_id, *start(stack, agent_id)) for _ in range(args.runs)]
            portal.expire_sessions()
            relogin = run_to_import(stack, agent_id, *start(stack, agent_id))
        finally:
            stack.stop()
        alone = baseline(portal, args.runs)

    print(f"machine: {platform.machine()}, {platform.processor() or platform.platform()}, Python "
          f"{platform.python_version()}")
    print(f"first run: to waiting_for_verification {to_code:.2f} s; code posted to import completed "
          f"{after_code:.2f} s; whole {to_code + after_code:.2f} s")
    print(f"saved session reused ({args.runs} runs): median {statistics.median(reused):.2f} s, max {max(reused):.2f} s")
    print(f"session expired, logs in again: {relogin:.2f} s")
    print(f"baseline, PlaywrightPortal alone ({args.runs} runs): median {statistics.median(alone):.2f} s")
    worst = max(to_code + after_code, max(reused), relogin)
    print(f"target: every run at most 20 s -> worst {worst:.2f} s: {'met' if worst <= 20 else 'NOT met'}")


if __name__ == "__main__":
    main()
