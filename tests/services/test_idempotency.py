"""The one Idempotency-Key flow of the requests that create queued work (services/idempotency.py),
on a store of its own: a new key takes the fresh id; the same key and body name the first work
(queued again only while it is pending); another body is 409; no key, always a fresh id."""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import pytest

from chalicelib.domain.errors import Conflict
from chalicelib.services.idempotency import claim_id


class Status(Enum):
    PENDING = "pending"
    PROCESSING = "processing"


@dataclass
class Work:
    id: int
    status: Status


class Store:
    def __init__(self) -> None:
        self.ids = iter(range(1, 100))
        self.keys: dict[tuple[str, str], tuple[int, str]] = {}
        self.work: dict[tuple[str, int], Work] = {}
        self.sent: list[int] = []

    def claim(self, environment: str, key: str, work_id: int, digest: str) -> tuple[int, str]:
        return self.keys.setdefault((environment, key), (work_id, digest))

    def __call__(self, key: str | None, digest: str) -> tuple[int, Work | None]:
        return claim_id("acme", key, digest, next_id=lambda: next(self.ids), claim=self.claim,
                        find=lambda environment, work_id: self.work.get((environment, work_id)),
                        send_again=self.sent.append)


def test_a_key_binds_the_first_id_and_a_repeat_names_its_work_queued_again_while_pending():
    store = Store()
    assert store("k", "body") == (1, None)
    store.work[("acme", 1)] = Work(1, Status.PENDING)
    assert store("k", "body") == (1, Work(1, Status.PENDING)) and store.sent == [1]
    store.work[("acme", 1)].status = Status.PROCESSING
    assert store("k", "body") == (1, Work(1, Status.PROCESSING)) and store.sent == [1]  # taken up: not again
    with pytest.raises(Conflict, match="Idempotency-Key 'k' was already used with a different body"):
        store("k", "another body")


def test_a_repeat_before_the_first_was_stored_creates_it_under_the_bound_id_and_no_key_is_always_new():
    store = Store()
    assert store("k", "body") == (1, None)
    assert store("k", "body") == (1, None)  # the first request died before storing its work: this one does
    assert store(None, "body") == (3, None) and store(None, "body") == (4, None)
