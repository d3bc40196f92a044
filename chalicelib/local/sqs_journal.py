"""SQS messages of the local stack kept on disk: a SQLite journal of moto's queues.

moto keeps queues in memory and offers no persistence, and no durable SQS engine installs from
the package registries on this machine (ElasticMQ is a jar from Maven; fauxqs needs Node 22.5).
So the embedded AWS server runs moto with its SQS backend hooked (`journaled`): every message
sent, received (its receive count), deleted, purged or dropped with its queue is written to the
journal before the call answers, one transaction per call. When the provisioner creates a queue
at the next start, the queue's undeleted messages come back, visible at once (their consumers
died with the stack) and with their receive counts, so that dead-letter redrive holds as it did.

Durability is that of the table's engine (dynalite, LevelDB): a killed process loses nothing
(WAL, `synchronous=NORMAL`); a power cut may lose the last commits (`synchronous=FULL` would
not, at a cost bench/local_storage.py measures).
"""
from __future__ import annotations

import base64
import json
import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from moto.core.utils import unix_time
from moto.sqs.models import Message, Queue, SQSBackend

SCHEMA = """
CREATE TABLE IF NOT EXISTS messages (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,  -- the order they were sent in, kept on restore
    id TEXT NOT NULL UNIQUE,
    queue TEXT NOT NULL,                    -- account/region/name: a dead-letter move changes it
    message TEXT NOT NULL,                  -- what the message was sent with (JSON)
    receive_count INTEGER NOT NULL,
    first_received_ms INTEGER
);
CREATE INDEX IF NOT EXISTS messages_of_queue ON messages (queue, seq);
"""


@dataclass(frozen=True)
class JournaledMessage:
    id: str
    message: dict[str, Any]
    receive_count: int
    first_received_ms: int | None


