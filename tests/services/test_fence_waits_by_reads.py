"""A worker at a raised closing fence waits by reading the fence, not by refused writes: every
waiting worker used to send a conditional write to the one item five times a second."""
from __future__ import annotations

from chalicelib.services import period_closes
from chalicelib.services.period_closes import FenceWriter
from tests.fakes import fake_ports


def test_a_waiting_worker_reads_the_fence_until_it_comes_down_then_enters_once(monkeypatch):
    ports = fake_ports()
    repository = ports.period_closes
    repository.closing[("test", 4)] = (period_closes.utc_now(), 11)  # a close under way
    entries, reads = [], []
    enter, read = repository.enter_fence, repository.fence_up

    def counted_enter(*args, **kwargs):
        entries.append(args)
        return enter(*args, **kwargs)

    def counted_read(*args, **kwargs):
        reads.append(args)
        if len(reads) == 3:  # the close lands while the worker waits
            repository.clear_closing("test", 4, 11)
        return read(*args, **kwargs)

    monkeypatch.setattr(repository, "enter_fence", counted_enter)
    monkeypatch.setattr(repository, "fence_up", counted_read)
    monkeypatch.setattr(period_closes, "WORKER_POLL_SECONDS", 0)

    writer = FenceWriter(ports, period_closes.WORKER_LEASE, waits=True)
    assert writer.closed("test", 4) == []
    assert len(entries) == 2  # refused once, then entered
    assert len(reads) == 3
    assert repository.live_writers("test", 4, period_closes.utc_now()) == 1
    writer.leave()
    assert repository.live_writers("test", 4, period_closes.utc_now()) == 0
