"""The audit trail: one hash chain per environment, each entry following the one before it (its
seq, its previous hash, a time never earlier), read by seq or a page at a time newest first; and
the notes of requests in flight, which one sweeper at a time claims."""
from __future__ import annotations

from datetime import timedelta

from chalicelib.domain.audit import GENESIS_HASH, AuditQuery, ChainHead, RequestInFlight
from tests.contract.builders import ENV, OTHER_ENV, T0, T0_MS


def append(audit, n: int, environment: str = ENV, resource_id: int | None = None, actor: str = "key:1"):
    return audit.append(environment, actor=actor, action="data_stream.created", resource_type="data_stream",
                        resource_id=resource_id if resource_id is not None else n, summary={"n": n, "key": f"s{n}"})


def request(request_id: str, environment: str = ENV) -> RequestInFlight:
    return RequestInFlight(environment=environment, request_id=request_id, actor="key:1", action="data_stream.created",
                           resource_type="data_stream", resource_id=None, summary={"key": "bank"}, began_at=T0)


class TestAuditRepository:
    def test_entries_chain_one_after_another_per_environment(self, audit):
        assert audit.head(ENV) is None and audit.newest(ENV) is None
        first, second = append(audit, 1), append(audit, 2)
        other = append(audit, 1, environment=OTHER_ENV)

        assert (first.seq, first.prev_hash, second.seq, second.prev_hash) == (1, GENESIS_HASH, 2, first.hash)
        assert second.at >= first.at and other.seq == 1
        assert audit.head(ENV) == ChainHead(seq=2, hash=second.hash, at=second.at)
        assert audit.get(ENV, 1) == first and audit.get(ENV, 3) is None
        assert list(audit.entries_between(ENV, 1, 2)) == [first, second] == [audit.get(ENV, 1), audit.newest(ENV)]
        assert audit.get(ENV, 2).summary == {"n": 2, "key": "s2"}

    def test_entries_are_listed_newest_first_a_page_at_a_time_and_filtered(self, audit):
        entries = [append(audit, n, resource_id=n % 2, actor=f"key:{n % 3}") for n in range(1, 6)]

        page, cursor = audit.list_page(ENV, AuditQuery(), 2, None)
        rest, end = audit.list_page(ENV, AuditQuery(), 10, cursor)
        assert [e.seq for e in page + rest] == [5, 4, 3, 2, 1] and end is None
        of_resource, _ = audit.list_page(ENV, AuditQuery(resource_type="data_stream", resource_id="1"), 10, None)
        assert [e.seq for e in of_resource] == [5, 3, 1]
        by_actor, _ = audit.list_page(ENV, AuditQuery(actor="key:1"), 10, None)
        assert [e.seq for e in by_actor] == [4, 1]
        assert audit.list_page(OTHER_ENV, AuditQuery(), 10, None) == ([], None)
        assert entries[-1] == page[0]

    def test_a_request_in_flight_is_claimed_by_one_sweeper_until_its_claim_is_stale(self, audit):
        audit.begin_request(request("r-1"))
        audit.begin_request(request("r-2", environment=OTHER_ENV))
        assert sorted(r.request_id for r in audit.requests_in_flight()) == ["r-1", "r-2"]
        [noted] = [r for r in audit.requests_in_flight() if r.request_id == "r-1"]
        assert (noted.summary, noted.began_at, noted.resource_id) == ({"key": "bank"}, T0_MS, None)

        now = T0 + timedelta(minutes=10)
        assert audit.claim_request(noted, now, stale_before=now - timedelta(minutes=5))
        assert not audit.claim_request(noted, now + timedelta(minutes=1), stale_before=now - timedelta(minutes=4))
        assert audit.claim_request(noted, now + timedelta(minutes=6), stale_before=now + timedelta(minutes=1))

        audit.end_request(ENV, "r-1")
        assert [r.request_id for r in audit.requests_in_flight()] == ["r-2"]
        assert not audit.claim_request(noted, now + timedelta(hours=1), stale_before=now + timedelta(hours=1))
