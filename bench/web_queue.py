"""The web app's exception queue with 10,000 open exceptions on the local stack: how long until its
first page (50 rows, with the count of the queue) is shown in Debian's headless Chromium, beside the
list request alone.

The local stack runs in its own process (as `make run`); 10,000 open exceptions are written with the
repository's item layout (stored totals and currency, as a refresh leaves them) for one
reconciliation. The admin `make run` prints signs in once. Measured, each `--runs` times:

- in the app: from setting `location.hash = "#/exceptions"` (from the overview) until the 50th row
  and the "10,000 exceptions" count are in the page;
- a reload of `#/exceptions`: from `page.reload()` until the same (the modules from the cache
  checked with the server, the session restored by its cookie, then the queue);
- the same with filters and an order (`status=open`, amount from 5.00, largest first);
- baseline: `GET /v1/reconciliation_exceptions?limit=50` over HTTP (the page's own request) with
  the API key and with the admin's id token (as the page sends it), and with the filters and order.

The issue's target: the first page in at most 1 s locally.

    .venv/bin/python bench/web_queue.py [--exceptions 10000] [--runs 10]
"""
from __future__ import annotations

import argparse
import os
import platform
import re
import shutil
import statistics
import sys
import tempfile
import time
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from chalicelib.adapters.dynamodb.reconciliation_exceptions import ExceptionRepository  # noqa: E402
from chalicelib.container import Container  # noqa: E402
from chalicelib.domain.reconciliation_exceptions import (  # noqa: E402
    ExceptionRecord,
    ExceptionStatus,
    ReconciliationException,
    totals,
)
from chalicelib.local.launcher import StackProcess  # noqa: E402
from chalicelib.local.stack import StackInfo  # noqa: E402
from chalicelib.settings import Settings  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
FILTERED = "status=open&min=5.00&sort=amount"
FILTERED_API = "status=open&amount_min=500&amount_decimal_places=2&sort=amount"
# The queue is drawn: the count of the queue for this very link and its 50th row are in the page.
DRAWN = """() => {
  const count = document.querySelector('[data-testid=exception-count]');
  return count !== null && count.dataset.for === location.hash && / exceptions?$/.test(count.textContent.trim())
    && document.querySelectorAll('table.exception-queue tbody tr').length === 50;
}"""
# Timed in the page itself (no round trip to Playwright): from setting the hash until the queue is
# drawn (checked each animation frame), and the list request's own time from the browser's resource
# timing (its start, and its start to the end of its answer).
IN_PAGE = """async (target) => {
  const began = performance.now();
  location.hash = target;
  const drawn = DRAWN;
  await new Promise((resolve) => { const frame = () => (drawn() ? resolve() : requestAnimationFrame(frame)); frame(); });
  const shown = performance.now() - began;
  const list = performance.getEntriesByType('resource')
    .filter((e) => e.name.includes('reconciliation_exceptions?') && e.startTime >= began).pop();
  return [shown, list.responseEnd - list.startTime, list.startTime - began];
}""".replace("DRAWN", DRAWN)
# Installed in every new document (before the app's own scripts): the time, from the navigation's start,
# of the first animation frame in which the queue is drawn. A reload measured from Playwright's side
# also holds the old page's unload, the wait for the load event and Playwright's own polling.
SHOWN_SINCE_NAVIGATION = """(() => {
  const drawn = DRAWN;
  const frame = () => { if (drawn()) { window.__queueShownAt = performance.now(); } else { requestAnimationFrame(frame); } };
  requestAnimationFrame(frame);
})();""".replace("DRAWN", DRAWN)
# After a reload, from the new page's resource timing (its origin: the navigation's start): when the
# last of the app's modules was in, when the session's refresh started and ended, and when the queue's
# list request started and ended.
RELOAD_PARTS = """() => {
  const entries = performance.getEntriesByType('resource');
  const modules = entries.filter((e) => /\\/app\\/[^/?]+\\.m?js$/.test(e.name));
  const refresh = entries.filter((e) => e.name.endsWith('/session/refresh'))[0];
  const list = entries.filter((e) => e.name.includes('reconciliation_exceptions?')).pop();
  return [Math.max(...modules.map((e) => e.responseEnd)), refresh.startTime, refresh.responseEnd,
          list.startTime, list.responseEnd];
}"""


