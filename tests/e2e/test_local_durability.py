"""The local stack keeps S3 objects and queued SQS messages on disk: every process of it killed with
SIGKILL, then started again on the same data directory, gives back every object (a presigned upload
too) and every undeleted message (one received and never deleted too, with its receive count)."""
from __future__ import annotations

import hashlib
import os
import signal
import time
import uuid
from pathlib import Path

import boto3
import requests

from chalicelib.local.launcher import StackProcess
from chalicelib.local.processes import descendants, pid_alive
from chalicelib.local.stack import running_stack


def clients(data_dir: Path):
    info = running_stack(data_dir)
    assert info is not None and info.s3_endpoint
    fixed = {"region_name": "us-east-1", "aws_access_key_id": "local", "aws_secret_access_key": "local"}
    s3 = boto3.client("s3", endpoint_url=info.s3_endpoint, **fixed)
    sqs = boto3.client("sqs", endpoint_url=info.aws_endpoint, **fixed)
    # Nothing consumes the dead-letter queue, so what is sent there stays until the test takes it.
    queue = sqs.get_queue_url(QueueName=f"{info.bulk_queue_name}-dlq")["QueueUrl"]
    return info, s3, sqs, queue


def kill_everything(data_dir: Path) -> None:
    """SIGKILL to the stack, its services and theirs (s3rver is the AWS server's child), at once."""
    info = running_stack(data_dir)
    assert info is not None
    pids = [info.pid, *(info.child_pids or [])]
    grandchildren = [child for pid in info.child_pids or [] for child in descendants(pid)[1:]]
    assert grandchildren, "s3rver, the AWS server's child, was not found"
    pids += grandchildren
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass  # it died first (a child dies with its parent)
    deadline = time.monotonic() + 10
    while any(pid_alive(pid) and not zombie(pid) for pid in pids):
        assert time.monotonic() < deadline, "the stack's processes did not die"
        time.sleep(0.05)


def zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return False


def test_objects_and_undeleted_messages_survive_sigkill_of_every_process(tmp_path):
    data_dir = tmp_path / "data"
    first = StackProcess(data_dir, api_key="rk_durable").start()
    try:
        info, s3, sqs, queue = clients(data_dir)
        bucket = info.bucket_name
        objects = {f"durability/{n}/part={n}.bin": os.urandom(1000 * (n + 1)) for n in range(3)}
        objects["durability/empty"] = b""
        for key, body in objects.items():
            s3.put_object(Bucket=bucket, Key=key, Body=body)
        upload = s3.generate_presigned_url("put_object", Params={"Bucket": bucket, "Key": "durability/upload.csv"},
                                           ExpiresIn=600)
        objects["durability/upload.csv"] = b"date,amount\n2026-11-01,1.00\n"
        assert requests.put(upload, data=objects["durability/upload.csv"], timeout=10).status_code == 200

        sent = [f"message {n} {uuid.uuid4().hex}" for n in range(5)]
        for body in sent:
            sqs.send_message(QueueUrl=queue, MessageBody=body)
        [in_flight] = sqs.receive_message(QueueUrl=queue, MaxNumberOfMessages=1, AttributeNames=["All"])["Messages"]
        assert in_flight["Attributes"]["ApproximateReceiveCount"] == "1"
        done = sqs.receive_message(QueueUrl=queue, MaxNumberOfMessages=1)["Messages"][0]
        sqs.delete_message_batch(QueueUrl=queue, Entries=[{"Id": "0", "ReceiptHandle": done["ReceiptHandle"]}])

        kill_everything(data_dir)
    finally:
        first.stop()

    second = StackProcess(data_dir, api_key="rk_durable").start()
    try:
        info, s3, sqs, queue = clients(data_dir)
        listed = {o["Key"]: o for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix="durability/")
                  for o in page.get("Contents", [])}
        assert set(listed) == set(objects)
        for key, body in objects.items():
            assert s3.get_object(Bucket=bucket, Key=key)["Body"].read() == body
            assert listed[key]["ETag"].strip('"') == hashlib.md5(body).hexdigest()
        # the one endpoint for all of AWS (AWS_ENDPOINT_URL) serves the same objects: S3 is forwarded to s3rver
        through_aws_endpoint = boto3.client("s3", endpoint_url=info.aws_endpoint, region_name="us-east-1",
                                            aws_access_key_id="local", aws_secret_access_key="local")
        assert through_aws_endpoint.get_object(Bucket=bucket, Key="durability/upload.csv")["Body"].read() == \
            objects["durability/upload.csv"]

        back = {}
        deadline = time.monotonic() + 10
        while len(back) < 4 and time.monotonic() < deadline:
            for message in sqs.receive_message(QueueUrl=queue, MaxNumberOfMessages=10, WaitTimeSeconds=1,
                                               AttributeNames=["All"]).get("Messages", []):
                back[message["Body"]] = int(message["Attributes"]["ApproximateReceiveCount"])
        expected = {body: 1 for body in sent if body != done["Body"]}
        expected[in_flight["Body"]] = 2  # received before the crash, and now again
        assert back == expected
    finally:
        second.stop()
