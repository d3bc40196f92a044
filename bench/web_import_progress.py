"""An import's progress bar in the web app (issue 35): how often it moves while a large CSV lands.

Runs the real local stack (`python -m chalicelib.local`) in its own process and Debian's Chromium
(Playwright), signs in as the admin `make run` prints, and imports a CSV of --rows rows from the
Imports page (#/imports) the way a person does: the file into the drop zone's input, the stream
chosen, Import. The page PUTs the file to its upload URL and then reads the import every second;
a sampler in the page (every 50 ms) notes each moment the import bar's value changes. Reported: the
largest and the median gap between two changes while rows land (from the first row counted to the
last), with the import's duration and rows per second. Usage:

    .venv/bin/python bench/web_import_progress.py [--rows 100000]
"""
from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from playwright.sync_api import sync_playwright  # noqa: E402

from chalicelib.adapters.browser_portal import CHROMIUM_ARGS  # noqa: E402
from chalicelib.local.launcher import StackProcess  # noqa: E402
from tests.support.chromium import CHROMIUM  # noqa: E402
from tests.support.web_app import printed, sign_in  # noqa: E402

SAMPLER = """() => {
  window.changes = [];
  setInterval(() => {
    const bar = document.getElementById('import-progress');
    if (!bar || !bar.hasAttribute('value')) return;
    const last = window.changes[window.changes.length - 1];
    if (!last || last.value !== bar.value) window.changes.push({at: performance.now(), value: bar.value});
  }, 50);
}"""


def watch_api(stack: StackProcess, changes: list[tuple[float, int]], stop: threading.Event) -> None:
    """What the service reports, apart from the page: processed_items read every 0.25 s."""
    while not stop.is_set():
        listed = stack.request("GET", "/data_streams/bench-bank/file_imports?limit=1").json()["data"]
        if listed and (not changes or changes[-1][1] != listed[0]["processed_items"]):
            changes.append((time.perf_counter(), listed[0]["processed_items"]))
        stop.wait(0.25)


def gaps_of(moments: list[float]) -> list[float]:
    return [b - a for a, b in zip(moments, moments[1:], strict=False)]


def write_csv(path: Path, rows: int) -> None:
    with path.open("w") as out:
        out.write("date,amount,external_id,description\n")
        for n in range(rows):
            out.write(f"2026-11-{1 + n % 28:02d},{n % 9000 + 1}.{n % 100:02d},bench-{n},row {n}\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--timeout", type=float, default=3600, help="seconds to wait for the import to end")
    args = parser.parse_args()

    workdir = Path(tempfile.mkdtemp(prefix="bench-web-import-"))
    stack = StackProcess(workdir / "data", api_key="rk_bench").start()
    try:
        created = stack.request("POST", "/data_streams", {"key": "bench-bank", "name": "Bench bank"})
        assert created.status_code == 201, created.text
        csv = workdir / "large.csv"
        write_csv(csv, args.rows)
        size = csv.stat().st_size
        email, password, url = printed(stack)
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
            page = browser.new_page()
            page.set_default_timeout(60_000)
            page.goto(url)
            sign_in(page, email, password)
            page.get_by_role("heading", name="Overview").wait_for()
            page.evaluate("() => { location.hash = '#/imports'; }")
            page.get_by_label("File to import").set_input_files(str(csv))
            page.get_by_label("Data stream", exact=True).select_option("bench-bank")
            page.evaluate(SAMPLER)
            reported: list[tuple[float, int]] = []
            stop = threading.Event()
            watcher = threading.Thread(target=watch_api, args=(stack, reported, stop), daemon=True)
            watcher.start()
            started = time.perf_counter()
            page.get_by_role("button", name="Import", exact=True).click()
            page.get_by_test_id("import-status").filter(has_text="completed").wait_for(timeout=args.timeout * 1000)
            wall = time.perf_counter() - started
            stop.set()
            watcher.join()
            changes = page.evaluate("() => window.changes")
            browser.close()
        job = stack.request("GET", "/data_streams/bench-bank/file_imports").json()["data"][0]
    finally:
        stack.stop()
        shutil.rmtree(workdir, ignore_errors=True)

    landing = [c for c in changes if c["value"] > 0]
    gaps = gaps_of([c["at"] / 1000 for c in landing])
    service = gaps_of([at for at, processed in reported if 0 < processed])
    landed = (landing[-1]["at"] - landing[0]["at"]) / 1000 if len(landing) > 1 else 0.0
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
          f"load average {os.getloadavg()[0]:.1f}")
    print(f"rows: {args.rows:,} ({size / 1024 / 1024:.1f} MB); status {job['status']}, "
          f"{job['successful_items']:,} imported, {job['failed_items']} failed")
    print(f"click to completed: {wall:.1f} s; rows landing (first to last count shown): {landed:.1f} s, "
          f"{args.rows / landed if landed else 0:,.0f} rows/s")
    print(f"bar changes while rows land: {len(landing)}")
    if gaps:
        print(f"gap between changes: largest {max(gaps):.2f} s, median {statistics.median(gaps):.2f} s, "
              f"over 2 s: {sum(g > 2 for g in gaps)} of {len(gaps)}")
    if service:
        print(f"the service's processed_items (read every 0.25 s): {len(service) + 1} changes, largest gap "
              f"{max(service):.2f} s, median {statistics.median(service):.2f} s, over 2 s: "
              f"{sum(g > 2 for g in service)} of {len(service)}")


if __name__ == "__main__":
    main()
