"""A run killed at each step of its persist protocol, on moto (the real DynamoDB wire): members,
record claims, commit markers, the chunk's count; and an undo killed part-way.

With the run's working files gone, the sweeper's restart finds them lost: the state machine
fails the run at once (no retry), the fail phase undoes from the table alone, the slot is free
for a new run, and no record is claimed unless a committed match holds it. With the files kept,
the restart finishes the run and every record is in exactly one match."""
from collections import Counter
from dataclasses import dataclass, replace
from datetime import date, timedelta

import pytest

from chalicelib.domain.clock import utc_now
from chalicelib.domain.errors import Conflict
from chalicelib.domain.period_closes import Period
from chalicelib.domain.records import RecordStatus
from chalicelib.services import period_closes as close_service
from chalicelib.services.reconciliation_runs import give_up, load, match, persist, start_run, sweep
from tests.integration.conftest import record
from tests.support.crashes import Dies, Killed, one_by_one
from tests.support.worlds import world_of_api

ENV = "acme"
RECORDS = 30           # a side: 30 matches of one record each side
CHUNK_RECORDS = 12     # 6 matches a chunk, 5 chunks (what each crash point needs, at 30 a side, not 50)
MATCHES_A_CHUNK = CHUNK_RECORDS // 2
CHUNKS_BEFORE = 2      # written whole before the one that dies
RULE = {"name": "Amount", "priority": 1, "cardinality": "one_to_one",
        "conditions": [{"field": "amount", "operator": "equals"}]}


# Where persist dies in its chunk: (port, method, call, half the batch written first).
CRASH_POINTS = {
    "after the members": ("claims", "claim_together", 1, False),
    "after some transactions": ("claims", "claim_together", 1, True),  # half the chunk's matches claimed whole
    # claimed one by one (claim_record is where claims are not made in transactions): 7 of 12, a match half claimed
    "after some claims": ("claims", "claim_record", 8, False),
    "after all claims": ("matches", "commit_many", 1, False),
    "after part of the commit": ("matches", "commit_many", 1, True),
    "after the commit": ("runs", "save_chunk", 1, False),
}


class NoExecutions:
    """Run workflows that start nothing: the test calls the phases itself."""

    def start(self, execution_name, payload):
        pass


class CountedReads:
    """The run files, counting the frames read (a retried persist would read again)."""

    def __init__(self, run_files) -> None:
        self._run_files, self.reads = run_files, 0

    def __getattr__(self, name):
        return getattr(self._run_files, name)

    def read_frame(self, *args, **kwargs):
        self.reads += 1
        return self._run_files.read_frame(*args, **kwargs)


@dataclass
class Crashed:
    run_id: int
    reconciliation_id: int
    record_ids: list[int]


@pytest.fixture(params=[True, False], ids=["members carried", "member items"])
def crash(request, api, services, ingest, reconciliation):
    """Kill a run in its third chunk at a crash point: load, match and two chunks done (built once
    a process, restored after), then a persist call that dies (Killed). The dying call's matches carry
    their members (journaled first), or have member items (as a deployed stage writes them until
    every function reads both: settings.carry_match_members)."""
    ports = replace(services.ports, limits=replace(services.ports.limits, chunk_records=CHUNK_RECORDS),
                    run_workflows=NoExecutions())

    def two_chunks_persisted() -> tuple[int, list[int]]:
        assert api.post(f"/v1/reconciliations/{reconciliation['id']}/rules", RULE).status_code == 201
        record_ids = ingest(*[record("bank", n, 1000 + n) for n in range(RECORDS)])
        record_ids += ingest(*[record("ledger", n, 1000 + n) for n in range(RECORDS)])
        run = start_run(ports, ENV, reconciliation["id"])
        load(ports, ENV, run.id)
        match(ports, ENV, run.id)
        for _ in range(CHUNKS_BEFORE):
            assert persist(ports, ENV, run.id) == "persist"
        return run.id, record_ids
    run_id, record_ids = world_of_api("test_run_crash_points.two_chunks_persisted", api, two_chunks_persisted)

    def crash(point: str) -> Crashed:
        port, method, n, half = CRASH_POINTS[point]
        carrying = replace(ports, limits=replace(ports.limits, carry_match_members=request.param))
        if method == "claim_record":
            carrying = replace(carrying, claims=one_by_one(carrying.claims))
        dying = replace(carrying, **{port: Dies(getattr(carrying, port), method, n, half)})
        with pytest.raises(Killed):
            persist(dying, ENV, run_id)
        if point == "after some transactions":  # the dying chunk's first half of matches hold their records
            held = [h for h in services.claims.held_records(ENV, record_ids) if h.match_in(reconciliation["id"])]
            assert len(held) == CHUNKS_BEFORE * CHUNK_RECORDS + MATCHES_A_CHUNK // 2 * 2
        return Crashed(run_id, reconciliation["id"], record_ids)
    return crash


def lose_files(services, run_id: int) -> None:
    """Every working file of the run is gone (expired, deleted)."""
    s3, bucket = services.aws.s3, services.settings.bucket_name
    listed = s3.list_objects_v2(Bucket=bucket, Prefix=f"runs/{ENV}/{run_id}/").get("Contents", [])
    assert {o["Key"].rsplit("/", 1)[-1].split("-")[0] for o in listed} >= {"matches", "members"}
    for o in listed:
        s3.delete_object(Bucket=bucket, Key=o["Key"])


def sweep_later(services) -> None:
    """The sweeper, once the run has made no progress for long: it starts the state machine again."""
    assert sweep(services.ports, now=utc_now() + timedelta(minutes=80))["restarted"] == 1


