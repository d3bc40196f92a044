"""The closing fence covers every writer that can change a closed period (docs/period-close.md):
each test pauses one writer between its guard (the read of the closed periods) and its write, closes
the period meanwhile, and shows the close waits for the write and counts what it left; a writer
reaching the guard while the fence is up is refused (a request: 409) or waits for the close and is
then refused by it (a worker's unit). Record deletes, reconciliation deletes (requests), a bulk
action's items, a run's persist and an import chunk (workers). Threads, and polls for the state
they wait on (the fence's mark), no fixed sleeps."""
from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import date

import pytest

from chalicelib.adapters.dynamodb import keys
from chalicelib.domain.errors import NotFound
from chalicelib.domain.period_closes import Period
from chalicelib.services import audit
from chalicelib.services import period_closes as close_service
from tests.integration.conftest import record

NOVEMBER = Period(date(2026, 11, 1), date(2026, 11, 30))
CLOSED = "inside the closed period 2026-11-01..2026-11-30"
WAIT = 30


class Pause:
    """Wraps a function: its first call stops after (or before) the real one until released."""

    def __init__(self, real: Callable, after: bool = True) -> None:
        self.real, self.after = real, after
        self.passed, self.release = threading.Event(), threading.Event()

    def __call__(self, *args, **kwargs):
        result = self.real(*args, **kwargs) if self.after else None
        if not self.passed.is_set():
            self.passed.set()
            assert self.release.wait(WAIT)
        return result if self.after else self.real(*args, **kwargs)


def close_november(services, rid):
    return close_service.close(services.ports, "acme", rid, NOVEMBER, "November", {}, "user:1")


def fence_up(services, rid) -> None:
    deadline = time.monotonic() + WAIT
    while "closing_since" not in (services.table.get(keys.closed_periods("acme", rid)) or {}):
        assert time.monotonic() < deadline, "the close never put its fence up"
        time.sleep(0.02)


@pytest.fixture
def close_waits(services, monkeypatch):
    """`close_waits(closing)`: polls until the close either saw a writer registered (it waits for
    it) or ended; then the paused writer may go on. A close that saw none would count first."""
    seen: list[int] = []
    real = services.ports.period_closes.live_writers

    def watched(*args, **kwargs):
        found = real(*args, **kwargs)
        seen.append(found)
        return found

    monkeypatch.setattr(services.ports.period_closes, "live_writers", watched)

    def wait(closing) -> None:
        deadline = time.monotonic() + WAIT
        while not any(seen) and not closing.done():
            assert time.monotonic() < deadline, "the close neither waited nor ended"
            time.sleep(0.02)
    return wait


def as_request(services, work: Callable):
    """As the middleware runs a request: its guards behind the closing fence."""
    with close_service.fencing(services.ports), audit.acting_as("api_key:1"), audit.collecting_notes():
        return work()


def unmatched(close) -> int:
    return sum(m.count for m in close.unmatched)


def test_a_close_waits_for_a_record_delete_that_passed_its_guard(api, services, ingest, reconciliation, monkeypatch,
                                                                 close_waits):
    from chalicelib.services import records as record_service
    rid = reconciliation["id"]
    gone, other = ingest(record("bank", 1, 700, "2026-11-02"), record("bank", 2, 800, "2026-11-03"))
    ingest(record("ledger", 1, 900, "2026-11-04"))
    pause = Pause(services.ports.records.mark_deleting, after=False)  # after the guard, before the delete
    monkeypatch.setattr(services.ports.records, "mark_deleting", pause)

    with ThreadPoolExecutor(2) as pool:
        deleting = pool.submit(as_request, services,
                               lambda: record_service.delete_record(services.ports, "acme", gone))
        assert pause.passed.wait(WAIT)
        closing = pool.submit(close_november, services, rid)
        fence_up(services, rid)
        refused = api.delete(f"/v1/records/{other}")  # at the guard while the fence is up
        assert refused.status_code == 409 and "being closed right now" in refused.json_body["message"]
        close_waits(closing)
        pause.release.set()
        deleting.result(timeout=WAIT)
        closed = closing.result(timeout=WAIT)

    assert unmatched(closed) == 2  # counted after the delete landed: bank 2 and ledger 1
    assert api.get(f"/v1/records/{gone}").status_code == 404
    refused = api.delete(f"/v1/records/{other}")
    assert refused.status_code == 409 and CLOSED in refused.json_body["message"]


def test_a_close_waits_for_a_reconciliation_delete_and_then_finds_it_gone(api, services, ingest, reconciliation,
                                                                        monkeypatch, close_waits):
    from chalicelib.services import reconciliations as reconciliation_service
    rid = reconciliation["id"]
    ingest(record("bank", 1, 700, "2026-11-02"))
    pause = Pause(services.ports.reconciliations.mark_deleting, after=False)
    monkeypatch.setattr(services.ports.reconciliations, "mark_deleting", pause)

    with ThreadPoolExecutor(2) as pool:
        deleting = pool.submit(as_request, services, lambda: reconciliation_service.delete_reconciliation(
            services.ports, "acme", rid))
        assert pause.passed.wait(WAIT)
        closing = pool.submit(close_november, services, rid)
        fence_up(services, rid)
        close_waits(closing)
        pause.release.set()
        deleting.result(timeout=WAIT)
        with pytest.raises(NotFound):  # no close of a reconciliation deleted meanwhile
            closing.result(timeout=WAIT)

    assert api.get(f"/v1/reconciliations/{rid}").status_code == 404
    assert close_service.closed_of(services.ports, "acme", rid) == []