def fill(container: Container, count: int, stream_keys: list[str], stream_ids: list[int], reconciliation_id: int) -> None:
    now = datetime.now(UTC)
    today = date.today()
    items = []
    for n in range(count):
        records = [ExceptionRecord(n * 10 + i, 100 + (n * 37 + i * 7) % 100_000, "credit" if i % 3 else "debit",
                                   (today - timedelta(days=5 + (n + i) % 90)).isoformat(), "USD")
                   for i in range(1 + n % 7)]
        exception = ReconciliationException(
            environment="local", id=100_000 + n, reconciliation_id=reconciliation_id,
            data_stream_key=stream_keys[n % 2], data_stream_id=stream_ids[n % 2],
            title=f"Bench {n}: unmatched records", description=f"{len(records)} records",
            status=ExceptionStatus.OPEN, created_at=now, updated_at=now, opened_at=now, totals=totals(records),
            currency="USD")
        items.append(ExceptionRepository._to_item(exception))
    container.table.batch_write(puts=items)


def summary(times: list[float]) -> str:
    ordered = sorted(times)
    return (f"{statistics.median(ordered):.0f} ms | {ordered[max(0, int(len(ordered) * 0.95) - 1)]:.0f} ms | "
            f"{ordered[0]:.0f}–{ordered[-1]:.0f} ms")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--exceptions", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    from chalicelib.adapters.browser_portal import CHROMIUM_ARGS

    workdir = Path(tempfile.mkdtemp(prefix="recon-bench-webq-"))
    stack = StackProcess(workdir / "data", api_key="rk_bench").start()
    try:
        container = Container(StackInfo(**stack.stack_info()).settings(Settings(local_mode=True)))
        streams = [stack.request("POST", "/data_streams", {"key": key, "name": key.title()}).json()
                   for key in ("bench-bank", "bench-ledger")]
        reconciliation = stack.request("POST", "/reconciliations", {
            "name": "Bench", "run_type": "batch", "side_a_stream_keys": ["bench-bank"],
            "side_b_stream_keys": ["bench-ledger"]}).json()
        started = time.perf_counter()
        fill(container, args.exceptions, [s["key"] for s in streams], [s["id"] for s in streams], reconciliation["id"])
        filled = time.perf_counter() - started
        expected = f"{args.exceptions:,} exceptions"

        log = stack.log_path.read_text()
        [(email, password)] = re.findall(r"Admin sign-in \(local user pool\):\s+(\S+)\s+/\s+(\S+)", log)[-1:]
        [url] = re.findall(r"Web app \(sign in there as the admin\):\s+(\S+)", log)[-1:]
        signed_in = stack.request("POST", "/session", {"email": email, "password": password}, key=None,
                                  headers={"Origin": stack.url.rsplit("/v1", 1)[0]})
        assert signed_in.status_code == 200, signed_in.text
        bearer = {"Authorization": f"Bearer {signed_in.json()['id_token']}"}

        api_times: dict[str, list[float]] = {"plain": [], "token": [], "filtered": []}
        for _ in range(args.runs):
            for name, extra, auth in (("plain", "", {}), ("token", "", {"key": None, "headers": bearer}),
                                      ("filtered", "&" + FILTERED_API, {})):
                began = time.perf_counter()
                answer = stack.request("GET", f"/reconciliation_exceptions?limit=50{extra}", **auth)
                api_times[name].append((time.perf_counter() - began) * 1000)
                assert answer.status_code == 200 and len(answer.json()["data"]) == 50, answer.text[:300]
        filtered_total = answer.json()["total"]
        page_times: dict[str, list[float]] = {"navigate": [], "in page": [], "fetch": [], "fetch start": [],
                                              "reload": [], "reload in page": [], "filtered": [],
                                              "filtered in page": [], "filtered fetch": [], "modules in": [], "refresh start": [],
                                              "refresh end": [], "list start": [], "list end": []}
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
            page = browser.new_context().new_page()
            page.set_default_timeout(60_000)
            page.add_init_script(SHOWN_SINCE_NAVIGATION)
            page.goto(url)
            page.get_by_label("Email").fill(email)
            page.get_by_label("Password", exact=True).fill(password)
            page.get_by_role("button", name="Sign in").click()
            page.get_by_role("heading", name="Overview").wait_for()
            rows = page.locator("table.exception-queue tbody tr")
            count = page.get_by_test_id("exception-count")

            def at_overview() -> None:
                # The overview reads every exception's summary: its answer is waited for, so that the
                # queue's request is not timed while the server still works on the overview's.
                page.evaluate("() => { location.hash = '#/overview'; }")
                page.get_by_role("heading", name="Overview").wait_for()
                page.wait_for_function("() => !document.querySelector('main').textContent.includes('Loading the overview')")

            def shown(total: str) -> None:
                rows.nth(49).wait_for()
                count.filter(has_text=total).wait_for()

            for _ in range(args.runs + 1):  # the first of each is a warm-up, left out below (del times[0])
                at_overview()
                began = time.perf_counter()
                in_page, fetched, started_after = page.evaluate(IN_PAGE, "#/exceptions")
                shown(expected)
                page_times["navigate"].append((time.perf_counter() - began) * 1000)
                page_times["in page"].append(in_page)
                page_times["fetch"].append(fetched)
                page_times["fetch start"].append(started_after)

                began = time.perf_counter()
                page.reload()
                shown(expected)
                page_times["reload"].append((time.perf_counter() - began) * 1000)
                page_times["reload in page"].append(page.evaluate("() => window.__queueShownAt"))
                for name, value in zip(("modules in", "refresh start", "refresh end", "list start", "list end"),
                                       page.evaluate(RELOAD_PARTS), strict=True):
                    page_times[name].append(value)

                at_overview()
                began = time.perf_counter()
                in_page, fetched, _ = page.evaluate(IN_PAGE, f"#/exceptions?{FILTERED}")
                shown(f"{filtered_total:,} exception")
                page_times["filtered"].append((time.perf_counter() - began) * 1000)
                page_times["filtered in page"].append(in_page)
                page_times["filtered fetch"].append(fetched)
            browser.close()
        for times in page_times.values():
            del times[0]

        cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                    if line.startswith("model name")), platform.processor())
        print(f"machine: {os.cpu_count()} vCPU {cpu} ({platform.machine()}), {platform.system()} {platform.release()}, "
              f"python {platform.python_version()}; {args.exceptions:,} open exceptions written in {filled:.1f} s; "
              f"{args.runs} runs each\n")
        print("| what | median | p95 | range |")
        print("|---|---|---|---|")
        print(f"| baseline: GET /reconciliation_exceptions?limit=50 (the page's request, over HTTP) | {summary(api_times['plain'])} |")
        print(f"| baseline: the same with the person's id token (as the page sends it) | {summary(api_times['token'])} |")
        print(f"| baseline: the same, {FILTERED_API} ({filtered_total:,} kept) | {summary(api_times['filtered'])} |")
        print(f"| web app: `#/exceptions` from the overview until 50 rows and the count show | {summary(page_times['navigate'])} |")
        print(f"| ... the same timed in the page (each animation frame) | {summary(page_times['in page'])} |")
        print(f"| ... of which the list request, its start to its answer's end (resource timing) | {summary(page_times['fetch'])} |")
        print(f"| ... and from the hash's change to the list request's start | {summary(page_times['fetch start'])} |")
        print(f"| web app: a reload of `#/exceptions` (session restored by its cookie) until the same | {summary(page_times['reload'])} |")
        print(f"| ... the same timed in the page, from the navigation's start (each animation frame) | {summary(page_times['reload in page'])} |")
        print(f"| ... of which, from the navigation's start: the app's modules all in | {summary(page_times['modules in'])} |")
        print(f"| ... the session's refresh asked | {summary(page_times['refresh start'])} |")
        print(f"| ... the session's refresh answered | {summary(page_times['refresh end'])} |")
        print(f"| ... the list request asked | {summary(page_times['list start'])} |")
        print(f"| ... the list request answered | {summary(page_times['list end'])} |")
        print(f"| web app: `#/exceptions?{FILTERED}` from the overview | {summary(page_times['filtered'])} |")
        print(f"| ... the same timed in the page (each animation frame) | {summary(page_times['filtered in page'])} |")
        print(f"| ... of which the list request, its start to its answer's end (resource timing) | {summary(page_times['filtered fetch'])} |")
    finally:
        stack.stop()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
