"""Webhook endpoints and deliveries: an edit over the version read (else 409), a delete that hides
the endpoint at once and whose partition the purge clears later, the failing clock and the
disable; one delivery per event, an attempt claimed once from the state read and its outcome
recorded once, the list of deliveries due and its wake-ups, retries and give-ups as read."""
from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from chalicelib.domain.errors import Conflict, NotFound
from chalicelib.domain.webhooks import DeliveryStatus, WebhookDelivery, WebhookEndpoint
from tests.contract.builders import ENV, OTHER_ENV, T0, T0_MS


def endpoint(endpoint_id: int, environment: str = ENV, **kw) -> WebhookEndpoint:
    return WebhookEndpoint(**{"environment": environment, "id": endpoint_id, "url": f"https://hooks.example/{endpoint_id}",
                              "events": ("*",), "description": "ops", "active": True, "secret": "whsec_a",
                              "created_at": T0, "updated_at": T0, **kw})


def delivery(delivery_id: int, endpoint_id: int = 1, event_id: str | None = None, **kw) -> WebhookDelivery:
    return WebhookDelivery(**{"environment": ENV, "endpoint_id": endpoint_id, "id": delivery_id,
                              "event_id": event_id or f"evt_{delivery_id}", "event_type": "file_import.completed",
                              "payload": '{"id":"evt"}', "status": DeliveryStatus.PENDING, "created_at": T0,
                              "updated_at": T0, **kw})


class TestEndpoints:
    def test_endpoints_read_back_and_are_listed_newest_first(self, webhooks):
        for n in (1, 2, 3):
            webhooks.add(endpoint(n))
        webhooks.add(endpoint(1, environment=OTHER_ENV))
        assert webhooks.get(ENV, 1) == replace(endpoint(1), created_at=T0_MS, updated_at=T0_MS)
        page, cursor = webhooks.list_page(ENV, 2, None)
        rest, end = webhooks.list_page(ENV, 2, cursor)
        assert [e.id for e in page + rest] == [3, 2, 1] and end is None
        assert sorted(e.id for e in webhooks.of_environment(ENV)) == [1, 2, 3]
        with pytest.raises(NotFound):
            webhooks.get(ENV, 9)

    def test_an_edit_applies_over_the_version_it_read_only(self, webhooks):
        webhooks.add(endpoint(1))
        read = webhooks.get(ENV, 1)
        saved = webhooks.save(replace(read, description="", url="https://hooks.example/new"), read)
        assert (saved.description, saved.url, saved.version) == ("", "https://hooks.example/new", 2)
        with pytest.raises(Conflict):
            webhooks.save(replace(read, active=False), read)  # a stale read
        assert webhooks.get(ENV, 1).active

    def test_the_failing_clock_and_the_disable(self, webhooks):
        webhooks.add(endpoint(1))
        read = webhooks.get(ENV, 1)
        assert not webhooks.disable(read, T0, "failing")  # not failing
        assert webhooks.mark_failing(read, T0).failing_since == T0_MS
        assert webhooks.mark_failing(read, T0 + timedelta(hours=1)).failing_since == T0_MS  # the first stays
        webhooks.mark_succeeded(read)
        assert webhooks.get(ENV, 1).failing_since is None
        webhooks.mark_failing(read, T0)
        assert webhooks.disable(read, T0, "failing for 5 days")
        assert not webhooks.disable(read, T0, "again")
        off = webhooks.get(ENV, 1)
        assert (off.active, off.disabled_reason, off.disabled_at, off.version) == (False, "failing for 5 days",
                                                                                   T0_MS, 2)

    def test_a_deleted_endpoint_is_gone_at_once_and_its_deliveries_purged_later(self, webhooks):
        webhooks.add(endpoint(1))
        webhooks.add(endpoint(2))
        for n in range(3):
            webhooks.add_delivery(delivery(n + 1), T0)
        webhooks.remove(ENV, 1)
        with pytest.raises(NotFound):
            webhooks.get(ENV, 1)
        with pytest.raises(NotFound):
            webhooks.remove(ENV, 1)
        assert [e.id for e in webhooks.of_environment(ENV)] == [2]
        assert [e.id for e in webhooks.list_page(ENV, 10, None)[0]] == [2]
        assert webhooks.mark_failing(endpoint(1), T0).failing_since is None

        assert webhooks.purge_deleted(page_size=4) == 4  # deliveries and event guards, a page
        assert webhooks.purge_deleted(page_size=4) == 2
        assert webhooks.purge_deleted(page_size=4) == 1  # then the tombstone
        assert webhooks.purge_deleted(page_size=4) == 0
        assert webhooks.deliveries_page(ENV, 1, 10, None) == ([], None)


