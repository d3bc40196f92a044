"""TransactWriteItems on the local stack's DynamoDB (chalicelib/local/dynamodb_transactions.js: dynalite
has none), held to moto's: the same requests give the same outcomes, cancellation reasons and items,
and under concurrent transactions each is made whole or not at all."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws

from chalicelib.local.stack import DYNALITE_CLI
from tests.support.local_dynamodb import local_dynalite

TABLE = "transactions"


def _create_table(client) -> None:
    client.create_table(
        TableName=TABLE, BillingMode="PAY_PER_REQUEST",
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        AttributeDefinitions=[{"AttributeName": name, "AttributeType": "S"} for name in ("pk", "sk", "owner")],
        GlobalSecondaryIndexes=[{"IndexName": "byOwner", "KeySchema": [{"AttributeName": "owner", "KeyType": "HASH"}],
                                 "Projection": {"ProjectionType": "ALL"}}])
    client.get_waiter("table_exists").wait(TableName=TABLE, WaiterConfig={"Delay": 0.1})


def _key(name: str) -> dict[str, Any]:
    return {"pk": {"S": "p"}, "sk": {"S": name}}


def _take(name: str, owner: str, **extra: Any) -> dict[str, Any]:
    return {"Update": {"TableName": TABLE, "Key": _key(name), "UpdateExpression": "SET #o = :o ADD n :one",
                       "ConditionExpression": "attribute_exists(pk) AND attribute_not_exists(#o)",
                       "ExpressionAttributeNames": {"#o": "owner"},
                       "ExpressionAttributeValues": {":o": {"S": owner}, ":one": {"N": "1"}}, **extra}}


def _outcome(client, actions: list[dict[str, Any]]) -> Any:
    try:
        client.transact_write_items(TransactItems=actions)
        return "made"
    except ClientError as error:
        reasons = error.response.get("CancellationReasons")
        return (error.response["Error"]["Code"],
                None if reasons is None else [(r.get("Code"), r.get("Item")) for r in reasons])


def _state(client) -> dict[str, Any]:
    items = sorted(client.scan(TableName=TABLE)["Items"], key=lambda item: item["sk"]["S"])
    owned = {owner: sorted(item["sk"]["S"] for item in client.query(
        TableName=TABLE, IndexName="byOwner", KeyConditionExpression="#o = :o",
        ExpressionAttributeNames={"#o": "owner"}, ExpressionAttributeValues={":o": {"S": owner}})["Items"])
        for owner in ("first", "second")}
    return {"items": items, "owned": owned}


def _scenario(client) -> list[Any]:
    """The same requests, whatever answers them: what each answered and what the table holds after."""
    _create_table(client)
    for name in ("a1", "a2", "a3"):
        client.put_item(TableName=TABLE, Item={**_key(name), "v": {"S": "one"}})
    seen: list[Any] = []
    # all pass: two claims, a new item, a check
    seen.append(_outcome(client, [
        _take("a1", "first"), _take("a2", "first"),
        {"Put": {"TableName": TABLE, "Item": {**_key("a4"), "v": {"S": "new"}},
                 "ConditionExpression": "attribute_not_exists(pk)"}},
        {"ConditionCheck": {"TableName": TABLE, "Key": _key("a3"), "ConditionExpression": "v = :v",
                            "ExpressionAttributeValues": {":v": {"S": "one"}}}}]))
    seen.append(_state(client))
    # one fails: nothing is made, the reasons say which, with the item where asked
    seen.append(_outcome(client, [
        _take("a3", "second"), _take("a1", "second", ReturnValuesOnConditionCheckFailure="ALL_OLD"),
        {"Delete": {"TableName": TABLE, "Key": _key("a4")}}, _take("a9", "second")]))
    seen.append(_state(client))
    # refused whole: two actions on one item; more than 100 actions
    seen.append(_outcome(client, [_take("a3", "second"), _take("a3", "first")])[0])
    seen.append(_outcome(client, [_take(f"b{n}", "second") for n in range(101)])[0])
    # then a delete and a claim together
    seen.append(_outcome(client, [{"Delete": {"TableName": TABLE, "Key": _key("a4")}}, _take("a3", "second")]))
    seen.append(_state(client))
    return seen


@pytest.mark.xdist_group("local-dynalite")
def test_transactions_on_the_local_dynamodb_answer_as_moto_does(tmp_path, monkeypatch):
    with local_dynalite(DYNALITE_CLI, tmp_path / "store") as client:
        local = _scenario(client)
    for name, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                        "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(name, value)
    with mock_aws():
        reference = _scenario(boto3.client("dynamodb", region_name="us-east-1"))
    assert local == reference
    assert local[0] == "made" and local[2][0] == "TransactionCanceledException"  # the scenario does what it says
    assert [code for code, _ in local[2][1]] == ["None", "ConditionalCheckFailed", "None", "ConditionalCheckFailed"]
    assert local[4:6] == ["ValidationException", "ValidationException"]


@pytest.mark.xdist_group("local-dynalite")
def test_concurrent_transactions_on_the_local_dynamodb_are_each_whole_or_nothing(tmp_path):
    """Transaction i takes items i and i+1 of a ring of 12, from 12 threads at once, beside single
    conditional UpdateItems taking every third item, eight rounds on fresh items: each transaction
    made holds both its items, one refused holds neither, and each single write made holds its own."""
    with local_dynalite(DYNALITE_CLI, tmp_path / "store") as client:
        _create_table(client)
        ring = 12
        for round_ in range(8):
            names = [f"r{round_}-{n:02d}" for n in range(ring)]
            for name in names:
                client.put_item(TableName=TABLE, Item=_key(name))

            def take(i: int, names: list[str] = names) -> tuple[str, Any]:
                if i >= ring:  # a single write of item (i - ring) * 3
                    single = _take(names[(i - ring) * 3], f"s{i}")["Update"]
                    try:
                        client.update_item(**single)
                        return f"s{i}", "made"
                    except ClientError as error:
                        return f"s{i}", error.response["Error"]["Code"]
                return f"t{i}", _outcome(client, [_take(names[i], f"t{i}"), _take(names[(i + 1) % ring], f"t{i}")])

            with ThreadPoolExecutor(ring + ring // 3) as pool:
                outcomes = dict(pool.map(take, range(ring + ring // 3)))
            owners = {item["sk"]["S"]: item.get("owner", {}).get("S") for item in client.scan(TableName=TABLE)["Items"]
                      if item["sk"]["S"] in names}
            for i in range(ring):
                mine = [owners[names[i]] == f"t{i}", owners[names[(i + 1) % ring]] == f"t{i}"]
                made = outcomes[f"t{i}"] == "made"
                assert mine == [made, made], (i, outcomes, owners)
                assert made or outcomes[f"t{i}"][0] == "TransactionCanceledException"
            for n in range(ring // 3):
                single = f"s{ring + n}"
                assert (owners[names[n * 3]] == single) == (outcomes[single] == "made"), (single, outcomes, owners)
                assert outcomes[single] in ("made", "ConditionalCheckFailedException")
