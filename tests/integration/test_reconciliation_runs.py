"""Batch runs through the state machine, and the matches they leave: on moto, through the API."""
from dataclasses import replace

from chalicelib.adapters.dynamodb import keys
from tests.integration.conftest import record

RULE = {"name": "Amount and date", "priority": 1, "cardinality": "one_to_one",
        "conditions": [{"field": "amount", "operator": "equals"},
                       {"field": "date", "operator": "within", "days": 3}]}


def add_rule(api, reconciliation, rule=RULE):
    response = api.post(f"/v1/reconciliations/{reconciliation['id']}/rules", rule)
    assert response.status_code == 201, response.json_body
    return response.json_body


def start(api, reconciliation):
    response = api.post(f"/v1/reconciliations/{reconciliation['id']}/runs")
    assert response.status_code == 202, response.json_body
    return api.get(f"/v1/reconciliations/{reconciliation['id']}/runs/{response.json_body['id']}").json_body


def matches_of(api, reconciliation):
    return api.get(f"/v1/reconciliation_matches?reconciliation_id={reconciliation['id']}").json_body["data"]


def test_a_batch_run_matches_by_its_rules_and_reports_what_it_did(api, ingest, reconciliation):
    rule = add_rule(api, reconciliation)
    bank = ingest(record("bank", 1, 1000), record("bank", 2, 2500), record("bank", 3, 777))
    ledger = ingest(record("ledger", 1, 1000, "2026-11-04"), record("ledger", 2, 2500, "2026-11-20"),
                    record("ledger", 3, 999))

    run = start(api, reconciliation)

    assert run["status"] == "completed" and run["kind"] == "batch" and run["trigger"] == "manual"
    assert run["progress"] == 100 and run["started_at"] and run["completed_at"]
    assert (run["total_records"], run["processed_records"], run["matched_records"]) == (6, 6, 2)
    assert run["rule_summary"][str(rule["id"])] == 2
    assert run["rule_summary"]["unmatched"] == {"side_a": 2, "side_b": 2}
    [match] = matches_of(api, reconciliation)
    assert match["status"] == "confirmed" and match["reconciliation_rule_id"] == rule["id"]
    detail = api.get(f"/v1/reconciliation_matches/{match['id']}").json_body
    assert sorted((r["side"], r["id"]) for r in detail["records"]) == [("a", bank[0]), ("b", ledger[0])]
    assert detail["differences"]["date_days"] == 2
    assert {r["status"] for r in detail["records"]} == {"reconciled"}
    assert api.get(f"/v1/records/{bank[1]}").json_body["status"] == "unreconciled"  # 18 days apart
    listed = api.get(f"/v1/records?reconciliation_match_id={match['id']}").json_body["data"]
    assert sorted(r["id"] for r in listed) == sorted([bank[0], ledger[0]])
    shown = api.get(f"/v1/reconciliations/{reconciliation['id']}").json_body
    assert shown["current_run"] is None and shown["last_run"]["id"] == run["id"]


def test_a_second_run_finds_only_what_is_still_open(api, ingest, reconciliation):
    add_rule(api, reconciliation)
    ingest(record("bank", 1, 1000), record("bank", 2, 2000))
    ingest(record("ledger", 1, 1000))
    assert start(api, reconciliation)["matched_records"] == 2
    ingest(record("ledger", 2, 2000))

    second = start(api, reconciliation)

    assert (second["total_records"], second["matched_records"]) == (2, 2)
    assert len(matches_of(api, reconciliation)) == 2
    runs = api.get(f"/v1/reconciliations/{reconciliation['id']}/runs").json_body["data"]
    assert [r["id"] for r in runs] == [second["id"], second["id"] - 1]  # newest first


def test_a_slot_left_taken_by_a_finished_or_missing_run_is_taken_over(api, services, ingest, reconciliation):
    services.table.update(keys.reconciliation("acme", reconciliation["id"]), "SET current_run_id = :r",
                          values={":r": 999})  # a start that died before writing its run
    assert start(api, reconciliation)["status"] == "completed"


def test_runs_of_an_unknown_reconciliation_are_not_found(api):
    assert api.post("/v1/reconciliations/404/runs").status_code == 404
    assert api.get("/v1/reconciliations/404/runs").status_code == 404


