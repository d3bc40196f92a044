"""Near misses over HTTP (on moto): a dry run and an exception's detail say, for each unmatched
record, its closest candidate under the rule and the conditions that fail, with the numbers."""
from dataclasses import replace
from datetime import timedelta

from chalicelib.domain.clock import utc_now
from chalicelib.services.api_keys import create_key
from tests.integration.conftest import record

RULE = {"name": "Amount, date and payer", "priority": 1, "cardinality": "one_to_one",
        "conditions": [{"field": "amount", "operator": "within", "tolerance": 50},
                       {"field": "date", "operator": "within", "days": 2},
                       {"field": "description", "operator": "similar", "threshold": 0.6, "normalize": ["case"]}]}


def days_ago(n: int) -> str:
    return (utc_now().date() - timedelta(days=n)).isoformat()


def add_rule(api, reconciliation, rule=RULE):
    response = api.post(f"/v1/reconciliations/{reconciliation['id']}/rules", rule)
    assert response.status_code == 201, response.json_body
    return response.json_body


def near_misses_world(api, ingest, reconciliation, day="2026-11-02", later="2026-11-07"):
    """Three bank records, each with a ledger partner that misses one condition."""
    rule = add_rule(api, reconciliation)
    bank = ingest(record("bank", 1, 10_000, day, description="Acme invoice 7"),
                  record("bank", 2, 20_000, day, description="Globex invoice 8"),
                  record("bank", 3, 30_000, day, description="Initech invoice 9"))
    ledger = ingest(record("ledger", 1, 10_150, day, description="ACME INVOICE 7"),      # 1.50 off
                    record("ledger", 2, 20_000, later, description="globex invoice 8"),  # 5 days later
                    record("ledger", 3, 30_000, day, description="Umbrella refund"))     # another payer
    return rule, bank, ledger


def by_record(entries):
    return {entry["record_id"]: entry for entry in entries}


def test_a_dry_run_explains_each_record_left_open_with_its_closest_candidate_and_the_numbers(
        api, ingest, reconciliation):
    rule, bank, ledger = near_misses_world(api, ingest, reconciliation)

    response = api.post(f"/v1/reconciliation_rules/{rule['id']}/dry_run?near_misses=true")

    assert response.status_code == 200, response.json_body
    body = response.json_body
    assert body["matches"] == 0
    near = body["near_misses"]
    assert near["explained"] is True and (near["scope"], near["left_open"], near["records"]) == ("all", 6, 6)
    assert [(c["field"], c["records"]) for c in near["by_condition"]] == [
        ("amount", 2), ("date", 2), ("description", 2)]
    sample = by_record(e for e in near["sample"] if e["side"] == "a")
    assert {i: sample[i]["candidate_record_id"] for i in bank} == dict(zip(bank, ledger))
    [amount] = sample[bank[0]]["failed_conditions"]
    assert (amount["field"], amount["expected"], amount["actual"], amount["difference"]) == ("amount", 50, -150, 100)
    assert (amount["unit"], amount["difference_decimal"]) == ("USD", "1.00")
    assert amount["message"] == "amount off by 1.50 USD, 1.00 USD more than the 0.50 USD allowed"
    [date] = sample[bank[1]]["failed_conditions"]
    assert date["message"] == "date 3 days past the 2-day window (5 days before the candidate's)"
    [text] = sample[bank[2]]["failed_conditions"]
    assert text["field"] == "description" and text["expected"] == 0.6 and text["actual"] < 0.6
    assert text["message"] == f"description similarity {text['actual']:.2f} under 0.6"
    assert all(e["failed_condition_count"] == 1 and 0 < e["distance"] < 1 for e in near["sample"])
    from_ledger = by_record(e for e in near["sample"] if e["side"] == "b")
    assert from_ledger[ledger[0]]["failed_conditions"][0]["actual"] == 150  # the ledger's amount minus the bank's


