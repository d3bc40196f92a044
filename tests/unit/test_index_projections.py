"""Each index of the table projects what its readers use, and the local stack notices a change of it."""
from chalicelib.adapters.dynamodb import keys
from chalicelib.adapters.dynamodb.reconciliations import SWEEP_INDEX_ATTRIBUTES
from chalicelib.adapters.dynamodb.records import OPEN_RECORD_ATTRIBUTES
from chalicelib.local.provision import Resolver, _schema_of, load_template, table_definitions


def indexes():
    template = load_template()
    [table] = table_definitions(template, Resolver(template, {"DataBucketName": "b"}, "us-east-1"))
    return table, {i["IndexName"]: i["Projection"] for i in table["GlobalSecondaryIndexes"]}


def test_the_open_records_index_projects_exactly_what_its_readers_read():
    _, projections = indexes()
    assert projections["gsi5"]["ProjectionType"] == "INCLUDE"
    assert sorted(projections["gsi5"]["NonKeyAttributes"]) == sorted(OPEN_RECORD_ATTRIBUTES)


def test_the_template_keys_the_table_and_its_indexes_on_the_attributes_the_code_names():
    table, _ = indexes()

    def key_of(schema):  # (partition, sort): HASH sorts before RANGE
        return tuple(k["AttributeName"] for k in sorted(schema, key=lambda k: k["KeyType"]))

    assert key_of(table["KeySchema"]) == (keys.BASE_TABLE.partition_key, keys.BASE_TABLE.sort_key)
    assert [(i["IndexName"], *key_of(i["KeySchema"])) for i in table["GlobalSecondaryIndexes"]] == [
        (i.name, i.partition_key, i.sort_key) for i in keys.GLOBAL_SECONDARY_INDEXES]


def test_the_sweepers_index_projects_what_it_reads_of_every_reconciliation():
    _, projections = indexes()
    assert projections["gsi2"]["ProjectionType"] == "INCLUDE"
    assert sorted(projections["gsi2"]["NonKeyAttributes"]) == sorted(SWEEP_INDEX_ATTRIBUTES)


def test_indexes_read_for_keys_only_project_keys_only_and_the_api_lists_project_whole_items():
    _, projections = indexes()
    assert {name: p["ProjectionType"] for name, p in projections.items()} == {
        "gsi1": "ALL", "gsi2": "INCLUDE", "gsi3": "KEYS_ONLY", "gsi4": "KEYS_ONLY", "gsi5": "INCLUDE"}


def test_the_projected_attributes_stay_within_dynamodbs_limit_of_100():
    _, projections = indexes()
    assert sum(len(p.get("NonKeyAttributes", [])) for p in projections.values()) <= 100


def test_a_new_record_sits_in_two_indexes_the_matched_index_only_once_matched_and_the_open_one_until_reconciled():
    new_keys = keys.record_indexes("acme", 7, "bank", "unreconciled")
    partly_keys = keys.record_indexes("acme", 7, "bank", "partially_reconciled")
    done_keys = keys.record_indexes("acme", 7, "bank", "reconciled")
    assert sorted(new_keys) == ["gsi1pk", "gsi1sk", "gsi5pk", "gsi5sk"]
    assert sorted(partly_keys) == ["gsi1pk", "gsi1sk", "gsi4pk", "gsi4sk", "gsi5pk", "gsi5sk"]
    assert sorted(done_keys) == ["gsi1pk", "gsi1sk", "gsi4pk", "gsi4sk"]


def test_the_guards_of_one_external_id_share_a_partition_one_per_stream():
    bank, ledger = keys.external_id_guard("acme", "bank", "tx-1"), keys.external_id_guard("acme", "ledger", "tx-1")
    assert bank["pk"] == ledger["pk"] == keys.external_id_guards_pk("acme", "tx-1") and bank["sk"] != ledger["sk"]
    assert keys.external_id_guard("other", "bank", "tx-1")["pk"] != bank["pk"]


def test_a_holder_is_read_from_the_holds_of_its_reconciliation_only():
    holds = {keys.exception_hold(3, 40), keys.exception_hold(31, 41)}
    assert keys.holder_in(holds, 3) == 40 and keys.holder_in(holds, 31) == 41
    assert keys.holder_in(holds, 1) is None and keys.holder_in(None, 3) is None


def test_the_local_schema_changes_with_the_projected_attributes_but_not_with_their_order():
    table, _ = indexes()

    def with_gsi5(attributes):
        projection = {"ProjectionType": "INCLUDE", "NonKeyAttributes": attributes}
        changed = {**table, "GlobalSecondaryIndexes": [{**i, "Projection": projection} if i["IndexName"] == "gsi5" else i
                                                       for i in table["GlobalSecondaryIndexes"]]}
        return _schema_of(changed)

    assert with_gsi5(["amount", "date"]) == with_gsi5(["date", "amount"])
    assert with_gsi5(["amount", "date"]) != with_gsi5(["amount"])
    assert with_gsi5(list(OPEN_RECORD_ATTRIBUTES)) == _schema_of(table)