class TestDeliveries:
    def test_an_event_makes_one_delivery(self, webhooks):
        made, new = webhooks.add_delivery(delivery(1), T0)
        again, new_again = webhooks.add_delivery(delivery(2, event_id="evt_1"), T0)
        assert (made.id, new, again.id, new_again) == (1, True, 1, False)
        assert webhooks.get_delivery(ENV, 1, 1) == replace(delivery(1), created_at=T0_MS, updated_at=T0_MS)
        webhooks.add_delivery(delivery(3), T0)
        page, cursor = webhooks.deliveries_page(ENV, 1, 1, None)
        assert [d.id for d in page + webhooks.deliveries_page(ENV, 1, 5, cursor)[0]] == [3, 1]
        with pytest.raises(NotFound):
            webhooks.get_delivery(ENV, 1, 2)

    def test_an_attempt_is_claimed_once_and_its_outcome_recorded_once(self, webhooks):
        webhooks.add_delivery(delivery(1), T0)
        read = webhooks.get_delivery(ENV, 1, 1)
        claimed = webhooks.claim(read, T0, T0 + timedelta(minutes=2))
        assert claimed is not None and (claimed.status, claimed.attempts, claimed.claimed_at) == (
            DeliveryStatus.DELIVERING, 1, T0_MS)
        assert webhooks.claim(read, T0, T0 + timedelta(minutes=2)) is None

        later = T0 + timedelta(seconds=5)
        failed = webhooks.record_attempt(claimed, DeliveryStatus.PENDING, later, 500, None, "oops",
                                         later + timedelta(minutes=1), later + timedelta(minutes=1))
        assert failed is not None and (failed.status, failed.last_status_code, failed.response_excerpt) == (
            DeliveryStatus.PENDING, 500, "oops")
        assert webhooks.record_attempt(claimed, DeliveryStatus.SUCCEEDED, later, 200, None, "", None, None) is None

        again = webhooks.claim(failed, later, later + timedelta(minutes=2))
        done = webhooks.record_attempt(again, DeliveryStatus.SUCCEEDED, later, 200, None, "", None, None)
        assert done is not None and (done.status, done.attempts, done.claimed_at) == (DeliveryStatus.SUCCEEDED, 2,
                                                                                     None)
        assert webhooks.due(later + timedelta(days=1)) == []

    def test_an_attempt_left_by_a_dead_worker_is_recorded_only_once_its_claim_is_stale(self, webhooks):
        webhooks.add_delivery(delivery(1), T0)
        claimed = webhooks.claim(webhooks.get_delivery(ENV, 1, 1), T0, T0 + timedelta(minutes=2))
        assert webhooks.record_attempt(claimed, DeliveryStatus.PENDING, T0, None, "died", None, T0, T0,
                                       stale_before=T0 - timedelta(minutes=1)) is None
        assert webhooks.record_attempt(claimed, DeliveryStatus.PENDING, T0, None, "died", None, T0, T0,
                                       stale_before=T0 + timedelta(minutes=1)) is not None

    def test_due_deliveries_come_soonest_first_and_a_wake_moves_on_only_as_read(self, webhooks):
        webhooks.add_delivery(delivery(1), T0 + timedelta(minutes=5))
        webhooks.add_delivery(delivery(2), T0)
        webhooks.add_delivery(delivery(3), T0 + timedelta(hours=1))
        due = webhooks.due(T0 + timedelta(minutes=10))
        assert [d.id for d, _ in due] == [2, 1]
        (second, seen), _ = due
        assert webhooks.push_wake(second, seen, T0 + timedelta(hours=2))
        assert not webhooks.push_wake(second, seen, T0 + timedelta(hours=3))
        assert [d.id for d, _ in webhooks.due(T0 + timedelta(minutes=10))] == [1]
        assert [d.id for d, _ in webhooks.due(T0 + timedelta(hours=2), limit=2)] == [1, 3]

    def test_a_retry_and_a_give_up_apply_only_to_the_delivery_as_read(self, webhooks):
        webhooks.add_delivery(delivery(1), T0)
        read = webhooks.get_delivery(ENV, 1, 1)
        webhooks.fail_delivery(read, T0, "not sent: the endpoint is inactive")
        failed = webhooks.get_delivery(ENV, 1, 1)
        assert (failed.status, failed.last_error, failed.next_attempt_at) == (
            DeliveryStatus.FAILED, "not sent: the endpoint is inactive", None)
        assert webhooks.due(T0 + timedelta(days=1)) == []
        assert webhooks.requeue(read, T0, T0) is None  # read as pending: it changed since

        requeued = webhooks.requeue(failed, T0 + timedelta(minutes=1), T0 + timedelta(minutes=1))
        # a manual retry of a failed delivery is one more attempt, whatever it failed of
        assert requeued is not None and (requeued.status, requeued.attempt_limit) == (DeliveryStatus.PENDING,
                                                                                      failed.attempts + 1)
        assert [d.id for d, _ in webhooks.due(T0 + timedelta(minutes=1))] == [1]
        assert webhooks.requeue(replace(requeued, status=DeliveryStatus.SUCCEEDED), T0, T0) is None

        webhooks.remove_delivery(requeued)
        assert webhooks.due(T0 + timedelta(days=1)) == []
        assert webhooks.add_delivery(delivery(5, event_id="evt_1"), T0)[1]  # its event's guard went with it