def test_a_dry_run_explains_only_its_sample_unless_asked_and_a_bad_flag_is_a_400(api, ingest, reconciliation):
    rule, bank, ledger = near_misses_world(api, ingest, reconciliation)
    ingest(*(record("bank", n, 100_000 + n, description=f"Payer {n}") for n in range(4, 14)))  # 13 on side A

    plain = api.post(f"/v1/reconciliation_rules/{rule['id']}/dry_run")
    every = api.post(f"/v1/reconciliation_rules/{rule['id']}/dry_run?near_misses=true")
    bad = api.post(f"/v1/reconciliation_rules/{rule['id']}/dry_run?near_misses=perhaps")

    assert plain.status_code == 200 and every.status_code == 200, (plain.json_body, every.json_body)
    near, counted = plain.json_body["near_misses"], every.json_body["near_misses"]
    assert (near["scope"], near["left_open"], near["records"], near["by_condition"]) == ("sample", 16, 13, None)
    assert (counted["scope"], counted["left_open"], counted["records"]) == ("all", 16, 16)
    assert sum(c["records"] for c in counted["by_condition"]) >= 16
    assert near["sample"] == counted["sample"]
    assert [e["record_id"] for e in near["sample"] if e["side"] == "a"] == bank + sorted(
        e["record_id"] for e in near["sample"] if e["side"] == "a" and e["record_id"] not in bank)
    assert bad.status_code == 400, bad.json_body
    assert bad.json_body["message"].startswith("query parameter 'near_misses': Input should be a valid boolean")


def test_an_exceptions_record_whose_partner_arrived_after_the_run_would_match_it(api, ingest, reconciliation):
    rule, bank, ledger = ran_world(api, ingest, reconciliation)
    [late] = ingest(record("ledger", 9, 10_000, days_ago(40), description="acme invoice 7"))  # bank[0]'s partner

    near = api.get(f"/v1/reconciliation_exceptions/{exception_of(api, 'bank')['id']}?near_misses=true").json_body[
        "near_misses"]

    [entry] = [e for e in near["data"] if e["record_id"] == bank[0]]
    assert (entry["candidate_record_id"], entry["would_match"], entry["failed_conditions"]) == (late, True, [])
    assert all(not e["would_match"] for e in near["data"] if e["record_id"] != bank[0])


def test_a_record_the_rule_matches_is_not_a_near_miss(api, ingest, reconciliation):
    rule, bank, ledger = near_misses_world(api, ingest, reconciliation)
    ingest(record("bank", 4, 40_000, description="Hooli invoice 1"))
    ingest(record("ledger", 4, 40_010, description="hooli invoice 1"))

    body = api.post(f"/v1/reconciliation_rules/{rule['id']}/dry_run").json_body

    assert body["matches"] == 1 and body["near_misses"]["records"] == 6
    named = {e["record_id"] for e in body["near_misses"]["sample"]} | {
        e["candidate_record_id"] for e in body["near_misses"]["sample"]}
    assert named == set(bank) | set(ledger)


def test_a_grouped_rule_says_its_near_misses_are_not_explained(api, ingest, reconciliation):
    rule = add_rule(api, reconciliation, {**RULE, "cardinality": "many_to_one"})
    ingest(record("bank", 1, 1000))
    ingest(record("ledger", 1, 5000))

    near = api.post(f"/v1/reconciliation_rules/{rule['id']}/dry_run").json_body["near_misses"]

    assert near["explained"] is False and "groups of records" in near["reason"] and near["sample"] == []


def exception_of(api, stream):
    page = api.get(f"/v1/reconciliation_exceptions?data_stream_key={stream}").json_body
    [row] = page["data"]
    return row


def ran_world(api, ingest, reconciliation):
    rule, bank, ledger = near_misses_world(api, ingest, reconciliation, days_ago(40), days_ago(35))
    run = api.post(f"/v1/reconciliations/{reconciliation['id']}/runs").json_body
    assert api.get(f"/v1/reconciliations/{reconciliation['id']}/runs/{run['id']}").json_body["status"] == "completed"
    return rule, bank, ledger