def test_a_rule_without_auto_confirm_proposes_and_a_person_confirms(api, ingest, reconciliation):
    add_rule(api, reconciliation, {**RULE, "auto_confirm": False})
    ingest(record("bank", 1, 1000))
    ingest(record("ledger", 1, 1000))
    start(api, reconciliation)
    [match] = matches_of(api, reconciliation)
    assert match["status"] == "proposed"

    confirmed = api.post(f"/v1/reconciliation_matches/{match['id']}/confirm")

    assert confirmed.status_code == 200 and confirmed.json_body["status"] == "confirmed"
    assert api.post(f"/v1/reconciliation_matches/{match['id']}/confirm").json_body["status"] == "confirmed"


def test_unmatching_opens_the_records_again_and_the_next_run_matches_them(api, ingest, reconciliation):
    add_rule(api, reconciliation)
    bank = ingest(record("bank", 1, 1000))
    ingest(record("ledger", 1, 1000))
    start(api, reconciliation)
    [match] = matches_of(api, reconciliation)
    assert api.delete(f"/v1/records/{bank[0]}").status_code == 409  # a matched record stays

    assert api.delete(f"/v1/reconciliation_matches/{match['id']}").status_code == 204

    assert api.get(f"/v1/reconciliation_matches/{match['id']}").status_code == 404
    assert api.get(f"/v1/records/{bank[0]}").json_body["status"] == "unreconciled"
    assert api.get(f"/v1/records?reconciliation_match_id={match['id']}").json_body["data"] == []
    assert start(api, reconciliation)["matched_records"] == 2
    assert api.delete(f"/v1/reconciliation_matches/{match['id']}").status_code == 404


def test_the_status_listings_follow_matching_and_unmatching(api, ingest, reconciliation):
    """Unreconciled records are listed from the streams' open partitions, matched ones from the
    matched-records index: a record moves between them with every match and unmatch."""
    def listed(status):
        return [r["id"] for r in api.get(f"/v1/records?status={status}").json_body["data"]]

    add_rule(api, reconciliation)
    bank = ingest(record("bank", 1, 1000), record("bank", 2, 555))
    ledger = ingest(record("ledger", 1, 1000))
    assert listed("unreconciled") == sorted(bank + ledger, reverse=True) and listed("reconciled") == []

    start(api, reconciliation)
    [match] = matches_of(api, reconciliation)
    assert listed("unreconciled") == [bank[1]]
    assert listed("reconciled") == sorted([bank[0], ledger[0]], reverse=True)

    assert api.delete(f"/v1/reconciliation_matches/{match['id']}").status_code == 204
    assert listed("unreconciled") == sorted(bank + ledger, reverse=True) and listed("reconciled") == []


def test_a_record_matched_in_one_of_two_reconciliations_is_partially_reconciled(api, ingest, reconciliation):
    assert api.post("/v1/data_streams", {"key": "psp", "name": "Processor"}).status_code == 201
    other = api.post("/v1/reconciliations", {"name": "Bank to processor", "run_type": "batch",
                                             "side_a_stream_keys": ["bank"], "side_b_stream_keys": ["psp"]}).json_body
    add_rule(api, reconciliation)
    add_rule(api, other)
    bank = ingest(record("bank", 1, 1000))
    ingest(record("ledger", 1, 1000), record("psp", 1, 1000))

    start(api, reconciliation)
    assert api.get(f"/v1/records/{bank[0]}").json_body["status"] == "partially_reconciled"
    start(api, other)
    assert api.get(f"/v1/records/{bank[0]}").json_body["status"] == "reconciled"


class DiesOnCommit:
    """The matches repository, whose `commit_many` fails from its n-th call on (a Lambda that keeps dying)."""

    def __init__(self, matches, from_call: int) -> None:
        self._matches, self._from_call, self.calls = matches, from_call, 0

    def __getattr__(self, name):
        return getattr(self._matches, name)

    def commit_many(self, matches, pending_events=None, journaled=None):
        self.calls += 1
        if self.calls >= self._from_call:
            raise RuntimeError("Lambda died")
        return self._matches.commit_many(matches, pending_events, journaled)


