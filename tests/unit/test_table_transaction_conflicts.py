"""A single write of an item a transaction holds is refused for the moment by DynamoDB
(TransactionConflictException, which botocore does not retry): the table tries it again shortly;
a refused condition stays a ConditionFailed, other errors stay errors. Scripted with botocore's
Stubber, as DynamoDB answers."""
from __future__ import annotations

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError
from botocore.stub import Stubber

from chalicelib.adapters.dynamodb import table as table_module
from chalicelib.adapters.dynamodb.table import TRANSACTION_CONFLICT_ATTEMPTS, ConditionFailed, DynamoTable

KEY = {"pk": "E#acme#REC#1", "sk": "REC"}


@pytest.fixture
def stubbed(monkeypatch):
    monkeypatch.setattr(table_module.time, "sleep", lambda _seconds: None)
    client = boto3.client("dynamodb", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x",
                          config=Config(parameter_validation=False))  # as adapters/aws.py makes it
    with Stubber(client) as stubber:
        yield DynamoTable(client, "recon"), stubber


def conflict(stubber: Stubber, times: int) -> None:
    for _ in range(times):
        stubber.add_client_error("update_item", service_error_code="TransactionConflictException",
                                 service_message="Transaction is ongoing for the item", http_status_code=400)


def test_a_write_refused_by_a_transaction_in_flight_is_made_when_it_ends(stubbed):
    table, stubber = stubbed
    conflict(stubber, 3)
    stubber.add_response("update_item", {})
    table.update(KEY, "SET #s = :s", values={":s": "reconciled"}, names={"#s": "status"})
    stubber.assert_no_pending_responses()


def test_its_condition_is_still_its_condition(stubbed):
    table, stubber = stubbed
    conflict(stubber, 1)
    stubber.add_client_error("update_item", service_error_code="ConditionalCheckFailedException", http_status_code=400)
    with pytest.raises(ConditionFailed):
        table.update(KEY, "SET #s = :s", values={":s": "reconciled"}, names={"#s": "status"},
                     condition="attribute_exists(pk)")


def test_a_transaction_that_never_ends_fails_the_write_after_its_attempts(stubbed):
    table, stubber = stubbed
    conflict(stubber, TRANSACTION_CONFLICT_ATTEMPTS)
    with pytest.raises(ClientError) as failed:
        table.update(KEY, "SET #s = :s", values={":s": "reconciled"}, names={"#s": "status"})
    assert failed.value.response["Error"]["Code"] == "TransactionConflictException"
    stubber.assert_no_pending_responses()
