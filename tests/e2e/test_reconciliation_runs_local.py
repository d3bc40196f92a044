"""Runs and matches on the local stack: the run state machine in the local runtime over HTTP, and
races on dynalite, whose conditional writes are atomic like DynamoDB's."""
import threading
import time
import uuid

from chalicelib.container import Container
from chalicelib.domain.errors import Conflict
from chalicelib.local.stack import StackInfo
from chalicelib.services.matches import create_manual_match
from chalicelib.settings import Settings


def _streams_and_reconciliation(stack, run_type="batch"):
    suffix = uuid.uuid4().hex[:8]
    bank, ledger = f"bank-{suffix}", f"ledger-{suffix}"
    for key in (bank, ledger):
        assert stack.request("POST", "/data_streams", {"key": key, "name": key}).status_code == 201
    reconciliation = stack.request("POST", "/reconciliations", {
        "name": f"Recon {suffix}", "run_type": run_type, "side_a_stream_keys": [bank],
        "side_b_stream_keys": [ledger]}).json()
    rule = stack.request("POST", f"/reconciliations/{reconciliation['id']}/rules", {
        "name": "Amount, 3 days", "conditions": [{"field": "amount", "operator": "equals"},
                                                 {"field": "date", "operator": "within", "days": 3}]})
    assert rule.status_code == 201, rule.json()
    return bank, ledger, reconciliation


def _ingest(stack, items, timeout=60):
    summary = stack.request("POST", "/records/bulk", {"records": items}).json()
    deadline = time.monotonic() + timeout
    while True:
        body = stack.request("GET", f"/bulk_requests/{summary['id']}").json()
        if body["status"] == "completed":
            return [r["record_id"] for r in body["results"]]
        assert time.monotonic() < deadline, body
        time.sleep(0.2)


def _wait_run(stack, reconciliation_id, run_id, timeout=60):
    deadline = time.monotonic() + timeout
    while True:
        run = stack.request("GET", f"/reconciliations/{reconciliation_id}/runs/{run_id}").json()
        if run["status"] in ("completed", "failed"):
            return run
        assert time.monotonic() < deadline, run
        time.sleep(0.2)


def _ingest_half_matched(stack, bank: str, ledger: str) -> None:
    """300 bank credits of 1.00-3.99 and a ledger debit two days later for every other one: 150 pairs."""
    _ingest(stack, [{"date": "2026-11-02", "data_stream_key": bank, "amount": 100 + n, "direction": "credit"}
                    for n in range(300)])
    _ingest(stack, [{"date": "2026-11-04", "data_stream_key": ledger, "amount": 100 + n, "direction": "debit"}
                    for n in range(0, 300, 2)])


def test_a_batch_run_goes_through_the_state_machine_of_the_local_stack(stack):
    bank, ledger, reconciliation = _streams_and_reconciliation(stack)
    _ingest_half_matched(stack, bank, ledger)

    started = stack.request("POST", f"/reconciliations/{reconciliation['id']}/runs")
    assert started.status_code == 202 and started.json()["status"] in ("pending", "running", "completed")
    run = _wait_run(stack, reconciliation["id"], started.json()["id"])

    assert (run["status"], run["total_records"], run["matched_records"]) == ("completed", 450, 300)
    assert run["rule_summary"]["unmatched"] == {"side_a": 150, "side_b": 0}
    matches, cursor = [], None
    while True:
        page = stack.request("GET", "/reconciliation_matches", params={
            "reconciliation_id": reconciliation["id"], "limit": 200, **({"cursor": cursor} if cursor else {})}).json()
        matches += page["data"]
        cursor = page["next_cursor"]
        if not cursor:
            break
    assert len(matches) == 150
    reconciled = stack.request("GET", "/records", params={"data_stream_key": ledger, "status": "reconciled",
                                                          "limit": 200}).json()["data"]
    assert len(reconciled) == 150


def test_two_people_matching_the_same_record_at_once_make_one_match(stack):
    bank, ledger, reconciliation = _streams_and_reconciliation(stack)
    [shared] = _ingest(stack, [{"date": "2026-11-02", "data_stream_key": bank, "amount": 500, "direction": "credit"}])
    others = _ingest(stack, [{"date": "2026-11-02", "data_stream_key": ledger, "amount": 500, "direction": "debit"}
                             for _ in range(6)])
    container = Container(StackInfo(**stack.stack_info()).settings(Settings(local_mode=True)))
    barrier = threading.Barrier(len(others))
    outcomes: list[str] = []

    def match_with(other):
        barrier.wait()
        try:
            create_manual_match(container.ports, "local", reconciliation["id"], [shared, other], False, None)
            outcomes.append("matched")
        except Conflict:
            outcomes.append("conflict")

    threads = [threading.Thread(target=match_with, args=(other,)) for other in others]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert sorted(outcomes) == ["conflict"] * 5 + ["matched"]
    [match] = stack.request("GET", "/reconciliation_matches",
                            params={"reconciliation_id": reconciliation["id"]}).json()["data"]
    detail = stack.request("GET", f"/reconciliation_matches/{match['id']}").json()
    partner = next(r["id"] for r in detail["records"] if r["side"] == "b")
    statuses = {o: stack.request("GET", f"/records/{o}").json()["status"] for o in others}
    assert statuses == {o: "reconciled" if o == partner else "unreconciled" for o in others}


def test_an_exception_is_investigated_on_the_local_stacks_queue_and_its_suggestion_accepted(stack):
    from datetime import date, timedelta

    bank, ledger, reconciliation = _streams_and_reconciliation(stack)
    day = lambda n: (date.today() - timedelta(days=n)).isoformat()  # noqa: E731
    [mine] = _ingest(stack, [{"date": day(20), "data_stream_key": bank, "amount": 125000, "direction": "credit",
                              "description": "ACME PAYOUT", "metadata": {"reference": "INV-4411"}}])
    [theirs] = _ingest(stack, [{"date": day(14), "data_stream_key": ledger, "amount": 125000, "direction": "debit",
                                "description": "Acme payout", "metadata": {"reference": "INV-4411"}}])
    run = stack.request("POST", f"/reconciliations/{reconciliation['id']}/runs").json()
    assert _wait_run(stack, reconciliation["id"], run["id"])["matched_records"] == 0  # 6 days apart
    [exception] = stack.request("GET", "/reconciliation_exceptions",
                                params={"reconciliation_id": reconciliation["id"], "data_stream_key": bank}).json()["data"]

    started = stack.request("POST", f"/reconciliation_exceptions/{exception['id']}/investigations")
    assert started.status_code == 202
    deadline = time.monotonic() + 60
    while True:
        investigation = stack.request("GET", f"/reconciliation_exceptions/{exception['id']}").json()["investigation"]
        if investigation["status"] in ("completed", "failed") or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert investigation["status"] == "completed" and investigation["suggested_record_ids"] == [theirs]
    assert investigation["confidence_score"] >= 0.9

    accepted = stack.request("POST", f"/reconciliation_exceptions/{exception['id']}/investigations/"
                                     f"{investigation['id']}/accept")
    assert accepted.status_code == 201, accepted.json()
    assert sorted(r["id"] for r in accepted.json()["records"]) == sorted([mine, theirs])
    assert stack.request("GET", f"/reconciliation_exceptions/{exception['id']}").json()["status"] == "resolved"