def test_a_failed_run_is_failed_with_its_reason_and_leaves_no_half_written_match(
        api, services, ingest, reconciliation):
    add_rule(api, reconciliation)
    bank = ingest(*[record("bank", n, 1000 + n) for n in range(6)])
    ingest(*[record("ledger", n, 1000 + n) for n in range(6)])
    services.ports = replace(services.ports, limits=replace(services.ports.limits, chunk_records=4),  # 3 chunks of 2
                             matches=DiesOnCommit(services.matches, from_call=2))

    run = start(api, reconciliation)

    assert run["status"] == "failed" and "Lambda died" in run["error_message"]
    committed = matches_of(api, reconciliation)
    assert len(committed) == 2 and run["matched_records"] == 4  # the first chunk, whole
    matched = {r["id"] for m in committed
               for r in api.get(f"/v1/reconciliation_matches/{m['id']}").json_body["records"]}
    for record_id in bank:
        status = api.get(f"/v1/records/{record_id}").json_body["status"]
        assert status == ("reconciled" if record_id in matched else "unreconciled")
    shown = api.get(f"/v1/reconciliations/{reconciliation['id']}").json_body
    assert shown["current_run"] is None and shown["last_run"]["status"] == "failed"


def test_a_continuous_reconciliation_matches_each_ingestion_as_it_completes(api, ingest):
    for key in ("bank", "ledger"):
        assert api.post("/v1/data_streams", {"key": key, "name": key.title()}).status_code == 201
    continuous = api.post("/v1/reconciliations", {"name": "Live", "side_a_stream_keys": ["bank"],
                                                  "side_b_stream_keys": ["ledger"]}).json_body
    assert continuous["run_type"] == "continuous"
    add_rule(api, continuous)

    bank = ingest(record("bank", 1, 1000), record("bank", 2, 2000))
    ledger = ingest(record("ledger", 1, 1000))

    runs = api.get(f"/v1/reconciliations/{continuous['id']}/runs").json_body["data"]
    assert [(r["kind"], r["trigger"], r["status"]) for r in runs] == [
        ("continuous", "records_ingested", "completed")] * 2 + [("continuous", "reconciliation_changed", "completed")]
    assert [r["matched_records"] for r in runs] == [2, 0, 0]  # newest first: the ledger's ingestion matched
    [match] = matches_of(api, continuous)
    detail = api.get(f"/v1/reconciliation_matches/{match['id']}").json_body
    assert sorted(r["id"] for r in detail["records"]) == sorted([bank[0], ledger[0]])
    assert api.get(f"/v1/records/{bank[1]}").json_body["status"] == "unreconciled"


def test_an_ingestion_that_finds_a_run_in_progress_waits_for_it(api, services, ingest):
    from chalicelib.services.reconciliation_runs import give_up, start_run

    for key in ("bank", "ledger"):
        assert api.post("/v1/data_streams", {"key": key, "name": key.title()}).status_code == 201
    continuous = api.post("/v1/reconciliations", {"name": "Live", "side_a_stream_keys": ["bank"],
                                                  "side_b_stream_keys": ["ledger"]}).json_body
    add_rule(api, continuous)  # its whole-pool run finds nothing yet
    holder = start_run(replace(services.ports, run_workflows=LostStarts()), "acme", continuous["id"])

    ingest(record("bank", 1, 1000))
    ingest(record("ledger", 1, 1000))
    assert api.get(f"/v1/reconciliations/{continuous['id']}/runs").json_body["data"][0]["id"] == holder.id
    assert len(services.runs.pending_jobs("acme", continuous["id"])) == 2

    give_up(services.ports, "acme", holder.id, "stopped by the test")  # the run in progress ends

    latest = api.get(f"/v1/reconciliations/{continuous['id']}/runs").json_body["data"][0]
    assert (latest["kind"], latest["matched_records"]) == ("continuous", 2)
    assert services.runs.pending_jobs("acme", continuous["id"]) == []


def test_a_dry_run_shows_what_a_rule_would_match_and_writes_nothing(api, ingest, reconciliation):
    exact = add_rule(api, reconciliation, {**RULE, "name": "Exact day", "priority": 1,
                                           "conditions": [{"field": "amount", "operator": "equals"},
                                                          {"field": "date", "operator": "equals"}]})
    loose = add_rule(api, reconciliation, {**RULE, "name": "Within 3 days", "priority": 2})
    ingest(record("bank", 1, 1000), record("bank", 2, 2000))
    ingest(record("ledger", 1, 1000), record("ledger", 2, 2000, "2026-11-04"))

    response = api.post(f"/v1/reconciliation_rules/{loose['id']}/dry_run")

    assert response.status_code == 200, response.json_body
    body = response.json_body
    assert body["open_records"] == {"side_a": 2, "side_b": 2}
    assert (body["taken_by_earlier_rules"], body["matches"], body["matched_records"]) == (2, 1, 2)
    assert body["sample"][0]["differences"]["date_days"] == 2
    assert api.post(f"/v1/reconciliation_rules/{exact['id']}/dry_run").json_body["matches"] == 1
    assert matches_of(api, reconciliation) == []
    assert api.post("/v1/reconciliation_rules/404/dry_run").status_code == 404


