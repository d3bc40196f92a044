"""A story's summary (services/story_summary.py) on the fakes: orders -> charges -> payouts, with a
charge that passed the first link but not the second."""
from __future__ import annotations

import pytest

from chalicelib.domain.errors import NotFound
from chalicelib.domain.stories import LinkInput
from chalicelib.domain.tallies import CurrencyAmounts
from chalicelib.services import stories
from chalicelib.services.reconciliation_exceptions import refresh, request_neighbour_refreshes
from chalicelib.services.reconciliation_rules import create_rule
from chalicelib.services.story_summary import summarize_story
from tests.services.conftest import ENV, days_ago, matched_by_a_run, new_reconciliation, record, streams

RULE = {"name": "Amount", "priority": 1, "conditions": [{"field": "amount", "operator": "equals"}]}


def usd(count, credits=0, debits=0, oldest=None):
    return {"USD": CurrencyAmounts("USD", count, credits, debits, 2, oldest)}


def chain(ports, ingest):
    streams(ports, "orders", "charges", "payouts")
    first = new_reconciliation(ports, "Orders to charges", side_a=("orders",), side_b=("charges",))
    second = new_reconciliation(ports, "Charges to payouts", side_a=("charges",), side_b=("payouts",))
    orders = ingest(record("orders", 1, 1000, days_ago(9)), record("orders", 2, 2500, days_ago(8)),
                    record("orders", 3, 400, days_ago(7)))
    charges = ingest(record("charges", 1, 1000, days_ago(9)), record("charges", 2, 2500, days_ago(8)),
                     record("charges", 3, 400, days_ago(2)))
    payouts = ingest(record("payouts", 1, 1000, days_ago(5)))
    rule_1, rule_2 = create_rule(ports, ENV, first.id, RULE), create_rule(ports, ENV, second.id, RULE)
    for i in range(3):
        matched_by_a_run(ports, first, rule_1, [orders[i]], [charges[i]])
    matched_by_a_run(ports, second, rule_2, [charges[0]], [payouts[0]])  # charges 2 and 3 are not paid out
    charges_stream = ports.data_streams.get(ENV, "charges")
    story = stories.create_story(ports, ENV, name="Order to cash", links=[
        LinkInput(index=0, reconciliation_id=first.id, position=1),
        LinkInput(index=1, reconciliation_id=second.id, position=2, shared_data_stream_id=charges_stream.id)])
    return story, first, second


def test_each_link_shows_matched_and_unmatched_money_and_what_passed_the_previous_link(ports, ingest):
    story, first, second = chain(ports, ingest)
    refresh(ports, ENV, first.id)
    refresh(ports, ENV, second.id)
    summary = summarize_story(ports, ENV, story.id)
    origin, continuation = summary.links
    assert origin.figures.side_a_matched == usd(3, 3900) and origin.figures.side_a_unmatched == {}
    assert origin.figures.side_b_matched == usd(3, 3900) and origin.figures.from_previous is None
    assert continuation.figures.side_a_matched == usd(1, 1000)
    assert continuation.figures.side_a_unmatched == usd(2, 2900, oldest=days_ago(8))
    assert continuation.figures.side_b_matched == usd(1, 1000)
    # Both open charges were matched to their orders in the first link: they leak here.
    assert continuation.figures.from_previous == usd(2, 2900, oldest=days_ago(8))
    assert continuation.figures.computed_at is not None and not continuation.refresh_pending
    # The one unmatched for longer than the grace period (3 days) is in an open exception.
    [exception] = continuation.exceptions
    assert exception.data_stream_key == "charges" and exception.totals["record_count"] == 1
    assert origin.exceptions == ()


def test_a_link_not_refreshed_yet_has_no_figures_and_a_run_asks_its_neighbours_for_a_refresh(ports, ingest):
    story, first, second = chain(ports, ingest)
    refresh(ports, ENV, second.id)
    ports.reconciliations.mark_exceptions_refreshed(ENV, first.id, ports.reconciliations.get(ENV, first.id).created_at)
    origin, continuation = summarize_story(ports, ENV, story.id).links
    assert origin.figures.computed_at is None and origin.figures.side_a_matched == {}
    request_neighbour_refreshes(ports, ENV, second.id)  # what the second link's run does at its end
    assert ports.reconciliations.get(ENV, first.id).exceptions_refresh_pending
    origin, _ = summarize_story(ports, ENV, story.id).links
    assert origin.refresh_pending


def test_a_summary_of_another_environments_story_is_not_found(ports, ingest):
    story, _, _ = chain(ports, ingest)
    with pytest.raises(NotFound):
        summarize_story(ports, "other", story.id)


def test_a_persons_unmatch_in_one_link_asks_the_next_for_a_refresh_too(ports, ingest):
    from chalicelib.services.matches import unmatch

    story, first, second = chain(ports, ingest)
    refresh(ports, ENV, first.id)
    refresh(ports, ENV, second.id)
    assert not ports.reconciliations.get(ENV, second.id).exceptions_refresh_pending
    match = ports.matches.list_page(ENV, first.id, 1, None)[0][0]
    unmatch(ports, ENV, match.id)
    assert ports.reconciliations.get(ENV, second.id).exceptions_refresh_pending


def test_a_tally_is_as_of_its_read_not_of_the_sweep_that_began_it(ports, ingest):
    from datetime import timedelta

    from chalicelib.domain.clock import utc_now

    story, first, _ = chain(ports, ingest)
    began = utc_now() - timedelta(minutes=10)
    refresh(ports, ENV, first.id, now=began)
    assert all(t.computed_at > began for t in ports.tallies.of_reconciliation(ENV, first.id))
