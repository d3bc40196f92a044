"""Worlds the suite builds once and restores (tests/support/worlds.py): a restore gives back what
moto held at the snapshot, whatever came after, and a restored world works like a built one."""
import boto3
from moto import mock_aws

from tests.support.worlds import MotoSnapshot, WorldCache


def _body(s3, key: str) -> bytes:
    return s3.get_object(Bucket="world-bucket", Key=key)["Body"].read()


def test_a_restore_gives_back_the_snapshot_and_nothing_that_came_after():
    with mock_aws():
        s3, sqs = boto3.client("s3", region_name="us-east-1"), boto3.client("sqs", region_name="us-east-1")
        dynamodb = boto3.client("dynamodb", region_name="us-east-1")
        s3.create_bucket(Bucket="world-bucket")
        s3.put_object(Bucket="world-bucket", Key="k", Body=b"before")
        url = sqs.create_queue(QueueName="q")["QueueUrl"]
        sqs.send_message(QueueUrl=url, MessageBody="m1")
        snapshot = MotoSnapshot()

        s3.put_object(Bucket="world-bucket", Key="k", Body=b"after")
        s3.put_object(Bucket="world-bucket", Key="later", Body=b"x")
        sqs.receive_message(QueueUrl=url)
        dynamodb.create_table(TableName="later", BillingMode="PAY_PER_REQUEST",
                              KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
                              AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}])
        snapshot.restore()

        assert _body(s3, "k") == b"before"
        assert [o["Key"] for o in s3.list_objects_v2(Bucket="world-bucket")["Contents"]] == ["k"]
        assert dynamodb.list_tables()["TableNames"] == []
        sqs.send_message(QueueUrl=url, MessageBody="m2")  # the queue's condition is a working one
        received = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
        assert sorted(m["Body"] for m in received) == ["m1", "m2"]

        s3.put_object(Bucket="world-bucket", Key="k", Body=b"changed by a test")
        snapshot.restore()  # a second restore is the snapshot again, not the first restore's changes
        assert _body(s3, "k") == b"before"


def test_a_world_is_built_by_the_first_test_that_asks_and_restored_for_the_others():
    worlds, builds = WorldCache(), []

    def build():
        builds.append(1)
        boto3.client("s3", region_name="us-east-1").create_bucket(Bucket="world-bucket")
        return "value"

    for _ in range(3):
        with mock_aws():
            assert worlds.restore_or_build("w", build) == "value"
            assert [b["Name"] for b in boto3.client("s3", region_name="us-east-1").list_buckets()["Buckets"]] == ["world-bucket"]
    assert len(builds) == 1