def test_a_dry_run_says_how_many_candidate_pairs_each_condition_alone_excluded(api, ingest, reconciliation):
    # Given a rule of amount, date and description, and records that each miss one condition
    rule = add_rule(api, reconciliation, {**RULE, "conditions": [
        *RULE["conditions"],
        {"field": "description", "operator": "similar", "threshold": 0.9, "normalize": ["case", "punctuation"]}]})
    ingest(record("bank", 1, 1000, description="ACH CREDIT CUST110 INV-10158"),
           record("bank", 2, 2000, description="Globex INV-7"),
           record("bank", 3, 3000, description="Initech INV-8"))
    ingest(record("ledger", 1, 1000, description="Invoice INV-10158 CUST110"),   # words differ too much
           record("ledger", 2, 2000, "2026-11-20", description="INV-7 Globex"),  # too late
           record("ledger", 3, 3001, description="Initech inv 8"))               # a cent off

    # When the rule is tried
    response = api.post(f"/v1/reconciliation_rules/{rule['id']}/dry_run")

    # Then nothing matches, and each condition owns the one pair it alone turned away
    assert response.status_code == 200, response.json_body
    assert response.json_body["matches"] == 0
    assert response.json_body["excluded_by_condition"] == [
        {"condition": 0, "field": "amount", "operator": "equals", "excluded_pairs": 1},
        {"condition": 1, "field": "date", "operator": "within", "excluded_pairs": 1},
        {"condition": 2, "field": "description", "operator": "similar", "excluded_pairs": 1}]


