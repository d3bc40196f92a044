"""The test suite's speed-ups of moto (tests/conftest.py, and the deployment proofs' server in
tests/deploy/moto_server.py) answer exactly what moto itself does."""
import base64
import io
import zipfile

import boto3
import pytest
from moto import mock_aws
from moto.awslambda.models import _zipfile_content

from tests.conftest import MOTO_CAST_VALUE, MOTO_ITEM_OPERATIONS, MOTO_PLAIN_JSON
from tests.deploy.moto_server import decoded_once

ITEM = {"pk": {"S": "a"}, "sk": {"S": "1"}, "n": {"N": "-12.50"}, "b": {"B": b"\x00\xffraw"}, "t": {"BOOL": True},
        "z": {"NULL": True}, "ss": {"SS": ["x", "y"]}, "ns": {"NS": ["1", "2"]}, "bs": {"BS": [b"\x01", b"\x02"]},
        "m": {"M": {"inner": {"L": [{"S": "é"}, {"N": "3"}, {"M": {}}]}}}, "gsi1pk": {"S": "g"}, "gsi1sk": {"S": "1"}}


def answers(client) -> list[dict]:
    """Every item operation once, each answer without its request metadata."""
    table = "t"
    calls = [
        lambda: client.put_item(TableName=table, Item=ITEM, ReturnValues="ALL_OLD"),
        lambda: client.put_item(TableName=table, Item={**ITEM, "sk": {"S": "2"}}),
        lambda: client.get_item(TableName=table, Key={"pk": {"S": "a"}, "sk": {"S": "1"}}),
        lambda: client.update_item(TableName=table, Key={"pk": {"S": "a"}, "sk": {"S": "1"}},
                                   UpdateExpression="SET n = :n", ExpressionAttributeValues={":n": {"N": "7"}},
                                   ReturnValues="ALL_NEW"),
        lambda: client.query(TableName=table, KeyConditionExpression="pk = :p",
                             ExpressionAttributeValues={":p": {"S": "a"}}, Limit=1),
        lambda: client.query(TableName=table, IndexName="gsi1", KeyConditionExpression="gsi1pk = :p",
                             ExpressionAttributeValues={":p": {"S": "g"}}, Select="COUNT"),
        lambda: client.scan(TableName=table, Limit=1),
        lambda: client.batch_get_item(RequestItems={table: {"Keys": [{"pk": {"S": "a"}, "sk": {"S": "1"}},
                                                                     {"pk": {"S": "a"}, "sk": {"S": "9"}}]}}),
        lambda: client.transact_get_items(TransactItems=[{"Get": {"TableName": table,
                                                                  "Key": {"pk": {"S": "a"}, "sk": {"S": "2"}}}}]),
        lambda: client.batch_write_item(RequestItems={table: [{"PutRequest": {"Item": {**ITEM, "sk": {"S": "3"}}}}]}),
        lambda: client.delete_item(TableName=table, Key={"pk": {"S": "a"}, "sk": {"S": "2"}}, ReturnValues="ALL_OLD"),
    ]
    with mock_aws():
        client.create_table(
            TableName=table, BillingMode="PAY_PER_REQUEST",
            AttributeDefinitions=[{"AttributeName": n, "AttributeType": "S"} for n in ("pk", "sk", "gsi1pk", "gsi1sk")],
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
            GlobalSecondaryIndexes=[{"IndexName": "gsi1", "Projection": {"ProjectionType": "ALL"}, "KeySchema": [
                {"AttributeName": "gsi1pk", "KeyType": "HASH"}, {"AttributeName": "gsi1sk", "KeyType": "RANGE"}]}])
        found = []
        for call in calls:
            answer = call()
            answer.pop("ResponseMetadata")
            found.append(answer)
        return found


@pytest.fixture
def moto_serializes():
    MOTO_PLAIN_JSON["on"] = False
    try:
        yield
    finally:
        MOTO_PLAIN_JSON["on"] = True