def test_an_unknown_reconciliation_delete_writes_no_fence_item(api, services):
    assert api.delete("/v1/reconciliations/987654").status_code == 404
    assert services.table.get(keys.closed_periods("acme", 987654)) is None


@pytest.fixture
def proposed(api, worker, ingest, reconciliation):
    """Two proposed matches dated in November (a rule that does not confirm)."""
    from tests.integration.test_period_closes import run
    rid = reconciliation["id"]
    assert api.post(f"/v1/reconciliations/{rid}/rules", {
        "name": "amount", "auto_confirm": False,
        "conditions": [{"field": "amount", "operator": "equals"}]}).status_code == 201
    ingest(record("bank", 1, 700, "2026-11-02"), record("bank", 2, 800, "2026-11-03"))
    ingest(record("ledger", 1, 700, "2026-11-02"), record("ledger", 2, 800, "2026-11-03"))
    run(api, worker, rid)
    found = api.get(f"/v1/reconciliation_matches?reconciliation_id={rid}&status=proposed").json_body["data"]
    assert len(found) == 2
    return sorted(m["id"] for m in found)


def test_a_close_waits_for_a_bulk_item_that_passed_its_guard_and_a_later_item_waits_then_is_refused(
        api, services, worker, reconciliation, proposed, monkeypatch, close_waits):
    from chalicelib.services import bulk_actions as bulk_service
    rid = reconciliation["id"]
    first, second = proposed
    pause = Pause(close_service.refuse_match)  # the item's guard passed; its reject not yet written
    monkeypatch.setattr(close_service, "refuse_match", pause)
    one = api.post("/v1/reconciliation_matches/bulk", {"action": "reject", "ids": [first]})
    assert one.status_code == 202, one.json_body

    with ThreadPoolExecutor(3) as pool:
        working = pool.submit(worker.drain)
        assert pause.passed.wait(WAIT)
        closing = pool.submit(close_november, services, rid)
        fence_up(services, rid)
        two = api.post("/v1/reconciliation_matches/bulk", {"action": "reject", "ids": [second]})
        assert two.status_code == 202, two.json_body
        waiting = pool.submit(bulk_service.process, services.ports, "acme", two.json_body["id"])
        close_waits(closing)
        pause.release.set()
        working.result(timeout=WAIT)
        closed = closing.result(timeout=WAIT)
        waiting.result(timeout=WAIT * 4)  # it waited at the fence (a worker waits; a request is refused)
    worker.drain()

    # The close counted after the first reject: its two records are unmatched, the second pair proposed
    assert unmatched(closed) == 2
    [done] = api.get(one.json_body["url"]).json_body["results"]
    assert done["status"] == "succeeded", done
    [refused] = api.get(two.json_body["url"]).json_body["results"]
    assert refused["status"] == "failed" and CLOSED in refused["error"], refused


def test_a_close_waits_for_a_run_persist_that_passed_its_guard(api, services, worker, ingest, reconciliation,
                                                                monkeypatch, close_waits):
    rid = reconciliation["id"]
    assert api.post(f"/v1/reconciliations/{rid}/rules", {
        "name": "amount", "conditions": [{"field": "amount", "operator": "equals"}]}).status_code == 201
    ingest(record("bank", 1, 700, "2026-11-02"), record("bank", 2, 800, "2026-11-03"))
    ingest(record("ledger", 1, 700, "2026-11-02"), record("ledger", 3, 999, "2026-11-05"))
    pause = Pause(close_service.planned_outside_closed)  # the persist's guard passed; its matches not written
    monkeypatch.setattr(close_service, "planned_outside_closed", pause)

    def start_and_work():  # a worker, not a request: the tests' state machine runs inside its start
        from chalicelib.services import reconciliation_runs
        run = reconciliation_runs.start_run(services.ports, "acme", rid)
        worker.drain()
        return run.id

    with ThreadPoolExecutor(2) as pool:
        working = pool.submit(start_and_work)
        assert pause.passed.wait(WAIT)
        closing = pool.submit(close_november, services, rid)
        fence_up(services, rid)
        close_waits(closing)
        pause.release.set()
        run_id = working.result(timeout=WAIT)
        closed = closing.result(timeout=WAIT)

    run = api.get(f"/v1/reconciliations/{rid}/runs/{run_id}").json_body
    assert run["status"] == "completed" and run["matched_records"] == 2, run
    assert unmatched(closed) == 2  # after the match landed: bank 2 and ledger 3 alone


