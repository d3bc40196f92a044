"""Rules learned from decisions over HTTP (on moto): people match invoices to the bank's payments
by hand under a hidden rule (a 30-cent fee, paid 1-2 days later, the invoice number in the bank's
description); the suggestion recovers the rule, says what it explains and what its dry run would
add or contradict, and once accepted a run matches the rest."""
import pytest

from tests.support.learned_rules import FEE, MAX_LAG, labelled_pairs

DECIDED = 30


@pytest.fixture
def invoices(api):
    for key in ("invoices", "bank"):
        assert api.post("/v1/data_streams", {"key": key, "name": key.title()}).status_code == 201
    created = api.post("/v1/reconciliations", {"name": "Invoices to bank", "run_type": "batch",
                                               "side_a_stream_keys": ["invoices"], "side_b_stream_keys": ["bank"]})
    assert created.status_code == 201, created.json_body
    return created.json_body


def labelled_world(api, ingest, reconciliation, count=45):
    """`count` invoices with their payments and decoys ingested; the first DECIDED pairs matched by
    hand. Returns (the decided pairs, the pairs left open) as record ids."""
    pairs = labelled_pairs(count)
    ids = ingest(*(row for pair in pairs for row in pair if row is not None))
    it = iter(ids)
    known = [(next(it) if invoice is not None else None, next(it)) for invoice, _ in pairs]
    real = [(a, b) for a, b in known if a is not None]
    for a, b in real[:DECIDED]:
        made = api.post("/v1/reconciliation_matches", {
            "reconciliation_id": reconciliation["id"], "record_ids": [a, b], "allow_difference": True,
            "reason": "bank fee"})
        assert made.status_code == 201, made.json_body
    return real[:DECIDED], real[DECIDED:]


def suggest(api, reconciliation, **body):
    response = api.post(f"/v1/reconciliations/{reconciliation['id']}/rule_suggestions", body)
    assert response.status_code == 200, response.json_body
    return response.json_body


def conditions_by_field(rule):
    return {(c["field"], c.get("side_b_field")): c for c in rule["conditions"]}


def test_the_top_suggestion_recovers_the_hidden_rule_and_accepting_it_matches_the_rest(api, ingest, invoices):
    decided, still_open = labelled_world(api, ingest, invoices)

    body = suggest(api, invoices)

    assert (body["decisions_read"], body["decisions_by_kind"]) == (DECIDED, {"manual": DECIDED, "investigation": 0})
    assert body["scan_complete"] is True and body["open_records"]["side_a"] == len(still_open)
    top = body["data"][0]
    assert (top["status"], top["source"], top["active"], top["cardinality"]) == (
        "proposed", "learned", False, "one_to_one")
    by_field = conditions_by_field(top)
    assert set(by_field) == {("amount", None), ("date", None), ("external_id", "description")}
    assert by_field[("amount", None)]["operator"] == "within" and by_field[("amount", None)]["tolerance"] == FEE
    assert by_field[("date", None)] == {"field": "date", "operator": "within", "days": MAX_LAG}
    assert by_field[("external_id", "description")]["operator"] == "contains"
    evidence = top["evidence"]
    assert (evidence["rank"], evidence["decisions_explained"], evidence["decisions_contradicted"]) == (1, DECIDED, 0)
    assert evidence["observed"]["amount_difference"] == {"min": -FEE, "max": -FEE, "most_common": -FEE,
                                                         "currency": "USD", "decimal_places": 2,
                                                         "explained_by": "fixed", "outliers": 0}
    assert evidence["observed"]["date_lag_days"]["max"] == MAX_LAG
    assert evidence["observed"]["shared_tokens"]["decisions_with_shared_token"] == DECIDED
    dry = evidence["dry_run"]
    assert (dry["matches"], dry["matched_records"], dry["conflicting_matches"]) == (
        len(still_open), 2 * len(still_open), 0)
    # Amount and date alone would take the decoys: ranked below, its conflicts said
    [alone] = [r for r in body["data"] if len(r["conditions"]) == 2]
    assert alone["evidence"]["rank"] > 1
    assert alone["evidence"]["dry_run"]["conflicting_matches"] + alone["evidence"]["decisions_contradicted"] > 0
    # Proposed rules stay out of the rule set and out of runs
    assert api.get(f"/v1/reconciliations/{invoices['id']}/rules").json_body["data"] == []
    listed = api.get(f"/v1/reconciliations/{invoices['id']}/rules?status=proposed").json_body["data"]
    assert [r["id"] for r in listed] == sorted(r["id"] for r in body["data"]) or \
        {r["id"] for r in listed} == {r["id"] for r in body["data"]}
    run = api.post(f"/v1/reconciliations/{invoices['id']}/runs").json_body
    assert api.get(f"/v1/reconciliations/{invoices['id']}/runs/{run['id']}").json_body["status"] == "completed"
    assert matched_pairs(api, invoices) == set()

    accepted = api.post(f"/v1/reconciliation_rules/{top['id']}/accept", {"priority": 5})

    assert accepted.status_code == 200, accepted.json_body
    assert (accepted.json_body["status"], accepted.json_body["active"], accepted.json_body["priority"],
            accepted.json_body["source"]) == ("active", True, 5, "learned")
    run = api.post(f"/v1/reconciliations/{invoices['id']}/runs").json_body
    assert api.get(f"/v1/reconciliations/{invoices['id']}/runs/{run['id']}").json_body["status"] == "completed"
    assert matched_pairs(api, invoices) == {tuple(p) for p in still_open}
    assert [r["id"] for r in api.get(f"/v1/reconciliations/{invoices['id']}/rules").json_body["data"]] == [top["id"]]


