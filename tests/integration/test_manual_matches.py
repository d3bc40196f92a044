"""Matching by hand: POST /reconciliation_matches, on moto through the API."""
import pytest

from chalicelib.adapters.dynamodb import keys
from tests.integration.conftest import record


def manual(api, reconciliation, record_ids, **fields):
    return api.post("/v1/reconciliation_matches", {"reconciliation_id": reconciliation["id"],
                                                   "record_ids": record_ids, **fields})


def test_records_that_balance_are_matched_by_hand_and_confirmed(api, ingest, reconciliation):
    bank = ingest(record("bank", 1, 3000))
    ledger = ingest(record("ledger", 1, 1000), record("ledger", 2, 2000))

    response = manual(api, reconciliation, bank + ledger)

    assert response.status_code == 201, response.json_body
    match = response.json_body
    assert match["status"] == "confirmed" and match["reconciliation_rule_id"] is None
    assert sorted(r["side"] for r in match["records"]) == ["a", "b", "b"]
    assert api.get(f"/v1/records/{ledger[1]}").json_body["status"] == "reconciled"


def test_a_side_booked_as_the_mirror_image_balances(api, ingest, reconciliation):
    bank = ingest(record("bank", 1, 3000, direction="credit"))
    ledger = ingest(record("ledger", 1, 3000, direction="debit"))
    assert manual(api, reconciliation, bank + ledger).status_code == 201


def test_totals_that_differ_need_allow_difference_and_a_reason(api, ingest, reconciliation):
    bank = ingest(record("bank", 1, 3000))
    ledger = ingest(record("ledger", 1, 2950))

    refused = manual(api, reconciliation, bank + ledger)
    assert refused.status_code == 422 and "differ by 50" in refused.json_body["message"]
    no_reason = manual(api, reconciliation, bank + ledger, allow_difference=True)
    assert no_reason.status_code == 422 and no_reason.json_body["errors"][0]["field"] == "reason"

    accepted = manual(api, reconciliation, bank + ledger, allow_difference=True, reason="bank fee of 0.50")

    assert accepted.status_code == 201
    assert accepted.json_body["reason"] == "bank fee of 0.50" and accepted.json_body["differences"] == {"amount": 50}


@pytest.mark.parametrize("case", ["one side only", "unknown record", "stream outside the reconciliation"])
def test_a_manual_match_that_cannot_be_is_refused_naming_the_problem(api, ingest, reconciliation, case):
    assert api.post("/v1/data_streams", {"key": "other", "name": "Other"}).status_code == 201
    bank = ingest(record("bank", 1, 1000), record("bank", 2, 1000))
    outside = ingest(record("other", 1, 1000))
    ids = {"one side only": bank, "unknown record": [bank[0], 99999],
           "stream outside the reconciliation": [bank[0], outside[0]]}[case]
    response = manual(api, reconciliation, ids)
    assert response.status_code == 422, response.json_body
    assert response.json_body["errors"][0]["field"].startswith("record_ids")


def test_a_record_already_matched_in_the_reconciliation_is_a_conflict(api, ingest, reconciliation):
    bank = ingest(record("bank", 1, 1000))
    ledger = ingest(record("ledger", 1, 1000), record("ledger", 2, 1000))
    assert manual(api, reconciliation, [bank[0], ledger[0]]).status_code == 201

    response = manual(api, reconciliation, [bank[0], ledger[1]])

    assert response.status_code == 409 and str(bank[0]) in response.json_body["message"]
    assert api.get(f"/v1/records/{ledger[1]}").json_body["status"] == "unreconciled"


def test_an_unknown_reconciliation_is_not_found(api, ingest, reconciliation):
    assert api.post("/v1/reconciliation_matches", {"reconciliation_id": 404, "record_ids": [1]}).status_code == 404


class ClaimsThenDies:
    """The matches repository, whose commit fails (the request dies after the claims)."""

    def __init__(self, matches) -> None:
        self._matches = matches

    def __getattr__(self, name):
        return getattr(self._matches, name)

    def commit_many(self, matches):
        raise RuntimeError("throttled")


def test_a_manual_match_that_fails_part_way_leaves_nothing_claimed(api, services, ingest, reconciliation):
    from dataclasses import replace

    from chalicelib.services.matches import create_manual_match

    bank = ingest(record("bank", 1, 1000))
    ledger = ingest(record("ledger", 1, 1000))
    ports = replace(services.ports, matches=ClaimsThenDies(services.matches))

    with pytest.raises(RuntimeError):
        create_manual_match(ports, "acme", reconciliation["id"], bank + ledger, False, None)

    assert api.get(f"/v1/records/{bank[0]}").json_body["status"] == "unreconciled"
    assert services.matches.pending() == []
    assert manual(api, reconciliation, bank + ledger).status_code == 201  # nothing stands in the way


