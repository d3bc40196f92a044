"""Issue 13: the local stack's S3 and SQS engines side by side on this machine.

S3: moto's server (in memory, what the stack used), s3rver 3.7.1 as shipped, s3rver with our fixes
(chalicelib/local/s3_server.js, what the stack uses), and the stack's AWS endpoint forwarding S3
to it. For each: startup (spawn to first answer), 1 MB objects put and got, 1 KB puts, a listing
of 1,200 keys through the paginator, a presigned PUT, the other calls the service makes, and
whether the objects survive a SIGKILL of the server.

SQS: moto's server, and the stack's AWS server with its journal (synchronous NORMAL and FULL):
each call the service and the local runtime make, at the queue depth the runtime sees, and whether
undeleted messages survive a SIGKILL. Also the journal's own cost, and moto's recorder (the only
persistence moto has) replayed after a restart.

    .venv/bin/python bench/local_storage.py [--objects 30] [--messages 1000]
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import boto3
import requests
from botocore.config import Config

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from chalicelib.local import processes  # noqa: E402
from chalicelib.local.aws_server import s3rver_command  # noqa: E402
from chalicelib.local.sqs_journal import SqsJournal  # noqa: E402
from chalicelib.local.stack import ROOT, LocalStack  # noqa: E402
from chalicelib.settings import Settings  # noqa: E402

BUCKET = "bench-bucket"
LISTED_KEYS = 1_200  # two pages of list_objects_v2
NO_RETRIES = Config(retries={"max_attempts": 1})


@dataclass
class Engine:
    """A server to measure: how to start it on a port and a directory, and the key it takes."""
    name: str
    command: Callable[[int, Path], list[str]]
    access_key: str = "local"
    env: dict[str, str] = field(default_factory=dict)
    running: subprocess.Popen[bytes] | None = None
    port: int = 0

    def start(self, directory: Path) -> float:
        """Seconds from spawning to the first HTTP answer."""
        directory.mkdir(parents=True, exist_ok=True)
        self.port = processes.free_port()
        began = time.perf_counter()
        env = {**os.environ, **self.env}
        self.running = subprocess.Popen(self.command(self.port, directory), cwd=ROOT, env=env,
                                        stdout=open(directory.parent / f"{directory.name}.log", "ab"),
                                        stderr=subprocess.STDOUT, start_new_session=True)
        while True:
            assert self.running.poll() is None, f"{self.name} exited; see {directory.parent}"
            try:
                requests.get(self.url, timeout=1)
                return time.perf_counter() - began
            except requests.ConnectionError:
                time.sleep(0.01)

    @property
    def url(self) -> str:
        return f"http://{processes.LOOPBACK}:{self.port}"

    def client(self, service: str):
        return boto3.client(service, endpoint_url=self.url, region_name="us-east-1", config=NO_RETRIES,
                            aws_access_key_id=self.access_key, aws_secret_access_key=self.access_key)

    def kill(self) -> None:
        """SIGKILL to the server and its children (the AWS server's s3rver)."""
        assert self.running is not None
        for pid in reversed(processes.descendants(self.running.pid)):
            os.kill(pid, signal.SIGKILL)
        self.running.wait()

    def stop(self) -> None:
        if self.running and self.running.poll() is None:
            self.running.terminate()
            self.running.wait(10)


def aws_server(synchronous: str = "NORMAL") -> Callable[[int, Path], list[str]]:
    def command(port: int, directory: Path) -> list[str]:
        return [sys.executable, "-m", "chalicelib.local.aws_server", "--port", str(port),
                "--journal", str(directory / "sqs.sqlite3"), "--journal-synchronous", synchronous,
                "--s3-port", str(processes.free_port()), "--s3-directory", str(directory / "s3"),
                "--s3-log", str(directory / "s3rver.log")]
    return command


def moto_server(port: int, directory: Path) -> list[str]:
    return [sys.executable, "-m", "moto.server", "-H", processes.LOOPBACK, "-p", str(port)]


def s3rver_as_shipped(port: int, directory: Path) -> list[str]:
    return ["node", str(ROOT / "node_modules" / "s3rver" / "bin" / "s3rver.js"), "-d", str(directory),
            "-a", processes.LOOPBACK, "-p", str(port), "-s"]


def median_ms(timings: list[float]) -> float:
    return statistics.median(timings) * 1000


def timed(call: Callable[[], object]) -> float:
    began = time.perf_counter()
    call()
    return time.perf_counter() - began


def check(call: Callable[[], bool]) -> str:
    try:
        return "ok" if call() else "wrong"
    except Exception as error:  # what the engine answered is the finding
        return f"fails ({type(error).__name__}: {str(error)[:60]})"


# S3 ----------------------------------------------------------------------------------------------

def bench_s3(engine: Engine, work: Path, objects: int) -> dict[str, str]:
    directory = work / engine.name.replace(" ", "-")
    startups = []
    for _ in range(3):
        startups.append(engine.start(directory))
        engine.stop()
    engine.start(directory)
    try:
        s3 = engine.client("s3")
        s3.create_bucket(Bucket=BUCKET)
        body = os.urandom(1 << 20)
        puts = [timed(lambda n=n: s3.put_object(Bucket=BUCKET, Key=f"big/{n}", Body=body)) for n in range(objects)]
        gets = [timed(lambda n=n: s3.get_object(Bucket=BUCKET, Key=f"big/{n}")["Body"].read()) for n in range(objects)]
        small = [timed(lambda n=n: s3.put_object(Bucket=BUCKET, Key=f"many/import={n}/part", Body=b"x" * 1024))
                 for n in range(LISTED_KEYS)]

        def listing() -> list[tuple[str, str]]:
            pages = s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix="many/")
            return [(o["Key"], o["ETag"]) for page in pages for o in page.get("Contents", [])]

        try:
            list_seconds = timed(listing)
            listed = listing()
            list_result = f"{list_seconds * 1000:.0f} ms" if len(listed) == LISTED_KEYS else f"{len(listed)} keys"
        except Exception as error:  # s3rver as shipped: its DES continuation token on OpenSSL 3
            listed, list_result = [], f"fails ({type(error).__name__}: {str(error)[:60]})"
        upload = s3.generate_presigned_url("put_object", Params={"Bucket": BUCKET, "Key": "uploads/f.csv"},
                                           ExpiresIn=600)
        presigned_start = time.perf_counter()
        presigned = requests.put(upload, data=b"date,amount\n2026-11-01,1.00\n", timeout=10)
        presigned_ms = (time.perf_counter() - presigned_start) * 1000
        row = {
            "startup (median of 3)": f"{median_ms(startups):.0f} ms",
            "1 MB put": f"{median_ms(puts):.1f} ms ({1 / statistics.median(puts):.0f} MB/s)",
            "1 MB get": f"{median_ms(gets):.1f} ms ({1 / statistics.median(gets):.0f} MB/s)",
            "1 KB put": f"{median_ms(small):.1f} ms",
            f"list {LISTED_KEYS:,} keys (paginator)": list_result,
            "presigned PUT (urllib3, 1 request)": (f"{presigned.status_code}, {presigned_ms:.1f} ms"
                                                   if presigned.ok else f"fails ({presigned.status_code})"),
            "ETag stable across listings": check(lambda: listing() == listed) if listed else "n/a (no listing)",
            "get with Range": check(lambda: s3.get_object(Bucket=BUCKET, Key="big/0", Range="bytes=0-9")["Body"].read()
                                    == body[:10]),
            "head_object size": check(lambda: s3.head_object(Bucket=BUCKET, Key="big/0")["ContentLength"] == len(body)),
            "copy_object, '=' in the key": check(lambda: bool(s3.copy_object(
                Bucket=BUCKET, Key="copied/part", CopySource={"Bucket": BUCKET, "Key": "many/import=1/part"}))
                and s3.get_object(Bucket=BUCKET, Key="copied/part")["Body"].read() == b"x" * 1024),
            "copy_object of a missing key: NoSuchKey": check(lambda: copy_missing_is_no_such_key(s3)),
            "delete_objects (1,000)": check(lambda: not s3.delete_objects(Bucket=BUCKET, Delete={
                "Objects": [{"Key": k} for k, _ in listed[:1000]], "Quiet": True}).get("Errors"))
            if listed else "n/a (no listing)",
            "EventBridge notification": check(lambda: bool(s3.put_bucket_notification_configuration(
                Bucket=BUCKET, NotificationConfiguration={"EventBridgeConfiguration": {}}))),
        }
        expected = hashlib.md5(body).hexdigest()
        engine.kill()
        engine.start(directory)
        s3 = engine.client("s3")
        row["objects after SIGKILL and restart"] = check(
            lambda: hashlib.md5(s3.get_object(Bucket=BUCKET, Key=f"big/{objects - 1}")["Body"].read()).hexdigest()
            == expected)
        return row
    finally:
        engine.stop()


