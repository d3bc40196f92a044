"""The lists sharded for a run's persist read as one, on moto: matched records by status and a
reconciliation's matches, newest first, page after page, those written before the shards (in
the unsharded partition) included."""
from chalicelib.adapters.dynamodb import keys
from tests.integration.conftest import record

RULE = {"name": "Amount", "priority": 1, "cardinality": "one_to_one",
        "conditions": [{"field": "amount", "operator": "equals"}]}
PAIRS = 7


def every_page(api, path: str, limit: int) -> list[int]:
    ids, cursor = [], None
    while True:
        body = api.get(f"{path}&limit={limit}" + (f"&cursor={cursor}" if cursor else "")).json_body
        ids += [item["id"] for item in body["data"]]
        cursor = body.get("next_cursor")
        if not cursor:
            return ids


def test_matched_records_and_matches_list_newest_first_across_shards_and_the_unsharded_partition(
        api, services, ingest, reconciliation):
    # Given a run that matched 7 pairs, one record and one match of which sit where they were
    # written before the lists were sharded
    assert api.post(f"/v1/reconciliations/{reconciliation['id']}/rules", RULE).status_code == 201
    records = ingest(*[record("bank", n, 100 + n) for n in range(PAIRS)])
    records += ingest(*[record("ledger", n, 100 + n) for n in range(PAIRS)])
    assert api.post(f"/v1/reconciliations/{reconciliation['id']}/runs").status_code == 202
    matches = every_page(api, f"/v1/reconciliation_matches?reconciliation_id={reconciliation['id']}", 100)
    assert len(matches) == PAIRS
    services.table.update(keys.record("acme", records[3]), "SET gsi4pk = :old",
                          values={":old": keys.records_with_status_pk("acme", "reconciled")})
    services.table.update(keys.match("acme", matches[2]), "SET gsi1pk = :old",
                          values={":old": keys.matches_of_reconciliation_pk("acme", reconciliation["id"])})

    # When both lists are read a few at a time
    listed_records = every_page(api, "/v1/records?status=reconciled", 3)
    listed_matches = every_page(api, f"/v1/reconciliation_matches?reconciliation_id={reconciliation['id']}", 2)

    # Then each lists everything once, newest first
    assert listed_records == sorted(records, reverse=True)
    assert listed_matches == sorted(matches, reverse=True)