def test_the_plain_json_answers_equal_motos_own(moto_serializes):
    client = boto3.client("dynamodb", region_name="us-east-1")
    own = answers(client)
    MOTO_PLAIN_JSON["on"] = True
    plain = answers(client)
    assert plain == own
    assert {"Items", "Count", "LastEvaluatedKey"} <= set(own[4]) and own[2]["Item"]["b"] == {"B": b"\x00\xffraw"}
    assert len(MOTO_ITEM_OPERATIONS) == 9


def test_the_direct_cast_of_scalars_equals_motos_own_and_compares_alike():
    from moto.dynamodb.models.dynamo_type import DynamoType

    own = MOTO_CAST_VALUE["cast_value"]
    values = [DynamoType(v) for v in ITEM.values()] + [
        DynamoType({"S": "1"}), DynamoType({"N": "1"}), DynamoType({"N": "1.0"}), DynamoType({"B": b"1"}),
        DynamoType({"BOOL": False}), DynamoType({"S": ""})]
    for value in values:
        assert value.cast_value == own(value), value
    for left in values:
        for right in values:
            expected = left.type == right.type and own(left) == own(right)
            assert (left == right, left != right) == (expected, not expected), (left, right)
    assert DynamoType({"N": "1"}) == DynamoType({"N": "1.0"}) and DynamoType({"S": "1"}) != DynamoType({"N": "1"})


def _zip_text(source: str) -> str:
    """A function's zip as it comes in a CreateFunction or UpdateFunctionCode request: base64 text, a new
    string each time (as each request's body is)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("app.py", source)
    return base64.b64encode(buffer.getvalue()).decode()


def test_the_lambda_code_decoded_once_equals_motos_own_for_the_same_zip_and_for_another():
    decoding = decoded_once(_zipfile_content)
    first, again, other = _zip_text("v = 1\n"), _zip_text("v = 1\n"), _zip_text("v = 2\n")
    assert first == again and first is not again
    for text in (first, again, other, first, other, other):
        assert decoding(text) == _zipfile_content(text)
    assert decoding(other)[0] != decoding(first)[0]


def test_a_transaction_copies_its_table_once_and_a_cancelled_one_still_rolls_back(monkeypatch):
    """tests/conftest.py's back-up of each table once a TransactWriteItems: moto applies the actions
    one by one, so a condition failing at the last must undo the writes before it."""
    import copy

    from moto.dynamodb import models

    copies, deepcopy = [], copy.deepcopy

    def counted(value, memo=None):
        if isinstance(value, models.Table):
            copies.append(value)
        return deepcopy(value, memo)
    monkeypatch.setattr(copy, "deepcopy", counted)
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
        client.create_table(TableName="t", BillingMode="PAY_PER_REQUEST",
                            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
                            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}])
        for n in range(5):
            client.put_item(TableName="t", Item={"pk": {"S": f"k{n}"}, "v": {"N": "0"}})

        def bump(n: int, condition: str = "v = :zero") -> dict:
            return {"Update": {"TableName": "t", "Key": {"pk": {"S": f"k{n}"}}, "UpdateExpression": "SET v = :one",
                               "ConditionExpression": condition,
                               "ExpressionAttributeValues": {":one": {"N": "1"}, ":zero": {"N": "0"}}}}

        client.transact_write_items(TransactItems=[bump(0), bump(1)])
        with pytest.raises(client.exceptions.TransactionCanceledException) as cancelled:
            client.transact_write_items(TransactItems=[bump(2), bump(3), bump(0)])  # k0 is 1 now: the last fails

        reasons = [reason["Code"] for reason in cancelled.value.response["CancellationReasons"]]
        values = {item["pk"]["S"]: item["v"]["N"] for item in client.scan(TableName="t")["Items"]}
    assert reasons == ["None", "None", "ConditionalCheckFailed"]
    assert values == {"k0": "1", "k1": "1", "k2": "0", "k3": "0", "k4": "0"}  # k2 and k3 rolled back
    assert len(copies) == 2  # once a transaction, not once an action
    assert models.copy is copy  # the module's own again, after a transaction made and one cancelled