def test_a_match_left_begun_by_a_dead_request_is_rolled_back_by_the_sweeper(api, services, ingest, reconciliation):
    from datetime import timedelta

    from chalicelib.domain.clock import utc_now
    from chalicelib.domain.matches import Match, MatchMember, MatchStatus
    from chalicelib.services.matches import sweep_pending, used_by, write_matches

    bank = ingest(record("bank", 1, 1000))
    ledger = ingest(record("ledger", 1, 1000))
    match = Match(environment="acme", id=services.counters.next_id("acme", "match"),
                  reconciliation_id=reconciliation["id"], status=MatchStatus.CONFIRMED, group_key="manual",
                  record_count=2, created_at=utc_now())
    services.matches.begin(match)
    members = [MatchMember("a", bank[0], "bank"), MatchMember("b", ledger[0], "ledger")]
    dying = ClaimsThenDies(services.matches)
    with pytest.raises(RuntimeError):  # the request dies after its claims, before its commit
        write_matches(dying, [(match, members)], used_by(services.reconciliations, "acme", ["bank", "ledger"]))
    assert api.get(f"/v1/records/{bank[0]}").json_body["status"] == "reconciled"
    assert api.get(f"/v1/reconciliation_matches/{match.id}").status_code == 404  # never visible

    assert sweep_pending(services.ports, now=utc_now() + timedelta(minutes=1)) == 0
    assert sweep_pending(services.ports, now=utc_now() + timedelta(minutes=6)) == 1

    assert api.get(f"/v1/records/{bank[0]}").json_body["status"] == "unreconciled"
    assert api.get(f"/v1/records/{ledger[0]}").json_body["status"] == "unreconciled"
    assert services.matches.pending() == []
    assert manual(api, reconciliation, bank + ledger).status_code == 201


def test_records_of_an_import_still_writing_cannot_be_matched_by_hand(api, services, ingest, reconciliation):
    bank = ingest(record("bank", 1, 1000))
    ledger = ingest(record("ledger", 1, 1000))
    job = services.ingestion_jobs.get("acme", api.get(f"/v1/records/{bank[0]}").json_body["file_import_id"])
    active = keys.active_job_index("acme", job.id)  # as if a chunk of it were being retried
    services.table.update(keys.ingestion_job("acme", job.id), "SET #s = :p, gsi2pk = :a, gsi2sk = :k",
                          names={"#s": "status"},
                          values={":p": "processing", ":a": active["gsi2pk"], ":k": active["gsi2sk"]})

    response = manual(api, reconciliation, bank + ledger)

    assert response.status_code == 409 and "still writing" in response.json_body["message"]


def test_a_manual_match_balances_amounts_kept_with_different_decimal_places(api, ingest, reconciliation):
    bank = ingest(record("bank", 1, 1250, decimal_places=2))
    ledger = ingest(record("ledger", 1, 125, decimal_places=1))
    other = ingest(record("ledger", 2, 1250, decimal_places=1))
    refused = manual(api, reconciliation, bank + other)
    assert refused.status_code == 422 and "differ by 11250" in refused.json_body["message"]
    assert manual(api, reconciliation, bank + ledger).status_code == 201


@pytest.mark.parametrize("body", [{"reconciliation_id": 10 ** 30, "record_ids": [1]},
                                  {"reconciliation_id": 1, "record_ids": [10 ** 2000]},
                                  {"reconciliation_id": 1, "record_ids": [0]}])
def test_ids_no_key_could_hold_are_refused_as_invalid(api, body):
    response = api.post("/v1/reconciliation_matches", body)
    assert response.status_code == 422, response.json_body


def test_a_match_id_filter_no_key_could_hold_is_invalid(api):
    assert api.get(f"/v1/records?reconciliation_match_id={10 ** 40}").status_code == 422
    assert api.get(f"/v1/reconciliation_matches?reconciliation_id={10 ** 40}").status_code == 422


def test_a_match_of_more_than_100_records_shows_its_count_and_lists_its_records_by_page(api, ingest, reconciliation):
    bank = ingest(record("bank", 1, 101))
    ledger = ingest(*[record("ledger", n, 1) for n in range(101)])

    created = manual(api, reconciliation, bank + ledger)

    assert created.status_code == 201
    match = api.get(f"/v1/reconciliation_matches/{created.json_body['id']}").json_body
    assert match["record_count"] == 102 and match["records"] is None
    small = manual(api, reconciliation, ingest(record("bank", 2, 5)) + ingest(record("ledger", 200, 5))).json_body
    assert small["record_count"] is None and len(small["records"]) == 2
    seen, cursor = [], None
    while True:
        page = api.get(f"/v1/records?reconciliation_match_id={match['id']}&limit=40"
                       + (f"&cursor={cursor}" if cursor else "")).json_body
        seen += [r["id"] for r in page["data"]]
        cursor = page["next_cursor"]
        if not cursor:
            break
    assert sorted(seen) == sorted(bank + ledger) and seen == sorted(seen, reverse=True)
