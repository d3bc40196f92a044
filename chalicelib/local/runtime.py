"""Runs the app's async handlers in-process in local mode, the way Lambda would on AWS.

Each `@app.on_sqs_message` handler gets its queue polled: a batch of messages becomes the
same SQS event Lambda builds, the handler that Lambda would call runs, and the batch is
deleted only when it succeeded. A failure leaves the messages for redelivery, so local mode
keeps SQS's at-least-once semantics (after a short visibility timeout, not the deployed one).
"""
from __future__ import annotations

import hashlib
import json
import threading
import time
import traceback
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from botocore.exceptions import ConnectionError as BotocoreConnectionError
from botocore.exceptions import HTTPClientError
from chalice.app import Chalice, CloudWatchEventConfig, Rate, ScheduledEventConfig, SQSEventConfig
from chalice.local import LambdaContext

from chalicelib.local.schedules import CHECK_SECONDS, ScheduleFirer

LOCAL_REDELIVERY_SECONDS = 5
# As long as SQS lets a receive wait, as Lambda's pollers do: a message still reaches its poller at
# once, and ten idle pollers no longer cost the service and the local SQS a request a second each
# (a sixth of the service's CPU during a bulk import).
LONG_POLL_SECONDS = 20
LOCAL_ACCOUNT_ID = "123456789012"
MAX_SCHEDULED_RUNS = 3  # of one schedule at once (EventBridge has no cap; a laptop has)


def sqs_event(messages: list[dict[str, Any]], queue_name: str, region: str) -> dict[str, Any]:
    return {"Records": [{
        "messageId": m["MessageId"], "receiptHandle": m["ReceiptHandle"], "body": m["Body"],
        "attributes": m.get("Attributes", {}), "messageAttributes": m.get("MessageAttributes", {}),
        "md5OfBody": m.get("MD5OfBody") or hashlib.md5(m["Body"].encode()).hexdigest(),
        "eventSource": "aws:sqs", "eventSourceARN": f"arn:aws:sqs:{region}:{LOCAL_ACCOUNT_ID}:{queue_name}",
        "awsRegion": region,
    } for m in messages]}