def test_an_exceptions_detail_explains_its_newest_records_under_each_rule_when_asked(api, ingest, reconciliation):
    rule, bank, ledger = ran_world(api, ingest, reconciliation)
    exact = add_rule(api, reconciliation, {"name": "Exact amount", "priority": 2,
                                           "conditions": [{"field": "amount", "operator": "equals"}]})
    exception = exception_of(api, "bank")

    plain = api.get(f"/v1/reconciliation_exceptions/{exception['id']}")
    response = api.get(f"/v1/reconciliation_exceptions/{exception['id']}?near_misses=true")

    assert plain.status_code == 200 and plain.json_body["near_misses"] is None
    assert response.status_code == 200, response.json_body
    near = response.json_body["near_misses"]
    assert (near["side"], near["records"], near["refused"]) == ("a", 3, None)
    assert [(r["reconciliation_rule_id"], r["explained"]) for r in near["rules"]] == [(rule["id"], True),
                                                                                      (exact["id"], True)]
    assert [e["record_id"] for e in near["data"]] == [bank[2], bank[2], bank[1], bank[1], bank[0], bank[0]]
    under_rule = {e["record_id"]: e for e in near["data"] if e["reconciliation_rule_id"] == rule["id"]}
    assert {i: e["candidate_record_id"] for i, e in under_rule.items()} == dict(zip(bank, ledger))
    assert under_rule[bank[0]]["failed_conditions"][0]["message"] == (
        "amount off by 1.50 USD, 1.00 USD more than the 0.50 USD allowed")
    [exact_miss] = [e for e in near["data"] if e["reconciliation_rule_id"] == exact["id"] and e["record_id"] == bank[0]]
    assert exact_miss["failed_conditions"][0]["message"] == "amount off by 1.50 USD; the rule wants equal amounts"
    ledger_near = api.get(f"/v1/reconciliation_exceptions/{exception_of(api, 'ledger')['id']}?near_misses=true")
    assert ledger_near.json_body["near_misses"]["side"] == "b"


def test_an_exceptions_near_misses_past_the_open_records_limit_say_so_and_the_detail_stands(
        api, services, ingest, reconciliation):
    ran_world(api, ingest, reconciliation)
    exception = exception_of(api, "bank")
    services.ports = replace(services.ports, limits=replace(services.ports.limits, dry_run_records=5))

    response = api.get(f"/v1/reconciliation_exceptions/{exception['id']}?near_misses=true")

    assert response.status_code == 200, response.json_body
    near = response.json_body["near_misses"]
    assert near["data"] == [] and "more than 5 open records" in near["refused"]
    assert response.json_body["aggregates"]["record_count"] == 3


def test_a_bad_near_misses_flag_is_refused_naming_it_as_query_parameters_are(api, ingest, reconciliation):
    ran_world(api, ingest, reconciliation)
    exception = exception_of(api, "bank")

    response = api.get(f"/v1/reconciliation_exceptions/{exception['id']}?near_misses=perhaps")

    assert response.status_code == 400, response.json_body
    assert response.json_body["message"].startswith("query parameter 'near_misses': Input should be a valid boolean")


def test_near_misses_never_name_another_environments_records(api, services, worker, ingest, reconciliation):
    # Given another environment with the same streams, holding the exact partners of acme's records
    other_key = create_key(services.api_keys, "other")[1]
    for key in ("bank", "ledger"):
        assert api.post("/v1/data_streams", {"key": key, "name": key.title()}, key=other_key).status_code == 201
    posted = api.post("/v1/records/bulk", {"records": [record("ledger", n, amount, days_ago(40),
                                                              description=text) for n, amount, text in (
        (1, 10_000, "Acme invoice 7"), (2, 20_000, "Globex invoice 8"), (3, 30_000, "Initech invoice 9"))]},
        key=other_key)
    assert posted.status_code == 202
    worker.drain()
    rule, bank, ledger = ran_world(api, ingest, reconciliation)
    exception = exception_of(api, "bank")

    dry = api.post(f"/v1/reconciliation_rules/{rule['id']}/dry_run").json_body["near_misses"]
    detail = api.get(f"/v1/reconciliation_exceptions/{exception['id']}?near_misses=true").json_body["near_misses"]

    named = {e["candidate_record_id"] for e in dry["sample"] + detail["data"]}
    assert None not in named and named <= set(bank) | set(ledger)
    assert {e["candidate_record_id"] for e in detail["data"]} <= set(ledger)
    assert api.get(f"/v1/reconciliation_exceptions/{exception['id']}?near_misses=true",
                   key=other_key).status_code == 404