def copy_missing_is_no_such_key(s3) -> bool:
    try:
        s3.copy_object(Bucket=BUCKET, Key="copied/none", CopySource={"Bucket": BUCKET, "Key": "no/such/key"})
    except s3.exceptions.NoSuchKey:
        return True
    return False


# SQS ---------------------------------------------------------------------------------------------

def bench_sqs(engine: Engine, work: Path, messages: int) -> dict[str, str]:
    """Calls at the queue depth the local runtime sees (a few messages): ten sent one at a time or in
    one batch, then received and deleted ten at a time, over and over."""
    directory = work / engine.name.replace(" ", "-").replace(",", "")
    startup = engine.start(directory)
    try:
        sqs = engine.client("sqs")
        url = sqs.create_queue(QueueName="bench")["QueueUrl"]
        sends: list[float] = []
        batches: list[float] = []
        receives: list[float] = []
        deletes: list[float] = []

        def drain(count: int) -> None:
            while count:
                began = time.perf_counter()
                got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, AttributeNames=["All"])["Messages"]
                receives.append(time.perf_counter() - began)
                deletes.append(timed(lambda got=got: sqs.delete_message_batch(QueueUrl=url, Entries=[
                    {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(got)])))
                count -= len(got)

        for _ in range(messages // 20):
            for n in range(10):
                sends.append(timed(lambda n=n: sqs.send_message(QueueUrl=url, MessageBody=json.dumps({"n": n}))))
            drain(10)
            batches.append(timed(lambda: sqs.send_message_batch(QueueUrl=url, Entries=[
                {"Id": str(n), "MessageBody": json.dumps({"n": n})} for n in range(10)])))
            drain(10)
        for n in range(5):
            sqs.send_message(QueueUrl=url, MessageBody=f"kept {n}")
        sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=1)  # received, never deleted
        engine.kill()
        engine.start(directory)
        sqs = engine.client("sqs")
        url = sqs.create_queue(QueueName="bench")["QueueUrl"]  # as the provisioner does at each start
        back = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"])
        cycle_seconds = statistics.median(batches) + statistics.median(receives) + statistics.median(deletes)
        return {
            "startup": f"{startup * 1000:.0f} ms",
            "send_message": f"{median_ms(sends):.1f} ms",
            "send_message_batch (10)": f"{median_ms(batches):.1f} ms",
            "receive_message (10, AttributeNames All)": f"{median_ms(receives):.1f} ms",
            "delete_message_batch (10)": f"{median_ms(deletes):.1f} ms",
            "10 messages sent in a batch, received, deleted": f"{10 / cycle_seconds:.0f} messages/s",
            "5 undeleted messages after SIGKILL and restart": back["Attributes"]["ApproximateNumberOfMessages"],
        }
    finally:
        engine.stop()


def moto_recorder(work: Path) -> str:
    """moto's only persistence: a log of every request, replayed into a new server."""
    log = work / "moto_recording"
    engine = Engine("moto recorder", moto_server, env={"MOTO_ENABLE_RECORDING": "true",
                                                        "MOTO_RECORDER_FILEPATH": str(log)})
    engine.start(work / "recorder")
    try:
        sqs = engine.client("sqs")
        s3 = engine.client("s3")
        url = sqs.create_queue(QueueName="bench")["QueueUrl"]
        for n in range(3):
            sqs.send_message(QueueUrl=url, MessageBody=f"m{n}")
        [done] = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=1)["Messages"]
        sqs.delete_message(QueueUrl=url, ReceiptHandle=done["ReceiptHandle"])
        s3.create_bucket(Bucket=BUCKET)
        s3.put_object(Bucket=BUCKET, Key="big", Body=os.urandom(1 << 20))
        for _ in range(3):
            s3.get_object(Bucket=BUCKET, Key="big")["Body"].read()
        size = log.stat().st_size
        engine.kill()
        engine.start(work / "recorder")
        requests.post(f"{engine.url}/moto-api/recorder/replay-recording", timeout=60)
        sqs = engine.client("sqs")
        attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
        return (f"the log grew to {size / 1e6:.1f} MB for one 1 MB object (every request and body is kept, "
                f"reads too); after a replay the queue holds {attributes['ApproximateNumberOfMessages']} visible + "
                f"{attributes['ApproximateNumberOfMessagesNotVisible']} in flight of the 2 left undeleted (the "
                "replayed delete names a receipt handle the replay never issued)")
    finally:
        engine.stop()