class SqsJournal:
    """The journal's file. Thread-safe: moto's server answers each request in its own thread."""

    def __init__(self, path: Path, synchronous: str = "NORMAL") -> None:
        if synchronous not in ("NORMAL", "FULL"):
            raise ValueError(f"synchronous must be NORMAL or FULL, not {synchronous!r}")
        self.path = path
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute(f"PRAGMA synchronous={synchronous}")
        self._db.executescript(SCHEMA)
        self._lock = threading.RLock()
        self._depth = 0  # nested transactions of the thread holding the lock

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One commit for everything inside, however deeply nested (a batch of ten sends is one)."""
        with self._lock:
            if self._depth == 0:
                self._db.execute("BEGIN IMMEDIATE")
            self._depth += 1
            try:
                yield self._db
            except BaseException:
                self._depth -= 1
                if self._depth == 0:
                    self._db.execute("ROLLBACK")
                raise
            self._depth -= 1
            if self._depth == 0:
                self._db.execute("COMMIT")

    def put(self, queue: str, message: Message) -> None:
        """A message arrived in `queue`: sent there, or moved there as a dead letter."""
        with self.transaction() as db:
            db.execute(
                "INSERT INTO messages (id, queue, message, receive_count, first_received_ms) VALUES (?, ?, ?, ?, ?) "
                "ON CONFLICT (id) DO UPDATE SET queue = excluded.queue, receive_count = excluded.receive_count, "
                "first_received_ms = excluded.first_received_ms",
                (message.id, queue, _dumps(_sent_state(message)), message.approximate_receive_count,
                 message.approximate_first_receive_timestamp))

    def received(self, messages: list[Message]) -> None:
        if messages:
            with self.transaction() as db:
                db.executemany("UPDATE messages SET receive_count = ?, first_received_ms = ? WHERE id = ?",
                               [(m.approximate_receive_count, m.approximate_first_receive_timestamp, m.id)
                                for m in messages])

    def deleted(self, message_ids: list[str]) -> None:
        if message_ids:
            with self.transaction() as db:
                db.executemany("DELETE FROM messages WHERE id = ?", [(i,) for i in message_ids])

    def emptied(self, queue: str) -> None:
        """The queue was purged or deleted."""
        with self.transaction() as db:
            db.execute("DELETE FROM messages WHERE queue = ?", (queue,))

    def messages_of(self, queue: str) -> list[JournaledMessage]:
        with self._lock:
            rows = self._db.execute("SELECT id, message, receive_count, first_received_ms FROM messages "
                                    "WHERE queue = ? ORDER BY seq", (queue,)).fetchall()
        return [JournaledMessage(row[0], _loads(row[1]), row[2], row[3]) for row in rows]

    def close(self) -> None:
        with self._lock:
            self._db.close()


def queue_key(queue: Queue) -> str:
    return f"{queue.account_id}/{queue.region}/{queue.name}"


def _sent_state(message: Message) -> dict[str, Any]:
    return {"body": message.body, "message_attributes": message.message_attributes,
            "system_attributes": message.system_attributes, "sent_timestamp": message.sent_timestamp,
            "delayed_until": message.delayed_until, "deduplication_id": message.deduplication_id,
            "group_id": message.group_id, "sequence_number": message.sequence_number}


def restored(journaled: JournaledMessage) -> Message:
    """The message as moto holds it, visible now: whoever had received it died with the stack."""
    state = journaled.message
    message = Message(journaled.id, state["body"], state["system_attributes"])
    message.message_attributes = state["message_attributes"]
    message.sent_timestamp = state["sent_timestamp"]
    message.delayed_until = state["delayed_until"]
    message.deduplication_id = state["deduplication_id"]
    message.group_id = state["group_id"]
    message.sequence_number = state["sequence_number"]
    message.approximate_receive_count = journaled.receive_count
    message.approximate_first_receive_timestamp = journaled.first_received_ms
    return message


def _expired(queue: Queue, journaled: JournaledMessage) -> bool:
    retention_seconds = int(queue.attributes["MessageRetentionPeriod"])
    return journaled.message["sent_timestamp"] / 1000 + retention_seconds <= unix_time()


# Message attributes may hold bytes (BinaryValue); JSON gets them in base64.
def _dumps(value: Any) -> str:
    def encode(item: Any) -> Any:
        if isinstance(item, bytes):
            return {"$bytes": base64.b64encode(item).decode()}
        raise TypeError(f"{type(item).__name__} is not JSON serializable")

    return json.dumps(value, default=encode, separators=(",", ":"))


def _loads(text: str) -> Any:
    return json.loads(text, object_hook=lambda d: base64.b64decode(d["$bytes"]) if set(d) == {"$bytes"} else d)


@contextmanager
def journaled(journal: SqsJournal) -> Iterator[SqsJournal]:
    """moto's SQS writing to `journal` while inside (the hooks are undone on leaving: tests run moto
    in-process beside other tests)."""
    originals: list[tuple[type, str, Callable[..., Any]]] = []

    def hook(cls: type, name: str, make: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
        original = getattr(cls, name)
        originals.append((cls, name, original))
        setattr(cls, name, make(original))

    def add_message(original):
        # Journaled in the same transaction as the append, so a delete of this message (which must
        # wait for the journal) can never be written before it.
        def add(queue: Queue, message: Message) -> None:
            with journal.transaction():
                original(queue, message)
                if not queue.fifo_queue or any(m is message for m in reversed(queue._messages)):  # not deduplicated
                    journal.put(queue_key(queue), message)
        return add

    def delete_message(original):
        def delete(queue: Queue, receipt_handle: str) -> None:
            ids = [m.id for m in queue._messages if m.had_receipt_handle(receipt_handle)]
            original(queue, receipt_handle)
            journal.deleted(ids)
        return delete

    def receive_message(original):
        # Not one transaction around the call: a long poll would hold the journal for its wait.
        def receive(backend: SQSBackend, *args: Any, **kwargs: Any) -> list[Message]:
            messages = original(backend, *args, **kwargs)
            journal.received(messages)
            return messages
        return receive

    def in_one_transaction(original):
        def batch(backend: SQSBackend, *args: Any, **kwargs: Any) -> Any:
            with journal.transaction():
                return original(backend, *args, **kwargs)
        return batch

    def emptying(original):
        def empty(backend: SQSBackend, queue_name: str, *args: Any, **kwargs: Any) -> Any:
            key = queue_key(backend.get_queue(queue_name))
            result = original(backend, queue_name, *args, **kwargs)
            journal.emptied(key)
            return result
        return empty

    def create_queue(original):
        def create(backend: SQSBackend, name: str, *args: Any, **kwargs: Any) -> Queue:
            is_new = name not in backend.queues
            queue = original(backend, name, *args, **kwargs)
            if is_new:
                _restore(journal, queue)
            return queue
        return create

    hook(Queue, "add_message", add_message)
    hook(Queue, "delete_message", delete_message)
    hook(SQSBackend, "receive_message", receive_message)
    hook(SQSBackend, "send_message_batch", in_one_transaction)
    hook(SQSBackend, "delete_message_batch", in_one_transaction)
    hook(SQSBackend, "purge_queue", emptying)
    hook(SQSBackend, "delete_queue", emptying)
    hook(SQSBackend, "create_queue", create_queue)
    try:
        yield journal
    finally:
        for cls, name, original in reversed(originals):
            setattr(cls, name, original)


def _restore(journal: SqsJournal, queue: Queue) -> None:
    """Put the journal's messages of a queue just created back in it; those past the queue's
    retention period are dropped, as SQS would have."""
    kept: list[JournaledMessage] = []
    expired: list[JournaledMessage] = []
    for journaled_message in journal.messages_of(queue_key(queue)):
        (expired if _expired(queue, journaled_message) else kept).append(journaled_message)
    journal.deleted([m.id for m in expired])
    with queue._messages_lock:
        queue._messages.extend(restored(m) for m in kept)
        queue._messages_lock.notify_all()