def assert_every_claim_is_a_committed_match(services, crashed: Crashed) -> list[int]:
    """No record holds a claim here (its match attribute, `matched_in`, a matched status) unless a
    committed match holds it, and every committed match's records hold it; an uncommitted match
    of the run has no member left. Returns the records of the committed matches, with repeats."""
    recon = crashed.reconciliation_id
    run = services.runs.get(ENV, crashed.run_id)
    block = range(run.first_match_id, run.first_match_id + run.matches_count)
    committed = {m.id for m in services.matches.list_page(ENV, recon, 1000, None)[0]}
    assert not services.matches.existing_ids(ENV, block) - committed
    held = {h.record.id: h for h in services.claims.held_records(ENV, crashed.record_ids)}
    for record_id, h in held.items():
        match_id = h.match_in(recon)
        claimed = (match_id is not None, recon in h.matched_in, h.record.status is not RecordStatus.UNRECONCILED)
        assert claimed in ((False, False, False), (True, True, True)), (record_id, claimed)
        assert match_id is None or match_id in committed, (record_id, match_id)
    in_matches = []
    for match_id in committed:
        members = [m.record_id for m in services.matches.members(ENV, match_id)]
        assert members and all(held[r].match_in(recon) == match_id for r in members), match_id
        in_matches += members
    for match_id in set(block) - committed:
        assert services.matches.members(ENV, match_id) == [], match_id
    return in_matches


def assert_each_record_in_exactly_one_match(services, crashed: Crashed) -> None:
    in_matches = assert_every_claim_is_a_committed_match(services, crashed)
    assert Counter(in_matches) == Counter(crashed.record_ids)


@pytest.mark.parametrize("point", CRASH_POINTS)
def test_a_run_whose_files_are_lost_fails_at_once_and_leaves_no_claim_without_a_committed_match(
        api, services, crash, point):
    crashed = crash(point)
    lose_files(services, crashed.run_id)
    reads = CountedReads(services.run_files)
    services.ports = replace(services.ports, run_files=reads)

    sweep_later(services)  # load sees the plan; persist finds its files gone; fail undoes from the table

    run = services.runs.get(ENV, crashed.run_id)
    assert run.status.value == "failed" and "RunInputsLost" in run.error_message
    assert "is gone" in run.error_message and reads.reads == 1  # not retried: nothing brings a file back
    assert_every_claim_is_a_committed_match(services, crashed)
    written = len(services.matches.existing_ids(ENV, range(run.first_match_id, run.first_match_id + RECORDS)))
    assert written == CHUNKS_BEFORE * MATCHES_A_CHUNK + {"after part of the commit": MATCHES_A_CHUNK // 2,
                                                         "after the commit": MATCHES_A_CHUNK}.get(point, 0)

    again = api.post(f"/v1/reconciliations/{crashed.reconciliation_id}/runs")  # the slot is free at once
    assert again.status_code == 202, again.json_body
    assert services.runs.get(ENV, again.json_body["id"]).status.value == "completed"
    assert_each_record_in_exactly_one_match(services, crashed)


@pytest.mark.parametrize("point", CRASH_POINTS)
def test_a_run_whose_files_are_kept_is_finished_by_its_restart(services, crash, point):
    crashed = crash(point)

    sweep_later(services)

    run = services.runs.get(ENV, crashed.run_id)
    assert run.status.value == "completed", run.error_message
    assert_each_record_in_exactly_one_match(services, crashed)
    assert run.matched_records == 2 * RECORDS  # a retried chunk counts what it finds committed


UNDO_DEATHS = {
    "after some releases": ("claims", "release_record", 4),
    "after a match's releases, before its members go": ("matches", "delete_members", 2),
}


@pytest.mark.parametrize("death", UNDO_DEATHS)
def test_an_undo_killed_part_way_is_finished_by_the_retried_fail_phase(services, crash, death):
    crashed = crash("after some claims")
    lose_files(services, crashed.run_id)
    port, method, n = UNDO_DEATHS[death]

    with pytest.raises(Killed):
        give_up(replace(services.ports, **{port: Dies(getattr(services.ports, port), method, n)}), ENV,
                crashed.run_id, "stopped")
    assert services.runs.get(ENV, crashed.run_id).status.value == "running"
    give_up(services.ports, ENV, crashed.run_id, "stopped")  # the state machine's retry of GiveUp

    assert services.runs.get(ENV, crashed.run_id).status.value == "failed"
    assert_every_claim_is_a_committed_match(services, crashed)
    assert services.reconciliations.get(ENV, crashed.reconciliation_id).current_run_id is None


def test_a_close_after_a_crash_is_refused_until_the_restart_settles_the_claims_then_counts_them(services, crash):
    """A persist dies with its chunk's records claimed and no match committed: a period close refuses
    until the restart has committed them (landing in between, it counted them as matched, and the
    restart, finding their matches inside the closed period, opened them there: the signed-off close
    then listed fewer open records than the period held)."""
    crashed = crash("after all claims")
    november = Period(date(2026, 11, 1), date(2026, 11, 30))
    with pytest.raises(Conflict, match=f"run {crashed.run_id} of reconciliation {crashed.reconciliation_id} is "
                                       "still writing"):
        close_service.close(services.ports, ENV, crashed.reconciliation_id, november, "November", {}, "user:1")

    sweep_later(services)
    made = close_service.close(services.ports, ENV, crashed.reconciliation_id, november, "November", {}, "user:1")

    run = services.runs.get(ENV, crashed.run_id)
    assert run.status.value == "completed", run.error_message
    in_matches = assert_every_claim_is_a_committed_match(services, crashed)
    assert len(in_matches) == run.matched_records == 2 * RECORDS
    assert sum(m.count for m in made.unmatched) == 0