class LostStarts:
    """Workflows whose executions never start (a crash right after the run took its slot)."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def start(self, execution_name, payload):
        self.names.append(execution_name)


def test_a_run_whose_execution_was_lost_is_restarted_by_the_sweeper(api, services, ingest, reconciliation):
    from datetime import timedelta

    from chalicelib.domain.clock import utc_now
    from chalicelib.services.reconciliation_runs import sweep

    add_rule(api, reconciliation)
    ingest(record("bank", 1, 1000))
    ingest(record("ledger", 1, 1000))
    real = services.ports
    services.ports = replace(real, run_workflows=LostStarts())
    response = api.post(f"/v1/reconciliations/{reconciliation['id']}/runs")
    assert response.status_code == 202 and response.json_body["status"] == "pending"
    run_id = response.json_body["id"]

    assert sweep(real, now=utc_now() + timedelta(minutes=30)) == {
        "restarted": 0, "failed": 0, "cancelled": 0, "errors": 0}
    assert sweep(real, now=utc_now() + timedelta(minutes=80))["restarted"] == 1

    run = api.get(f"/v1/reconciliations/{reconciliation['id']}/runs/{run_id}").json_body
    assert run["status"] == "completed" and run["matched_records"] == 2
    assert services.runs.active() == []


def test_a_reconciliation_made_later_still_finds_records_others_had_fully_reconciled(api, ingest, reconciliation):
    add_rule(api, reconciliation)
    bank = ingest(record("bank", 1, 1000))
    ingest(record("ledger", 1, 1000))
    start(api, reconciliation)
    assert api.get(f"/v1/records/{bank[0]}").json_body["status"] == "reconciled"

    assert api.post("/v1/data_streams", {"key": "psp", "name": "Processor"}).status_code == 201
    later = api.post("/v1/reconciliations", {"name": "Bank to processor", "run_type": "batch",
                                             "side_a_stream_keys": ["bank"], "side_b_stream_keys": ["psp"]}).json_body
    add_rule(api, later)
    ingest(record("psp", 1, 1000))
    run = start(api, later)

    assert (run["total_records"], run["matched_records"]) == (2, 2)
    assert api.get(f"/v1/records/{bank[0]}").json_body["status"] == "reconciled"
    second = start(api, later)  # the stream is adopted: read from the open index now
    assert second["total_records"] == 0


def test_a_record_reopened_for_a_new_reconciliation_is_partially_reconciled_until_matched_there(
        api, ingest, reconciliation):
    add_rule(api, reconciliation)
    bank = ingest(record("bank", 1, 1000))
    ingest(record("ledger", 1, 1000))
    start(api, reconciliation)
    assert api.post("/v1/data_streams", {"key": "psp", "name": "Processor"}).status_code == 201
    later = api.post("/v1/reconciliations", {"name": "Bank to processor", "run_type": "batch",
                                             "side_a_stream_keys": ["bank"], "side_b_stream_keys": ["psp"]}).json_body
    add_rule(api, later)

    assert start(api, later)["total_records"] == 1  # the bank record, nothing on the processor's side

    assert api.get(f"/v1/records/{bank[0]}").json_body["status"] == "partially_reconciled"
    partial = api.get("/v1/records?status=partially_reconciled").json_body["data"]
    assert [r["id"] for r in partial] == bank


class CommitsThenDies:
    """`commit_many` writes, then a person unmatches the first match, then the Lambda dies (once)."""

    def __init__(self, matches, services) -> None:
        self._matches, self._services, self.unmatched = matches, services, None

    def __getattr__(self, name):
        return getattr(self._matches, name)

    def commit_many(self, matches, pending_events=None, journaled=None):
        self._matches.commit_many(matches, pending_events, journaled)
        if self.unmatched is None and matches:
            from chalicelib.services.matches import unmatch

            self.unmatched = matches[0]
            unmatch(replace(self._services.ports, matches=self._matches), "acme", matches[0].id)
            raise RuntimeError("Lambda died after the commit")


def test_a_retried_chunk_never_brings_back_a_match_unmatched_meanwhile(api, services, ingest, reconciliation):
    add_rule(api, reconciliation)
    bank = ingest(record("bank", 1, 1000), record("bank", 2, 2000))
    ingest(record("ledger", 1, 1000), record("ledger", 2, 2000))
    fake = CommitsThenDies(services.matches, services)
    services.ports = replace(services.ports, matches=fake)

    run = start(api, reconciliation)

    assert run["status"] == "completed" and run["matched_records"] == 4  # both written by the first attempt
    assert [m["id"] for m in matches_of(api, reconciliation)] == [fake.unmatched.id + 1]
    assert api.get(f"/v1/reconciliation_matches/{fake.unmatched.id}").status_code == 404
    assert api.get(f"/v1/records/{bank[0]}").json_body["status"] == "unreconciled"
    assert api.get(f"/v1/records/{bank[1]}").json_body["status"] == "reconciled"


def test_amounts_kept_with_different_decimal_places_compare_at_one_scale(api, ingest, reconciliation):
    add_rule(api, reconciliation)
    bank = ingest(record("bank", 1, 100, decimal_places=2), record("bank", 2, 100, decimal_places=0))
    ledger = ingest(record("ledger", 1, 1, decimal_places=0))

    run = start(api, reconciliation)

    assert run["matched_records"] == 2  # 1.00 and 1, never 1.00 and 100
    [match] = matches_of(api, reconciliation)
    detail = api.get(f"/v1/reconciliation_matches/{match['id']}").json_body
    assert sorted(r["id"] for r in detail["records"]) == sorted([bank[0], ledger[0]])


def test_a_run_matches_on_a_metadata_key_and_leaves_records_without_it_open(api, ingest, reconciliation):
    add_rule(api, reconciliation, {**RULE, "conditions": [{"field": "amount", "operator": "equals"},
                                                          {"field": "metadata.payout", "operator": "equals"}]})
    bank = ingest(record("bank", 1, 1000, metadata={"payout": "po_1"}), record("bank", 2, 1000, metadata={"payout": 7}),
                  record("bank", 3, 1000))
    ledger = ingest(record("ledger", 1, 1000, metadata={"payout": "po_1"}),
                    record("ledger", 2, 1000, metadata={"payout": "po_2"}), record("ledger", 3, 1000, metadata={"payout": 7}))

    run = start(api, reconciliation)

    assert (run["total_records"], run["matched_records"]) == (6, 4)
    matched = {tuple(sorted(r["id"] for r in api.get(f"/v1/reconciliation_matches/{m['id']}").json_body["records"]))
               for m in matches_of(api, reconciliation)}
    assert matched == {tuple(sorted([bank[0], ledger[0]])), tuple(sorted([bank[1], ledger[2]]))}
    assert api.get(f"/v1/records/{bank[2]}").json_body["status"] == "unreconciled"


def test_records_of_an_import_still_writing_wait_for_a_later_run(api, services, ingest, reconciliation):
    add_rule(api, reconciliation)
    bank = ingest(record("bank", 1, 1000))
    ingest(record("ledger", 1, 1000))
    job_id = api.get(f"/v1/records/{bank[0]}").json_body["file_import_id"]
    active = keys.active_job_index("acme", job_id)  # as if a chunk of it were being retried
    services.table.update(keys.ingestion_job("acme", job_id), "SET #s = :p, gsi2pk = :a, gsi2sk = :k",
                          names={"#s": "status"}, values={":p": "processing", ":a": active["gsi2pk"],
                                                          ":k": active["gsi2sk"]})

    run = start(api, reconciliation)

    assert (run["status"], run["total_records"], run["matched_records"]) == ("completed", 1, 0)
    assert api.get(f"/v1/records/{bank[0]}").json_body["status"] == "unreconciled"


def test_a_dry_run_over_its_open_records_limit_is_refused_with_the_count_and_the_limit(
        api, services, ingest, reconciliation):
    rule = add_rule(api, reconciliation)
    ingest(*[record("bank", n, 1000 + n) for n in range(3)])
    ingest(*[record("ledger", n, 1000 + n) for n in range(2)])
    services.ports = replace(services.ports, limits=replace(services.ports.limits, dry_run_records=4))

    response = api.post(f"/v1/reconciliation_rules/{rule['id']}/dry_run")

    assert response.status_code == 409, response.json_body
    message = response.json_body["message"]
    assert "has 5 open records (3 on side A, 2 on side B)" in message
    assert "at most 4" in message and f"POST /v1/reconciliations/{reconciliation['id']}/runs" in message
    services.ports = replace(services.ports, limits=replace(services.ports.limits, dry_run_records=5))
    assert api.post(f"/v1/reconciliation_rules/{rule['id']}/dry_run").json_body["matches"] == 2


# Continuous reconciliations and their backlog ---------------------------------------------------

def streams(api, *keys):
    for key in keys:
        assert api.post("/v1/data_streams", {"key": key, "name": key.title()}).status_code == 201


def continuous_reconciliation(api, side_a=("bank",), side_b=("ledger",)):
    created = api.post("/v1/reconciliations", {"name": "Live", "side_a_stream_keys": list(side_a),
                                               "side_b_stream_keys": list(side_b)})
    assert created.status_code == 201 and created.json_body["run_type"] == "continuous", created.json_body
    return created.json_body


def runs_of(api, reconciliation):
    """(trigger, matched_records) of its runs, oldest first."""
    runs = api.get(f"/v1/reconciliations/{reconciliation['id']}/runs").json_body["data"]
    assert all(r["status"] == "completed" and r["kind"] == "continuous" for r in runs), runs
    return [(r["trigger"], r["matched_records"]) for r in reversed(runs)]


def test_a_rule_added_to_a_continuous_reconciliation_matches_the_records_posted_before_it(api, ingest):
    """The issue's case: records posted first; the automatic run matched 0 of them, while the
    rule's dry run found a match and a manual batch run matched both records."""
    streams(api, "bank", "ledger")
    bank = ingest(record("bank", 1, 1000))
    ledger = ingest(record("ledger", 1, 1000))
    continuous = continuous_reconciliation(api)
    assert runs_of(api, continuous) == []  # no rule yet: nothing to match with

    add_rule(api, continuous)

    assert runs_of(api, continuous) == [("reconciliation_changed", 2)]
    [match] = matches_of(api, continuous)
    detail = api.get(f"/v1/reconciliation_matches/{match['id']}").json_body
    assert sorted(r["id"] for r in detail["records"]) == sorted(bank + ledger)