def test_a_close_waits_for_an_import_chunk_that_passed_its_guard_and_counts_its_records(
        api, services, worker, ingest, reconciliation, monkeypatch, close_waits):
    from chalicelib.services.ingestion import chunk
    rid = reconciliation["id"]
    ingest(record("ledger", 1, 900, "2026-11-04"))
    pause = Pause(chunk.write_claimed, after=False)  # the chunk's guard passed; its records not written
    monkeypatch.setattr(chunk, "write_claimed", pause)
    imported = api.post("/v1/records/bulk", {"records": [record("bank", 1, 700, "2026-11-02"),
                                                         record("bank", 2, 800, "2026-10-30")]})
    assert imported.status_code == 202, imported.json_body

    with ThreadPoolExecutor(2) as pool:
        working = pool.submit(worker.drain)
        assert pause.passed.wait(WAIT)
        closing = pool.submit(close_november, services, rid)
        fence_up(services, rid)
        close_waits(closing)
        pause.release.set()
        working.result(timeout=WAIT)
        closed = closing.result(timeout=WAIT)

    results = api.get(imported.json_body["url"]).json_body["results"]
    assert [r["status"] for r in results] == ["successful", "successful"], results
    assert unmatched(closed) == 2  # the imported November record counted, with ledger 1
    late = api.post("/v1/records/bulk", {"records": [record("bank", 3, 100, "2026-11-20")]})
    worker.drain()
    [refused] = api.get(late.json_body["url"]).json_body["results"]
    assert refused["status"] == "failed" and CLOSED in refused["error"], refused


def test_a_close_during_an_import_lands_between_its_chunks_and_the_next_chunk_sees_it(
        api, services, worker, reconciliation, monkeypatch, close_waits):
    """A close that waits for a chunk being written is not held up by the chunk after it: that one's
    guard waits at the fence, the written chunk leaves as soon as its records are in (its write's
    thread, not the next save), the close lands, and the next chunk's November row is refused by it."""
    from chalicelib.services.ingestion import chunk
    rid = reconciliation["id"]
    rows = services.ports.limits.bulk_chunk_rows  # a chunk's
    pause = Pause(chunk.write_claimed, after=False)  # the first chunk's records not written yet
    monkeypatch.setattr(chunk, "write_claimed", pause)
    guards, up, real_guard = [], threading.Event(), close_service.failing_closed

    def second_guard_once_the_fence_is_up(*args, **kwargs):  # the second chunk's guard comes after the fence
        guards.append(args)
        if len(guards) == 2:
            assert up.wait(WAIT)
        return real_guard(*args, **kwargs)

    monkeypatch.setattr(close_service, "failing_closed", second_guard_once_the_fence_is_up)
    first = [record("bank", n, 100 + n, "2026-10-15") for n in range(rows - 1)]
    imported = api.post("/v1/records/bulk", {"records": [*first, record("bank", 9001, 700, "2026-11-02"),
                                                         record("bank", 9002, 800, "2026-11-03")]})
    assert imported.status_code == 202, imported.json_body

    with ThreadPoolExecutor(2) as pool:
        working = pool.submit(worker.drain)
        assert pause.passed.wait(WAIT)
        closing = pool.submit(close_november, services, rid)
        fence_up(services, rid)
        up.set()
        close_waits(closing)
        pause.release.set()
        closed = closing.result(timeout=WAIT)  # not 409: the second chunk did not hold the first's registration
        working.result(timeout=WAIT * 4)

    assert unmatched(closed) == 1  # the first chunk's November record, written before the close counted
    results = {r["index"]: r for r in api.get(imported.json_body["url"]).json_body["results"]}
    assert results[rows - 1]["status"] == "successful"
    late = results[rows]
    assert late["status"] == "failed" and CLOSED in late["error"], late


def test_an_import_chunk_waiting_for_its_streams_writer_lease_holds_no_place_behind_the_fence(
        api, services, worker, reconciliation, monkeypatch):
    """Another job holds the stream's writer lease (and could be waiting at the fence itself): the
    chunk waits for the lease before its guard registers it, so a close meanwhile lands at once
    instead of waiting for a chunk that waits for a job that waits for the close."""
    from datetime import timedelta
    rid = reconciliation["id"]
    records = services.ports.records
    assert records.take_writer_lease("acme", "bank", "job:other", timedelta(minutes=5))
    refused, real_take = threading.Event(), records.take_writer_lease

    def take(environment, stream_key, holder, lease):
        taken = real_take(environment, stream_key, holder, lease)
        if not taken and holder != "job:other":
            refused.set()
        return taken

    monkeypatch.setattr(records, "take_writer_lease", take)
    imported = api.post("/v1/records/bulk", {"records": [record("bank", 1, 700, "2026-11-02")]})
    assert imported.status_code == 202, imported.json_body

    with ThreadPoolExecutor(1) as pool:
        working = pool.submit(worker.drain)
        assert refused.wait(WAIT)  # the chunk waits for the lease
        closed = close_november(services, rid)  # lands: no writer registered behind the fence
        records.release_writer_lease("acme", "bank", "job:other")
        working.result(timeout=WAIT * 4)

    assert closed.status.value == "closed"
    [result] = api.get(imported.json_body["url"]).json_body["results"]
    assert result["status"] == "failed" and CLOSED in result["error"], result  # its guard read the close