class LocalRuntime:
    def __init__(self, app: Chalice, sqs, region: str, log: Callable[[str], None] = print,
                 poll_wait_seconds: int = LONG_POLL_SECONDS, redelivery_seconds: int = LOCAL_REDELIVERY_SECONDS,
                 concurrency: int = 2, stopping: threading.Event | None = None) -> None:
        self._app = app
        self._sqs = sqs
        self._region = region
        self._log = log
        self._poll_wait = poll_wait_seconds
        self._redelivery_seconds = redelivery_seconds
        self._concurrency = concurrency  # pollers per queue, as Lambda runs several at once
        self._stopping = stopping or threading.Event()  # the service's one stop signal, when it gives it
        self._threads: list[threading.Thread] = []
        self._handling: set[threading.Thread] = set()  # pollers running a handler: what stop waits for
        self._queue_urls: dict[str, str] = {}  # asked once a queue: a queue's URL is its name's for life

    @property
    def queue_handlers(self) -> list[SQSEventConfig]:
        return [s for s in self._app.event_sources if isinstance(s, SQSEventConfig)]

    @property
    def s3_event_handlers(self) -> list[CloudWatchEventConfig]:
        return [s for s in self._app.event_sources if isinstance(s, CloudWatchEventConfig)
                and "aws.s3" in s.event_pattern.get("source", [])]

    @property
    def schedules(self) -> list[ScheduledEventConfig]:
        return [s for s in self._app.event_sources if isinstance(s, ScheduledEventConfig)]

    def watch_bucket(self, s3, bucket: str, prefixes: tuple[str, ...], delivered_log: Path,
                     interval_seconds: float = 1.0) -> None:
        """S3 -> EventBridge "Object Created", emulated: new objects under `prefixes` become the
        events the deployed app receives (the local S3 cannot deliver them to this process).
        What was delivered is logged to `delivered_log`, so that a restart delivers only the
        objects that came while the stack was down, not every object again.

        An object is delivered once two polls in a row list it alike (ETag, size, Last-Modified):
        s3rver lists a file still being written, with the MD5 of the part written so far (S3 lists
        an object once its PUT is complete), and that event would name a file that is not there."""
        seen = _delivered(delivered_log)
        listed: dict[str, tuple[str, int, object]] = {}  # key -> what the last poll listed, not yet delivered

        def poll() -> None:
            with delivered_log.open("a") as log:
                while not self._stopping.is_set():
                    try:
                        for prefix in prefixes:
                            for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
                                for obj in page.get("Contents", []):
                                    marker = (obj["Key"], obj["ETag"].strip('"'))
                                    if marker in seen:
                                        continue
                                    now = (marker[1], obj["Size"], obj.get("LastModified"))
                                    if listed.get(obj["Key"]) != now:  # new, or still being written
                                        listed[obj["Key"]] = now
                                        continue
                                    del listed[obj["Key"]]
                                    seen.add(marker)  # a failed delivery is tried again at the next start
                                    if self.deliver_s3_event(bucket, obj["Key"], marker[1], obj["Size"]):
                                        log.write(json.dumps(marker) + "\n")
                                        log.flush()
                    except Exception as error:  # keep watching; the failure is logged
                        self._log(f"bucket watch: {error!r}")
                    self._stopping.wait(interval_seconds)

        self._start_thread(poll, "s3-events")

    def deliver_s3_event(self, bucket: str, key: str, etag: str, size: int) -> bool:
        """Run every handler of the event; False when one failed (it is logged)."""
        event = self._eventbridge_event("Object Created", "aws.s3", [f"arn:aws:s3:::{bucket}"], {
            "version": "0", "bucket": {"name": bucket}, "object": {"key": key, "size": size, "etag": etag},
            "reason": "PutObject"})
        delivered = True
        for config in self.s3_event_handlers:
            try:
                self._app.handler_map[config.name](event, self._context(config.name))
            except Exception as error:
                delivered = False
                self._log(f"{config.name}: handler failed for s3://{bucket}/{key}: {error!r}\n"
                          f"{traceback.format_exc()}")
        return delivered

    def run_schedules(self, interval_seconds: float | None = None) -> None:
        """Fire each schedule on time, as EventBridge does: a run still going (a sweep in a slow step)
        does not hold back the next one, so the sweeper finds a stuck import within its minute. At
        most MAX_SCHEDULED_RUNS of one schedule go at once; a tick past that is skipped and logged.
        `interval_seconds` replaces every schedule's own (tests)."""
        for config in self.schedules:
            expression = config.schedule_expression
            seconds = interval_seconds or (_rate_seconds(expression) if isinstance(expression, Rate) else 60)
            going = threading.BoundedSemaphore(MAX_SCHEDULED_RUNS)

            def run(config=config, going=going) -> None:
                try:
                    self.run_schedule_once(config)
                except Exception as error:
                    self._log(f"{config.name}: scheduled run failed: {error!r}")
                finally:
                    going.release()

            def tick(config=config, seconds=seconds, going=going, run=run) -> None:
                while not self._stopping.wait(seconds):
                    if not going.acquire(blocking=False):
                        self._log(f"{config.name}: {MAX_SCHEDULED_RUNS} runs still going; this one is skipped")
                        continue
                    threading.Thread(target=run, daemon=True, name=f"schedule-run-{config.name}").start()

            self._start_thread(tick, f"schedule-{config.name}")

    def fire_schedules(self, firer: ScheduleFirer, interval_seconds: float = CHECK_SECONDS) -> None:
        """The EventBridge Scheduler schedules of agents, fired in-process (local/schedules.py),
        until the runtime stops."""
        self._start_thread(lambda: firer.run(self._stopping, interval_seconds), "agent-schedules")

    def run_schedule_once(self, config: ScheduledEventConfig) -> None:
        event = self._eventbridge_event("Scheduled Event", "aws.events", [], {})
        self._app.handler_map[config.name](event, self._context(config.name))

    def _eventbridge_event(self, detail_type: str, source: str, resources: list[str], detail: dict) -> dict:
        return {"version": "0", "id": str(uuid.uuid4()), "detail-type": detail_type, "source": source,
                "account": LOCAL_ACCOUNT_ID, "time": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                "region": self._region, "resources": resources, "detail": detail}

    def _start_thread(self, target, name: str) -> None:
        thread = threading.Thread(target=target, daemon=True, name=name)
        thread.start()
        self._threads.append(thread)

    def _context(self, name: str) -> LambdaContext:
        return LambdaContext(function_name=f"{self._app.app_name}-local-{name}", memory_size=1024,
                             max_runtime_ms=900_000)

    def start(self) -> None:
        for config in self.queue_handlers:
            for n in range(self._concurrency):
                thread = threading.Thread(target=self._poll_forever, args=(config,), daemon=True,
                                          name=f"sqs-{config.name}-{n}")
                thread.start()
                self._threads.append(thread)

    def stop(self, grace_seconds: float = 3) -> None:
        """Let pollers finish the batch in hand; they are daemons, so a stuck one cannot hold the exit.
        A poller still waiting on its queue is not waited for: whatever its receive brings now is put
        back unhandled (see deliver_once)."""
        self._stopping.set()
        deadline = time.monotonic() + grace_seconds
        for thread in self._threads:
            if thread.name.startswith("sqs-") and thread not in self._handling:  # a poller waiting on its queue
                continue
            thread.join(timeout=max(0.0, deadline - time.monotonic()))

    def _poll_forever(self, config: SQSEventConfig) -> None:
        while not self._stopping.is_set():
            try:
                self.deliver_once(config, wait_seconds=self._poll_wait)
            except Exception as error:  # keep polling; the failure is logged and retried
                if self._stopping.is_set():
                    if not isinstance(error, (BotocoreConnectionError, HTTPClientError)):  # (not the local SQS gone)
                        self._log(f"{config.name}: {error!r}")
                    return
                self._log(f"{config.name}: {error!r}")
                self._stopping.wait(1)

    def deliver_once(self, config: SQSEventConfig, wait_seconds: int = 0) -> int:
        """Receive one batch and run the handler on it. Returns how many messages it handled."""
        queue_name = config.queue
        if queue_name is None:  # chalice also takes a queue_arn; this runtime finds queues by name
            raise ValueError(f"{config.name}: the local runtime polls a queue by name, not by queue_arn")
        queue_url = self._queue_url(queue_name)
        messages = self._sqs.receive_message(
            QueueUrl=queue_url, MaxNumberOfMessages=min(config.batch_size, 10), WaitTimeSeconds=wait_seconds,
            AttributeNames=["All"], MessageAttributeNames=["All"],
        ).get("Messages", [])
        if not messages:
            return 0
        # Marked before the stop is checked, and stop() sets it before it reads the marks: so a
        # batch is either handled under stop()'s grace or not begun at all.
        me = threading.current_thread()
        self._handling.add(me)
        try:
            if self._stopping.is_set():  # received as the stack stops: unhandled, for the next start
                self._give_back(queue_url, messages)
                self._log(f"{config.name}: received while stopping; {len(messages)} message(s) resume at the next "
                          "start")
                return 0
            return self._handle(config, queue_name, queue_url, messages)
        finally:
            self._handling.discard(me)

    def _handle(self, config: SQSEventConfig, queue_name: str, queue_url: str, messages: list[dict[str, Any]]) -> int:
        handler = self._app.handler_map[config.name]
        try:
            handler(sqs_event(messages, queue_name, self._region), self._context(config.name))
        except Exception as error:
            if self._stopping.is_set():  # left in flight: the queue keeps them, and the next start delivers them
                self._log(f"{config.name}: stopped at a checkpoint; {len(messages)} message(s) resume at the next "
                          f"start ({error!r})")
                return 0
            self._log(f"{config.name}: handler failed, {len(messages)} message(s) will be redelivered: "
                      f"{error!r}\n{traceback.format_exc()}")
            for message in messages:
                self._sqs.change_message_visibility(QueueUrl=queue_url, ReceiptHandle=message["ReceiptHandle"],
                                                    VisibilityTimeout=self._redelivery_seconds)
            return 0
        self._sqs.delete_message_batch(QueueUrl=queue_url, Entries=[
            {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(messages)
        ])
        return len(messages)

    def _give_back(self, queue_url: str, messages: list[dict[str, Any]]) -> None:
        """Put each message back as a new one, then drop the one received: a receive no handler saw must
        not count towards the queue's dead-letter limit (a message on its last receive would go there
        at the next start). If the local SQS is gone already, they stay in flight, as a stop leaves them."""
        sent = 0
        try:
            for message in messages:
                attributes = {name: {k: v for k, v in value.items() if k in ("DataType", "StringValue", "BinaryValue")}
                              for name, value in message.get("MessageAttributes", {}).items()}
                self._sqs.send_message(QueueUrl=queue_url, MessageBody=message["Body"],
                                       **({"MessageAttributes": attributes} if attributes else {}))
                sent += 1
            kept = self._sqs.delete_message_batch(QueueUrl=queue_url, Entries=[
                {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(messages)]).get("Failed", [])
        except Exception as error:
            self._log(f"{queue_url}: {len(messages)} message(s) received while stopping stay in flight, {sent} sent "
                      f"again as well ({error!r})")
            return
        if kept:  # (a handler takes a message twice: it is idempotent)
            self._log(f"{queue_url}: {len(kept)} message(s) received while stopping stay in flight beside their copy")

    def _queue_url(self, queue_name: str) -> str:
        if queue_name not in self._queue_urls:  # pollers race here harmlessly: both write the same URL
            self._queue_urls[queue_name] = self._sqs.get_queue_url(QueueName=queue_name)["QueueUrl"]
        return self._queue_urls[queue_name]


def _delivered(log: Path) -> set[tuple[str, str]]:
    """The (key, etag) of every object an event was delivered for, from the log (a line cut short
    by a crash is the last, and is skipped: its object is delivered again, which handlers take)."""
    seen: set[tuple[str, str]] = set()
    if log.exists():
        text = log.read_text()
        if text and not text.endswith("\n"):
            with log.open("a") as cut_short:  # what is appended next starts a line of its own
                cut_short.write("\n")
        for line in text.splitlines():
            try:
                key, etag = json.loads(line)
            except ValueError:
                continue
            seen.add((key, etag))
    return seen


def _rate_seconds(rate: Rate) -> int:
    return rate.value * {Rate.MINUTES: 60, Rate.HOURS: 3600, Rate.DAYS: 86400}[rate.unit]