def test_later_continuous_runs_match_new_records_against_everything_open(api, ingest):
    streams(api, "bank", "ledger")
    continuous = continuous_reconciliation(api)
    add_rule(api, continuous)
    old_bank = ingest(record("bank", 1, 1000), record("bank", 2, 2000))

    new_ledger = ingest(record("ledger", 1, 2000), record("ledger", 2, 1000))

    assert runs_of(api, continuous) == [("reconciliation_changed", 0), ("records_ingested", 0),
                                        ("records_ingested", 4)]
    matched = {tuple(sorted(r["id"] for r in api.get(f"/v1/reconciliation_matches/{m['id']}").json_body["records"]))
               for m in matches_of(api, continuous)}
    assert matched == {tuple(sorted([old_bank[0], new_ledger[1]])), tuple(sorted([old_bank[1], new_ledger[0]]))}


def test_activating_a_rule_matches_the_whole_open_pool(api, ingest):
    streams(api, "bank", "ledger")
    continuous = continuous_reconciliation(api)
    rule = add_rule(api, continuous, {**RULE, "active": False})
    ingest(record("bank", 1, 1000))
    ingest(record("ledger", 1, 1000))
    assert runs_of(api, continuous) == [("records_ingested", 0)] * 2

    assert api.patch(f"/v1/reconciliation_rules/{rule['id']}", {"active": True}).status_code == 200

    assert runs_of(api, continuous)[-1] == ("reconciliation_changed", 2)
    assert api.patch(f"/v1/reconciliation_rules/{rule['id']}", {"name": "Renamed"}).status_code == 200
    assert len(runs_of(api, continuous)) == 3  # a new name matches nothing new


