"""SQS queues of async work."""
from __future__ import annotations

import json
from functools import cached_property
from typing import Any


class WorkQueue:
    def __init__(self, sqs, queue_name: str) -> None:
        self._sqs = sqs
        self._name = queue_name

    @cached_property
    def _url(self) -> str:
        return self._sqs.get_queue_url(QueueName=self._name)["QueueUrl"]

    def send(self, message: dict[str, Any], delay_seconds: int = 0) -> None:
        """`delay_seconds` (at most 900, SQS's limit) keeps the message out of sight that long."""
        self._sqs.send_message(QueueUrl=self._url, MessageBody=json.dumps(message, separators=(",", ":")),
                               DelaySeconds=min(delay_seconds, 900))
