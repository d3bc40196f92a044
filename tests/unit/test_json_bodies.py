"""The DynamoDB client's request bodies made by json.dumps (`_JsonBodies`) against botocore's own
JSONSerializer, the reference: the same request (method, headers, body bytes) for every operation
and item the table sends, binary attributes included (those go to botocore)."""
from __future__ import annotations

import boto3
from botocore.serialize import create_serializer
from hypothesis import given, settings
from hypothesis import strategies as st

from chalicelib.adapters.dynamodb.table import _JsonBodies, send_json_bodies, serialize
from tests.unit.test_attribute_values import values

model = boto3.client("dynamodb", region_name="us-east-1", aws_access_key_id="x",
                     aws_secret_access_key="x").meta.service_model
botocore_serializer = create_serializer("json", include_validation=False)
ours = _JsonBodies(botocore_serializer)
items = st.dictionaries(st.text(max_size=6), values, max_size=5).map(
    lambda item: {"pk": "E#x#thing", "sk": "A", **item})


def same_request(operation: str, parameters: dict) -> None:
    operation_model = model.operation_model(operation)
    assert ours.serialize_to_request(parameters, operation_model) == \
        botocore_serializer.serialize_to_request(parameters, operation_model)


@settings(max_examples=200, deadline=None)
@given(items)
def test_puts_and_batches_as_botocore_writes_them(item):
    typed = serialize(item)
    same_request("PutItem", {"TableName": "t", "Item": typed, "ConditionExpression": "attribute_not_exists(pk)"})
    same_request("BatchWriteItem", {"RequestItems": {"t": [{"PutRequest": {"Item": typed}},
                                                           {"DeleteRequest": {"Key": serialize({"pk": "a", "sk": "b"})}}]}})
    same_request("BatchGetItem", {"RequestItems": {"t": {"Keys": [serialize({"pk": "a", "sk": "b"})] * 3,
                                                         "ConsistentRead": True,
                                                         "ProjectionExpression": "#proj0",
                                                         "ExpressionAttributeNames": {"#proj0": "owner"}}}})


@settings(max_examples=100, deadline=None)
@given(values, st.text(max_size=8))
def test_updates_and_queries_as_botocore_writes_them(value, text):
    same_request("UpdateItem", {"TableName": "t", "Key": serialize({"pk": text, "sk": "é"}),
                                "UpdateExpression": "SET #a = :v", "ExpressionAttributeNames": {"#a": text},
                                "ExpressionAttributeValues": serialize({":v": value}) or {":v": {"NULL": True}},
                                "ReturnValues": "ALL_NEW"})
    same_request("Query", {"TableName": "t", "IndexName": "gsi1", "KeyConditionExpression": "#p = :p",
                           "ExpressionAttributeNames": {"#p": "gsi1pk"},
                           "ExpressionAttributeValues": {":p": {"S": text}}, "Limit": 26,
                           "ScanIndexForward": False, "ConsistentRead": True})


def test_a_binary_attribute_goes_to_botocore():
    typed = serialize({"pk": "a", "sk": "b", "blob": b"\x00\xff"})
    request = ours.serialize_to_request({"TableName": "t", "Item": typed}, model.operation_model("PutItem"))
    assert b'"blob": {"B": "AP8="}' in request["body"]


def test_the_table_sends_json_bodies_once_per_client():
    client = boto3.client("dynamodb", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    send_json_bodies(client)
    send_json_bodies(client)
    assert isinstance(client._serializer, _JsonBodies)
    assert not isinstance(client._serializer._serializer, _JsonBodies)