def matched_pairs(api, reconciliation):
    """The (side A, side B) record ids of the matches a run made."""
    pairs = set()
    cursor = None
    while True:
        page = api.get(f"/v1/reconciliation_matches?reconciliation_id={reconciliation['id']}&limit=100"
                       + (f"&cursor={cursor}" if cursor else "")).json_body
        for match in page["data"]:
            if match.get("reconciliation_rule_id") is None:
                continue
            records = match["records"] or api.get(f"/v1/reconciliation_matches/{match['id']}").json_body["records"]
            pairs.add((next(r["id"] for r in records if r["data_stream_key"] == "invoices"),
                       next(r["id"] for r in records if r["data_stream_key"] == "bank")))
        cursor = page.get("next_cursor")
        if not cursor:
            return pairs


def test_accepting_needs_a_free_priority_and_a_proposed_rule(api, ingest, invoices):
    labelled_world(api, ingest, invoices, count=DECIDED)
    taken = api.post(f"/v1/reconciliations/{invoices['id']}/rules", {
        "name": "Exact", "priority": 3, "conditions": [{"field": "amount", "operator": "equals"}]})
    assert taken.status_code == 201
    [top, *_] = suggest(api, invoices)["data"]

    clash = api.post(f"/v1/reconciliation_rules/{top['id']}/accept", {"priority": 3})
    bad = api.post(f"/v1/reconciliation_rules/{top['id']}/accept", {"priority": 0})
    patched = api.patch(f"/v1/reconciliation_rules/{top['id']}", {"active": True})
    tweaked = api.patch(f"/v1/reconciliation_rules/{top['id']}", {"name": "Invoice in the bank's text"})
    fine = api.post(f"/v1/reconciliation_rules/{top['id']}/accept", {"priority": 4})
    again = api.post(f"/v1/reconciliation_rules/{top['id']}/accept", {"priority": 6})

    assert clash.status_code == 409 and "priority 3 is already used" in clash.json_body["message"]
    assert bad.status_code == 422, bad.json_body
    assert patched.status_code == 409 and "accept it" in patched.json_body["message"]
    assert tweaked.status_code == 200 and tweaked.json_body["status"] == "proposed"
    assert fine.status_code == 200 and fine.json_body["name"] == "Invoice in the bank's text"
    assert again.status_code == 409 and "is active" in again.json_body["message"]


def test_a_dismissed_suggestion_is_kept_and_not_proposed_again(api, ingest, invoices):
    labelled_world(api, ingest, invoices, count=DECIDED)
    first = suggest(api, invoices)
    top = first["data"][0]

    dismissed = api.post(f"/v1/reconciliation_rules/{top['id']}/dismiss")
    again = suggest(api, invoices)

    assert dismissed.status_code == 200 and dismissed.json_body["status"] == "dismissed"
    assert api.post(f"/v1/reconciliation_rules/{top['id']}/dismiss").status_code == 200  # repeatable
    assert api.post(f"/v1/reconciliation_rules/{top['id']}/accept").status_code == 409
    assert again["replaced"] == len(first["data"]) - 1
    assert all(conditions_by_field(r) != conditions_by_field(top) for r in again["data"])
    listed = api.get(f"/v1/reconciliations/{invoices['id']}/rules?status=dismissed").json_body["data"]
    assert [r["id"] for r in listed] == [top["id"]]


def test_no_decisions_no_suggestions_and_bad_input_is_named(api, invoices):
    empty = suggest(api, invoices)
    too_many = api.post(f"/v1/reconciliations/{invoices['id']}/rule_suggestions", {"max_decisions": 1001})
    bad_status = api.get(f"/v1/reconciliations/{invoices['id']}/rules?status=maybe")

    assert (empty["decisions_read"], empty["data"], empty["open_records"]) == (0, [], None)
    assert too_many.status_code == 422 and "max_decisions" in str(too_many.json_body)
    assert bad_status.status_code in (400, 422) and "status" in str(bad_status.json_body)
    assert api.post("/v1/reconciliations/404/rule_suggestions").status_code == 404
    assert api.post("/v1/reconciliation_rules/404/accept").status_code == 404


def test_an_accepted_investigation_is_a_decision_of_its_kind(api, ingest, worker, reconciliation):
    from tests.integration.test_investigations_api import _exception, start

    world = _exception(api, ingest, reconciliation)  # the bank's 1,250.00, booked 6 days later
    started = start(api, world["id"])
    worker.drain()
    accepted = api.post(f"/v1/reconciliation_exceptions/{world['id']}/investigations/{started['id']}/accept")
    assert accepted.status_code == 201, accepted.json_body

    body = suggest(api, reconciliation)

    assert (body["decisions_read"], body["decisions_by_kind"]) == (1, {"manual": 0, "investigation": 1})
    top = body["data"][0]
    by_field = conditions_by_field(top)
    assert by_field[("amount", None)] == {"field": "amount", "operator": "equals"}
    assert by_field[("date", None)] == {"field": "date", "operator": "within", "days": 6}
    assert top["evidence"]["decisions_explained"] == 1
