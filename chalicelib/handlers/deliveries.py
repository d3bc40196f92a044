"""The rule of the SQS consumers whose work can fail for good: an exception makes SQS deliver the
message again; on its last delivery the work is failed with the reason instead, so that nothing
stays pending or running for ever. A stop of the local stack is no failure: the message is kept
(sent again if this was its last delivery) and the work goes on at the next start."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from chalicelib.container import container
from chalicelib.observability import logger


def receive_count(record) -> int:
    return int(record.to_dict().get("attributes", {}).get("ApproximateReceiveCount", "1"))


def deliver(message: dict[str, Any], attempts: int, max_receives: int, send_again: Callable[[dict[str, Any]], None],
            work: Callable[[], object], fail: Callable[[Exception], object], what: str) -> None:
    try:
        work()
    except Exception as error:
        if container().ports.stopping():
            if attempts >= max_receives:
                send_again(message)
            raise
        if attempts < max_receives:
            raise
        logger.exception(f"{what} failed on its last delivery", extra={"attempts": attempts})
        fail(error)