def journal_alone(work: Path, count: int = 2_000) -> str:
    """The journal's own cost, without HTTP or moto: one commit per message sent, one per delete."""
    from moto.sqs.models import Message

    figures = []
    for synchronous in ("NORMAL", "FULL"):
        journal = SqsJournal(work / f"alone-{synchronous}.sqlite3", synchronous=synchronous)
        messages = [Message(f"id-{n}", json.dumps({"n": n, "pad": "x" * 200})) for n in range(count)]
        for message in messages:
            message.mark_sent()
        put = timed(lambda j=journal, ms=messages: [j.put("account/region/queue", m) for m in ms])
        deleted = timed(lambda j=journal, ms=messages: [j.deleted([m.id]) for m in ms])
        journal.close()
        figures.append(f"{synchronous}: put {put / count * 1e6:.0f} us, delete {deleted / count * 1e6:.0f} us")
    return "; ".join(figures) + " a message"


def whole_stack_startup(work: Path) -> str:
    times = []
    for n in range(3):
        stack = LocalStack(Settings(data_dir=work / f"stack-{n}"), log=lambda _: None)
        times.append(timed(stack.start))
        stack.stop()
    return f"{median_ms(times):.0f} ms"


def table(rows: dict[str, dict[str, str]]) -> str:
    names = list(rows)
    measures = list(next(iter(rows.values())))
    lines = ["| | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
    lines += [f"| {m} | " + " | ".join(rows[n].get(m, "") for n in names) + " |" for m in measures]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--objects", type=int, default=30, help="1 MB objects put and got per engine")
    parser.add_argument("--messages", type=int, default=1000, help="messages through each SQS engine")
    args = parser.parse_args()
    node = subprocess.run(["node", "--version"], capture_output=True, text=True).stdout.strip()
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()},"
          f" Node {node}, {time.strftime('%Y-%m-%d')}; load average before: {os.getloadavg()[0]:.1f}\n")
    with tempfile.TemporaryDirectory(prefix="local-storage-") as tmp:
        work = Path(tmp)
        s3_rows = {}
        for engine in (Engine("moto server", moto_server), Engine("s3rver as shipped", s3rver_as_shipped, "S3RVER"),
                       Engine("s3rver, our fixes", s3rver_command), Engine("AWS endpoint to s3rver", aws_server())):
            s3_rows[engine.name] = bench_s3(engine, work, args.objects)
        print("S3\n\n" + table(s3_rows) + "\n")
        sqs_rows = {}
        for engine in (Engine("moto server", moto_server), Engine("AWS server, journal NORMAL", aws_server()),
                       Engine("AWS server, journal FULL", aws_server("FULL"))):
            sqs_rows[engine.name] = bench_sqs(engine, work, args.messages)
        print("SQS\n\n" + table(sqs_rows) + "\n")
        print(f"The journal alone (commit per change): {journal_alone(work)}\n")
        print(f"moto's recorder: {moto_recorder(work)}\n")
        print(f"LocalStack.start() (dynalite, AWS server, s3rver, provisioning), median of 3: "
              f"{whole_stack_startup(work)}")


if __name__ == "__main__":
    main()
