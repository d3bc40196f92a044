"""The local stack's SQS journal (chalicelib/local/sqs_journal.py) on moto in-process: what a queue
holds when the stack dies comes back when the provisioner creates the queue again at the next start.

A restart here is moto's SQS backend emptied (as a new server process starts) and the journal
opened again on the same file; the boto3 calls are those the service and the local runtime make."""
from __future__ import annotations

import json
import time
from contextlib import contextmanager
from pathlib import Path

import boto3
import pytest
from moto import mock_aws
from moto.sqs.models import Queue, SQSBackend, sqs_backends

from chalicelib.local.sqs_journal import SqsJournal, journaled

ACCOUNT, REGION = "123456789012", "us-east-1"
MAX_RECEIVES = 2


class Stack:
    """moto's SQS with the journal, restartable; queues made as the provisioner makes them."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.sqs = boto3.client("sqs", region_name=REGION)
        self._journaled = None

    def start(self) -> Stack:
        self._journaled = journaled(SqsJournal(self.path))
        self.journal = self._journaled.__enter__()
        dead = self.sqs.create_queue(QueueName="work-dead")["QueueUrl"]
        dead_arn = self.sqs.get_queue_attributes(QueueUrl=dead, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        self.sqs.create_queue(QueueName="work", Attributes={
            "VisibilityTimeout": "30",
            "RedrivePolicy": json.dumps({"deadLetterTargetArn": dead_arn, "maxReceiveCount": MAX_RECEIVES})})
        self.work, self.dead = self.url("work"), dead
        return self

    def url(self, name: str) -> str:
        return self.sqs.get_queue_url(QueueName=name)["QueueUrl"]

    def crash(self) -> None:
        """The process dies: moto's memory is gone, the journal's file stays as it was."""
        sqs_backends[ACCOUNT][REGION].reset()
        self._journaled.__exit__(None, None, None)
        self.journal.close()

    def restart(self) -> Stack:
        self.crash()
        return self.start()

    def receive(self, url: str, count: int = 10) -> list[dict]:
        return self.sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=count, WaitTimeSeconds=0,
                                        AttributeNames=["All"], MessageAttributeNames=["All"]).get("Messages", [])

    def bodies(self, url: str) -> list[tuple[str, int]]:
        """(body, receive count) of every message visible in the queue, receiving them."""
        return [(m["Body"], int(m["Attributes"]["ApproximateReceiveCount"])) for m in self.receive(url)]


@pytest.fixture
def stack(tmp_path):
    with mock_aws():
        running = Stack(tmp_path / "sqs.sqlite3").start()
        yield running
        running.crash()


def test_sent_messages_come_back_after_a_crash_in_the_order_they_were_sent(stack):
    for n in range(5):
        stack.sqs.send_message(QueueUrl=stack.work, MessageBody=f"m{n}")
    stack.sqs.send_message_batch(QueueUrl=stack.work, Entries=[{"Id": str(n), "MessageBody": f"b{n}"}
                                                                for n in range(3)])

    stack.restart()

    assert stack.bodies(stack.work) == [(f"m{n}", 1) for n in range(5)] + [(f"b{n}", 1) for n in range(3)]


def test_deleted_messages_stay_deleted_and_a_received_one_comes_back_with_its_receive_count(stack):
    for n in range(4):
        stack.sqs.send_message(QueueUrl=stack.work, MessageBody=f"m{n}")
    first, second, third = stack.receive(stack.work, count=3)
    stack.sqs.delete_message(QueueUrl=stack.work, ReceiptHandle=first["ReceiptHandle"])
    assert stack.sqs.delete_message_batch(QueueUrl=stack.work, Entries=[
        {"Id": "0", "ReceiptHandle": second["ReceiptHandle"]}])["Successful"] == [{"Id": "0"}]
    # the third was received and never deleted: its consumer died with the stack

    stack.restart()

    assert sorted(stack.bodies(stack.work)) == [(third["Body"], 2), ("m3", 1)]


def test_a_message_received_too_often_still_goes_to_the_dead_letter_queue_across_restarts(stack):
    stack.sqs.send_message(QueueUrl=stack.work, MessageBody="poison")
    assert stack.bodies(stack.work) == [("poison", 1)]
    stack.restart()
    [message] = stack.receive(stack.work)
    assert message["Attributes"]["ApproximateReceiveCount"] == str(MAX_RECEIVES)
    stack.sqs.change_message_visibility(QueueUrl=stack.work, ReceiptHandle=message["ReceiptHandle"],
                                        VisibilityTimeout=0)
    stack.restart()

    assert stack.receive(stack.work) == []  # past maxReceiveCount: moved, not delivered
    stack.restart()
    assert stack.bodies(stack.dead) == [("poison", MAX_RECEIVES + 1)]


def test_purged_and_deleted_queues_forget_their_messages(stack):
    stack.sqs.send_message(QueueUrl=stack.work, MessageBody="purged")
    stack.sqs.send_message(QueueUrl=stack.dead, MessageBody="dropped with its queue")
    stack.sqs.purge_queue(QueueUrl=stack.work)
    stack.sqs.delete_queue(QueueUrl=stack.dead)

    stack.restart()

    assert stack.receive(stack.work) == [] and stack.receive(stack.dead) == []


def test_message_attributes_binary_ones_too_survive(stack):
    attributes = {"kind": {"DataType": "String", "StringValue": "bulk"},
                  "blob": {"DataType": "Binary", "BinaryValue": b"\x00\xffraw"}}
    stack.sqs.send_message(QueueUrl=stack.work, MessageBody="with attributes", MessageAttributes=attributes)

    stack.restart()

    [message] = stack.receive(stack.work)
    assert message["MessageAttributes"] == {"kind": {"DataType": "String", "StringValue": "bulk"},
                                            "blob": {"DataType": "Binary", "BinaryValue": b"\x00\xffraw"}}


def test_messages_past_the_queue_retention_are_not_restored(stack):
    stack.sqs.send_message(QueueUrl=stack.work, MessageBody="old")
    stack.sqs.send_message(QueueUrl=stack.work, MessageBody="new")
    with stack.journal.transaction() as db:  # sent five days ago; the queue keeps four (moto's default)
        db.execute("UPDATE messages SET message = json_set(message, '$.sent_timestamp', ?) WHERE message ->> "
                   "'$.body' = 'old'", (int((time.time() - 5 * 86400) * 1000),))

    stack.restart()

    assert stack.bodies(stack.work) == [("new", 1)]
    assert [m.message["body"] for m in stack.journal.messages_of(f"{ACCOUNT}/{REGION}/work")] == ["new"]


def test_a_batch_is_one_commit():
    with mock_aws():
        journal = Counting(":memory:")
        with journaled(journal):
            sqs = boto3.client("sqs", region_name=REGION)
            url = sqs.create_queue(QueueName="batched")["QueueUrl"]
            sqs.send_message_batch(QueueUrl=url, Entries=[{"Id": str(n), "MessageBody": str(n)} for n in range(10)])
            assert journal.commits == 1
            received = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
            sqs.delete_message_batch(QueueUrl=url, Entries=[{"Id": str(n), "ReceiptHandle": m["ReceiptHandle"]}
                                                            for n, m in enumerate(received)])
            assert journal.commits == 3  # and one for the receive counts
            assert journal.messages_of(f"{ACCOUNT}/{REGION}/batched") == []


def test_the_hooks_are_undone_on_leaving(tmp_path):
    before = (Queue.add_message, Queue.delete_message, SQSBackend.receive_message, SQSBackend.create_queue)
    with journaled(SqsJournal(tmp_path / "sqs.sqlite3")):
        assert Queue.add_message is not before[0]
    assert (Queue.add_message, Queue.delete_message, SQSBackend.receive_message, SQSBackend.create_queue) == before


class Counting(SqsJournal):
    def __init__(self, path) -> None:
        super().__init__(path)
        self.commits = 0

    @contextmanager
    def transaction(self):
        outermost = self._depth == 0
        with super().transaction() as db:
            yield db
        self.commits += outermost