def test_changing_sides_matches_the_whole_open_pool(api, ingest):
    streams(api, "bank", "ledger", "psp")
    continuous = continuous_reconciliation(api, side_b=("psp",))
    add_rule(api, continuous)
    bank = ingest(record("bank", 1, 1000))
    ledger = ingest(record("ledger", 1, 1000))  # a stream the reconciliation does not use yet

    changed = api.patch(f"/v1/reconciliations/{continuous['id']}", {"side_b_stream_keys": ["ledger"]})

    assert changed.status_code == 200, changed.json_body
    assert runs_of(api, continuous)[-1] == ("reconciliation_changed", 2)
    assert changed.json_body["last_run"]["trigger"] == "reconciliation_changed"
    [match] = matches_of(api, continuous)
    detail = api.get(f"/v1/reconciliation_matches/{match['id']}").json_body
    assert sorted(r["id"] for r in detail["records"]) == sorted(bank + ledger)


def test_a_rule_added_during_a_run_gets_its_whole_pool_run_when_that_run_ends(api, services, ingest):
    from chalicelib.services.reconciliation_runs import give_up, start_run

    streams(api, "bank", "ledger")
    ingest(record("bank", 1, 1000))
    ingest(record("ledger", 1, 1000))
    continuous = continuous_reconciliation(api)
    holder = start_run(replace(services.ports, run_workflows=LostStarts()), "acme", continuous["id"])

    add_rule(api, continuous)  # the reconciliation is busy: the request waits
    assert [r["id"] for r in api.get(f"/v1/reconciliations/{continuous['id']}/runs").json_body["data"]] == [holder.id]

    give_up(services.ports, "acme", holder.id, "stopped by the test")

    latest = api.get(f"/v1/reconciliations/{continuous['id']}/runs").json_body["data"][0]
    assert (latest["trigger"], latest["matched_records"]) == ("reconciliation_changed", 2)
    assert services.runs.pending_work("acme", continuous["id"]) == ([], None)


def test_a_failed_whole_pool_run_leaves_its_request_for_the_next_run(api, services, ingest):
    from chalicelib.services.reconciliation_runs import give_up, start_pending

    streams(api, "bank", "ledger")
    ingest(record("bank", 1, 1000))
    ingest(record("ledger", 1, 1000))
    continuous = continuous_reconciliation(api)
    lost = replace(services.ports, run_workflows=LostStarts())
    add_rule(api, continuous)  # its whole-pool run matches both
    assert runs_of(api, continuous)[-1] == ("reconciliation_changed", 2)
    services.runs.request_whole_pool("acme", continuous["id"])
    run = start_pending(lost, "acme", continuous["id"])  # taken, then its execution dies
    assert run.whole_pool and services.runs.pending_work("acme", continuous["id"])[1] is None

    give_up(services.ports, "acme", run.id, "stopped by the test")

    assert services.runs.pending_work("acme", continuous["id"])[1] is not None
