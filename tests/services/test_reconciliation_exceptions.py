"""Exceptions: how unmatched records come and go (services/reconciliation_exceptions.py), on the
fakes. `ran` leaves what a run leaves: its match, then its refresh of the exceptions."""
from dataclasses import replace
from datetime import timedelta

import pytest

from chalicelib.domain.clock import utc_now
from chalicelib.domain.errors import Conflict
from chalicelib.domain.matches import MatchStatus
from chalicelib.domain.reconciliation_exceptions import ExceptionStatus, RecordFilter
from chalicelib.services import audit
from chalicelib.services import matches as match_service
from chalicelib.services.reconciliation_exceptions import (
    ExceptionQuery,
    filtered_aggregates,
    list_exceptions,
    records_page,
    refresh,
    sweep,
    update,
    view_aggregates,
)
from chalicelib.services.reconciliation_rules import create_rule
from tests.services.conftest import ENV, days_ago, matched_by_a_run, record

RULE = {"name": "Amount", "priority": 1, "conditions": [{"field": "amount", "operator": "equals"},
                                                        {"field": "date", "operator": "within", "days": 3}]}


@pytest.fixture
def ran(ports, ingest, reconciliation):
    """Bank: 10.00 and 25.00 (credit) and 7.00 (debit) unmatched for weeks, 5.00 matched, 3.00 from today.
    Ledger: the 5.00 partner, and 40.00 unmatched for weeks."""
    rule = create_rule(ports, ENV, reconciliation.id, RULE)
    bank = ingest(record("bank", 1, 1000, days_ago(20)), record("bank", 2, 2500, days_ago(40)),
                  record("bank", 3, 700, days_ago(100), direction="debit"), record("bank", 4, 500, days_ago(10)),
                  record("bank", 5, 300, days_ago(0)))
    ledger = ingest(record("ledger", 1, 500, days_ago(10)), record("ledger", 2, 4000, days_ago(8)))
    matched_by_a_run(ports, reconciliation, rule, [bank[3]], [ledger[0]])
    refresh(ports, ENV, reconciliation.id)  # the run's last phase
    return {"bank": bank, "ledger": ledger, "reconciliation": reconciliation}


def queue(ports, **query):
    """The exceptions of the queue, newest first."""
    return list_exceptions(ports, ENV, ExceptionQuery(**query), 0, 50)[0]


def bank_exception(ports):
    [row] = queue(ports, data_stream_key="bank")
    return row


def record_ids_of(ports, exception):
    """Its records' ids, newest first (as GET .../records lists them)."""
    return [r.id for r in records_page(ports, exception, RecordFilter(), 50, None)[0]]


def change(ports, exception_id, title=None, description=None, status=None):
    """What a PATCH of the exception does."""
    return update(ports, ENV, exception_id, title=title, description=description,
                  status=ExceptionStatus(status) if status else None)


def manual_match(ports, reconciliation_id, record_ids):
    """What POST /reconciliation_matches does."""
    return match_service.create_manual_match(ports, ENV, reconciliation_id, record_ids, False, None)


# Moved from tests/integration/test_exceptions_api.py ---------------------------------------------

def test_refreshing_again_adds_newly_overdue_records_to_the_same_exception(ports, ran):
    refresh(ports, ENV, ran["reconciliation"].id, now=utc_now() + timedelta(days=5))

    assert len(queue(ports, data_stream_key="bank")) == 1
    assert view_aggregates(bank_exception(ports))["record_count"] == 4  # today's 3.00 is 5 days old by then


def test_records_matched_later_leave_and_an_emptied_exception_resolves_itself(ports, ingest, ran):
    ledger = ingest(record("ledger", 3, 1000, days_ago(20)), record("ledger", 4, 2500, days_ago(40)),
                    record("ledger", 5, 700, days_ago(100), direction="debit"))
    for bank_id, ledger_id in zip(ran["bank"][:3], ledger):
        manual_match(ports, ran["reconciliation"].id, [bank_id, ledger_id])

    refresh(ports, ENV, ran["reconciliation"].id)

    exception = ports.exceptions.get(ENV, bank_exception(ports).id)
    assert exception.status == "resolved" and exception.closed_at
    assert view_aggregates(exception)["record_count"] == 0
    assert ports.exceptions.comments(exception)[-1].author_idp_id == "system"
    assert "resolved automatically" in ports.exceptions.comments(exception)[-1].body


def test_an_exception_resolved_automatically_during_a_persons_request_is_not_said_to_be_theirs(ports, ingest, ran):
    """Their request's events name them (`actor`); a decision its announcer made is the system's."""
    ledger = ingest(record("ledger", 3, 1000, days_ago(20)), record("ledger", 4, 2500, days_ago(40)),
                    record("ledger", 5, 700, days_ago(100), direction="debit"))
    ledger_exception = queue(ports, data_stream_key="ledger")[0]
    with audit.acting_as("user:7"):
        change(ports, ledger_exception.id, status="investigating")
        for bank_id, ledger_id in zip(ran["bank"][:3], ledger):
            manual_match(ports, ran["reconciliation"].id, [bank_id, ledger_id])
        refresh(ports, ENV, ran["reconciliation"].id)
    moved = {e.data["status"]: e.data for _, e in ports.events.published
             if e.type == "reconciliation_exception.status_changed"}
    assert moved["investigating"]["actor"] == "user:7"
    assert "actor" not in moved["resolved"]


@pytest.mark.parametrize("moves, refused", [
    (["investigating", "open", "dismissed", "open", "resolved"], None),
    (["dismissed", "investigating"], "investigating"),
    (["resolved", "dismissed"], "dismissed"),
])
def test_status_moves_follow_the_table(ports, ran, moves, refused):
    exception_id = bank_exception(ports).id
    for status in moves:
        if status == refused:
            with pytest.raises(Conflict) as refusal:
                change(ports, exception_id, status=status)
            assert "cannot become" in refusal.value.message
            return
        body = change(ports, exception_id, status=status)
        assert body.status == status
        assert (body.closed_at is not None) == (status in ("dismissed", "resolved"))


def test_a_title_and_description_written_by_a_person_stay(ports, ran):
    exception_id = bank_exception(ports).id
    change(ports, exception_id, title="Missing deposits", description="Chasing the bank")
    refresh(ports, ENV, ran["reconciliation"].id, now=utc_now() + timedelta(days=5))
    shown = ports.exceptions.get(ENV, exception_id)
    assert (shown.title, shown.description) == ("Missing deposits", "Chasing the bank")
    assert view_aggregates(shown)["record_count"] == 4


def test_the_sweeper_refreshes_reconciliations_not_refreshed_for_an_hour(ports, ran):
    assert sweep(ports) == 0  # the run just refreshed it
    assert sweep(ports, now=utc_now() + timedelta(hours=2, days=5)) == 1
    assert view_aggregates(bank_exception(ports))["record_count"] == 4


def test_amounts_kept_with_different_decimal_places_add_up_at_one_scale(ports, ingest, reconciliation):
    create_rule(ports, ENV, reconciliation.id, RULE)
    ingest(record("bank", 1, 500, days_ago(20), decimal_places=2), record("bank", 2, 5, days_ago(20), decimal_places=0),
           record("bank", 3, 1250, days_ago(20), decimal_places=3))
    refresh(ports, ENV, reconciliation.id)  # what the run's last phase does (it matched nothing)
    [row] = queue(ports, data_stream_key="bank")
    assert row.decimal_places == 3
    assert view_aggregates(row)["credit_sum"] == 5000 + 5000 + 1250  # 5.00 + 5 + 1.250, in thousandths
    assert row.description == "3 unmatched records totalling 11.250 USD (3 credits, 0 debits)"
    detail = filtered_aggregates(ports, row, RecordFilter(amount_min=5000, amount_max=5000))
    assert detail["record_count"] == 2


def test_a_close_refused_for_a_stale_version_keeps_the_exception_the_only_active_one(ports, ran):
    current = ports.exceptions.get(ENV, bank_exception(ports).id)
    stale = replace(current.moved(ExceptionStatus.DISMISSED, utc_now()), version=current.version)  # a lost race
    with pytest.raises(Conflict):
        ports.exceptions.save(stale, previous=replace(current, version=current.version - 1))

    refresh(ports, ENV, ran["reconciliation"].id, now=utc_now() + timedelta(days=5))
    assert [(e.id, e.status) for e in queue(ports, data_stream_key="bank")] == [(current.id, "open")]


def test_a_refresh_cut_short_after_adding_records_is_put_right_by_the_next(ports, ran):
    exception = ports.exceptions.get(ENV, bank_exception(ports).id)
    ports.exceptions.set_totals(exception, {"record_count": 0, "credit_count": 0, "credit_sum": 0, "debit_count": 0,
                                            "debit_sum": 0, "date_ordinal_sum": 0, "oldest": None, "newest": None},
                                "")  # as if the crash came before the totals were written

    refresh(ports, ENV, ran["reconciliation"].id)

    assert view_aggregates(bank_exception(ports))["record_count"] == 3


def test_one_refresh_of_a_reconciliation_runs_at_a_time(ports, ran):
    now = utc_now()
    assert ports.exceptions.take_refresh_lease(ENV, ran["reconciliation"].id, now, timedelta(minutes=15))
    assert refresh(ports, ENV, ran["reconciliation"].id, now=now) is False
    assert refresh(ports, ENV, ran["reconciliation"].id,
                   now=now + timedelta(minutes=16)) is True  # a lease past its end is taken over


def test_a_reopen_while_another_exception_is_active_is_a_conflict_naming_it(ports, ingest, ran):
    first = bank_exception(ports).id
    change(ports, first, status="dismissed")
    ingest(record("bank", 9, 999, days_ago(30)))
    refresh(ports, ENV, ran["reconciliation"].id)
    second = [e.id for e in queue(ports, data_stream_key="bank", status=ExceptionStatus.OPEN)]
    assert len(second) == 1 and second[0] != first

    with pytest.raises(Conflict) as refused:
        change(ports, first, status="open")

    assert str(second[0]) in refused.value.message


def test_after_an_unmatch_and_a_manual_match_the_exception_holds_exactly_the_open_overdue_records(
        ports, ingest, ran):
    recon_id = ran["reconciliation"].id
    [run_match] = ports.matches.list_page(ENV, recon_id, 50, None)[0]
    [late] = ingest(record("ledger", 3, 1000, days_ago(20)))

    match_service.unmatch(ports, ENV, run_match.id)  # bank 5.00 open again
    manual_match(ports, recon_id, [ran["bank"][0], late])  # bank 10.00 matched

    assert ports.reconciliations.get(ENV, recon_id).exceptions_refresh_pending is True  # until the sweeper's next minute
    sweep(ports)

    bank = bank_exception(ports)
    assert ports.reconciliations.get(ENV, recon_id).exceptions_refresh_pending is False
    ids = record_ids_of(ports, bank)
    assert ids == sorted([ran["bank"][1], ran["bank"][2], ran["bank"][3]], reverse=True)
    assert view_aggregates(bank) == {
        "record_count": 3, "total_amount": 2500 - 700 + 500, "debit_count": 1, "debit_sum": 700,
        "credit_count": 2, "credit_sum": 3000, "pending_confirmation_count": 0, "avg_age_days": round((40 + 100 + 10) / 3, 2),
        "oldest_at": f"{days_ago(100)}T00:00:00Z", "newest_at": f"{days_ago(10)}T00:00:00Z"}
    [ledger] = queue(ports, data_stream_key="ledger")
    assert view_aggregates(ledger)["record_count"] == 2  # the ledger's 5.00, unmatched, joined its 40.00


def test_confirming_a_match_requests_a_refresh_too(ports, ingest, reconciliation):
    rule = create_rule(ports, ENV, reconciliation.id, {**RULE, "auto_confirm": False})
    bank = ingest(record("bank", 1, 1000, days_ago(20)))
    ledger = ingest(record("ledger", 1, 1000, days_ago(20)))
    match = matched_by_a_run(ports, reconciliation, rule, bank, ledger, MatchStatus.PROPOSED)
    assert not ports.reconciliations.get(ENV, reconciliation.id).exceptions_refresh_pending

    assert match_service.confirm(ports, ENV, match.id).status == "confirmed"

    assert ports.reconciliations.get(ENV, reconciliation.id).exceptions_refresh_pending


def test_a_refresh_requested_while_a_refresh_runs_is_kept_for_the_next_sweep(ports, ran):
    recon_id = ran["reconciliation"].id
    seen = ports.reconciliations.get(ENV, recon_id)  # a refresh starts, reading the reconciliation
    ports.reconciliations.request_exceptions_refresh(ENV, recon_id)  # a person unmatches meanwhile

    ports.reconciliations.mark_exceptions_refreshed(ENV, recon_id, utc_now(), seen.exceptions_refresh_requests)

    assert ports.reconciliations.get(ENV, recon_id).exceptions_refresh_pending
    assert sweep(ports) == 1
    assert not ports.reconciliations.get(ENV, recon_id).exceptions_refresh_pending


# Added ---------------------------------------------------------------------------------------------

class HoldsSeen:
    """The exceptions repository, noting which records a refresh tries to hold."""

    def __init__(self, exceptions) -> None:
        self._exceptions, self.tried = exceptions, []

    def __getattr__(self, name):
        return getattr(self._exceptions, name)

    def hold_together(self, environment, record_ids, reconciliation_id, exception_id):
        if self._exceptions.in_transactions:
            self.tried += record_ids
        return self._exceptions.hold_together(environment, record_ids, reconciliation_id, exception_id)

    def hold_record(self, environment, record_id, reconciliation_id, exception_id):
        self.tried.append(record_id)
        return self._exceptions.hold_record(environment, record_id, reconciliation_id, exception_id)


@pytest.mark.parametrize("in_transactions", [True, False], ids=["holds in transactions", "holds one by one"])
def test_records_a_dismissed_exception_holds_stay_there_and_only_newcomers_join_the_next(ports, ingest, ran,
                                                                                        in_transactions):
    ports.exceptions.in_transactions = in_transactions
    dismissed = bank_exception(ports)
    change(ports, dismissed.id, status="dismissed")
    [newcomer] = ingest(record("bank", 9, 999, days_ago(30)))
    seen = HoldsSeen(ports.exceptions)

    refresh(replace(ports, exceptions=seen), ENV, ran["reconciliation"].id)

    [active] = queue(ports, data_stream_key="bank", status=ExceptionStatus.OPEN)
    assert record_ids_of(ports, active) == [newcomer] and seen.tried == [newcomer]  # the others are not even tried
    assert record_ids_of(ports, ports.exceptions.get(ENV, dismissed.id)) == sorted(ran["bank"][:3], reverse=True)


class HoldsPartlyTogether(HoldsSeen):
    """Transactions that hold only the first record asked (on AWS, a conflict with another write
    leaves the others to hold one by one); `tried` notes the holds sent one by one."""

    def hold_together(self, environment, record_ids, reconciliation_id, exception_id):
        return self._exceptions.hold_together(environment, record_ids[:1], reconciliation_id, exception_id)


def test_records_a_transaction_left_out_are_held_one_by_one(ports, ingest, reconciliation):
    bank = ingest(record("bank", 1, 1000, days_ago(20)), record("bank", 2, 2500, days_ago(40)),
                  record("bank", 3, 700, days_ago(100)))
    seen = HoldsPartlyTogether(ports.exceptions)

    refresh(replace(ports, exceptions=seen), ENV, reconciliation.id)

    assert sorted(record_ids_of(ports, bank_exception(ports))) == sorted(bank)
    assert len(seen.tried) == 2 and set(seen.tried) < set(bank)  # all but the one the transaction held


def test_records_still_within_their_grace_open_no_exception(ports, ingest, reconciliation):
    ingest(record("bank", 1, 1000, days_ago(3)), record("ledger", 1, 1000, days_ago(2)))  # exception_after_days=3

    assert refresh(ports, ENV, reconciliation.id) is True

    assert queue(ports) == []
    assert refresh(ports, ENV, reconciliation.id, now=utc_now() + timedelta(days=1)) is True
    assert [e.data_stream_key for e in queue(ports)] == ["bank"]


# Found by a review of the refresh ------------------------------------------------------------------

class LetGoFails(HoldsSeen):
    """A refresh whose release of a record's hold fails (a throttle): the refresh stops there."""

    def let_go_record(self, *args):
        raise RuntimeError("throttled")


def test_a_refresh_cut_short_at_letting_go_leaves_no_hold_that_keeps_the_record_out_for_good(
        ports, ingest, reconciliation):
    [bank] = ingest(record("bank", 1, 1000, days_ago(20)))
    [ledger] = ingest(record("ledger", 1, 1000, days_ago(1)))
    refresh(ports, ENV, reconciliation.id)
    first = bank_exception(ports)
    match = manual_match(ports, reconciliation.id, [bank, ledger])
    with pytest.raises(RuntimeError):
        refresh(replace(ports, exceptions=LetGoFails(ports.exceptions)), ENV, reconciliation.id)
    refresh(ports, ENV, reconciliation.id)  # the next lets go, then resolves the emptied exception
    assert ports.exceptions.get(ENV, first.id).status == "resolved"

    match_service.unmatch(ports, ENV, match.id)  # a person undoes the match: the bank record is overdue again
    sweep(ports)

    [again] = queue(ports, data_stream_key="bank", status=ExceptionStatus.OPEN)
    assert again.id != first.id and record_ids_of(ports, again) == [bank]


def test_a_refresh_that_finds_another_running_asks_for_one_after_it(ports, ingest, reconciliation):
    # A run's refresh meets the sweeper's, which read the open records before the run's matches
    rule = create_rule(ports, ENV, reconciliation.id, RULE)
    [bank] = ingest(record("bank", 1, 1000, days_ago(20)))
    [ledger] = ingest(record("ledger", 1, 1000, days_ago(20)))
    refresh(ports, ENV, reconciliation.id)
    exception = bank_exception(ports)
    now = utc_now()
    seen = ports.reconciliations.get(ENV, reconciliation.id)  # the sweeper's refresh starts
    assert ports.exceptions.take_refresh_lease(ENV, reconciliation.id, now, timedelta(minutes=15))
    matched_by_a_run(ports, reconciliation, rule, [bank], [ledger])

    assert refresh(ports, ENV, reconciliation.id) is False  # the run's own, at its end
    ports.reconciliations.mark_exceptions_refreshed(ENV, reconciliation.id, now, seen.exceptions_refresh_requests)
    ports.exceptions.release_refresh_lease(ENV, reconciliation.id, now)  # the sweeper's ends, on what it read

    assert ports.reconciliations.get(ENV, reconciliation.id).exceptions_refresh_pending
    assert sweep(ports, now + timedelta(minutes=1)) == 1
    assert ports.exceptions.get(ENV, exception.id).status == "resolved"


def test_a_sweep_that_finds_a_refresh_running_asks_for_none_after_it(ports, ran):
    # Sweeps overlap when a refresh takes over a minute: the second asking again would keep the
    # reconciliation refreshing back to back, for nothing changed
    recon_id, now = ran["reconciliation"].id, utc_now() + timedelta(hours=2)  # due by the hour
    seen = ports.reconciliations.get(ENV, recon_id)  # the first sweep's refresh starts
    assert ports.exceptions.take_refresh_lease(ENV, recon_id, now, timedelta(minutes=15))

    assert sweep(ports, now + timedelta(minutes=1)) == 0  # the next sweep finds it running

    ports.reconciliations.mark_exceptions_refreshed(ENV, recon_id, now, seen.exceptions_refresh_requests)
    ports.exceptions.release_refresh_lease(ENV, recon_id, now)
    assert not ports.reconciliations.get(ENV, recon_id).exceptions_refresh_pending
    assert sweep(ports, now + timedelta(minutes=2)) == 0


class DismissedWhileHolding(HoldsSeen):
    """A person dismisses the exception while a refresh holds the records that newly joined it."""

    def __init__(self, exceptions, ports) -> None:
        super().__init__(exceptions)
        self._ports = ports

    def hold_together(self, environment, record_ids, reconciliation_id, exception_id):
        change(self._ports, exception_id, status="dismissed")
        return self._exceptions.hold_together(environment, record_ids, reconciliation_id, exception_id)

    def hold_record(self, environment, record_id, reconciliation_id, exception_id):
        if self._exceptions.get(environment, exception_id).active:
            change(self._ports, exception_id, status="dismissed")
        return self._exceptions.hold_record(environment, record_id, reconciliation_id, exception_id)


def test_records_joining_as_a_person_dismisses_the_exception_join_the_next_one_instead(
        ports, ingest, reconciliation):
    [kept] = ingest(record("bank", 1, 1000, days_ago(20)))
    refresh(ports, ENV, reconciliation.id)
    dismissed = bank_exception(ports)
    [late] = ingest(record("bank", 2, 2000, days_ago(30)))  # overdue since the last refresh

    refresh(replace(ports, exceptions=DismissedWhileHolding(ports.exceptions, ports)), ENV, reconciliation.id)
    refresh(ports, ENV, reconciliation.id)

    assert record_ids_of(ports, ports.exceptions.get(ENV, dismissed.id)) == [kept]  # what the person decided on
    [active] = queue(ports, data_stream_key="bank", status=ExceptionStatus.OPEN)
    assert record_ids_of(ports, active) == [late]


def test_deleting_a_record_asks_for_a_refresh_of_the_reconciliations_of_its_stream(ports, ingest, reconciliation):
    from chalicelib.services.records import delete_record

    [bank, other] = ingest(record("bank", 1, 1000, days_ago(20)), record("bank", 2, 700, days_ago(20)))
    refresh(ports, ENV, reconciliation.id)

    delete_record(ports, ENV, bank)

    assert ports.reconciliations.get(ENV, reconciliation.id).exceptions_refresh_pending
    assert sweep(ports) == 1
    assert record_ids_of(ports, bank_exception(ports)) == [other]


def test_the_exception_of_a_stream_taken_out_of_the_reconciliation_resolves_and_lets_its_records_go(ports, ingest):
    from chalicelib.services.reconciliation_exceptions import _resolve_left_stream
    from chalicelib.services.reconciliations import update_reconciliation
    from tests.services.conftest import new_reconciliation, streams

    streams(ports, "bank", "ledger", "card")
    reconciliation = new_reconciliation(ports, side_b=("ledger", "card"))
    [card] = ingest(record("card", 1, 1000, days_ago(20)))
    refresh(ports, ENV, reconciliation.id)
    [left] = queue(ports, data_stream_key="card")

    update_reconciliation(ports, ENV, reconciliation.id, side_b=["ledger"])
    assert sweep(ports) == 1

    resolved = ports.exceptions.get(ENV, left.id)
    assert resolved.status == "resolved" and record_ids_of(ports, resolved) == [card]  # listed as it was
    assert "'card' is no longer part of this reconciliation" in ports.exceptions.comments(resolved)[-1].body
    assert ports.claims.held_records(ENV, [card])[0].exception_in(reconciliation.id) is None

    update_reconciliation(ports, ENV, reconciliation.id, side_b=["ledger", "card"])  # it comes back
    refresh(ports, ENV, reconciliation.id)
    [again] = queue(ports, data_stream_key="card", status=ExceptionStatus.OPEN)
    assert again.id != left.id and record_ids_of(ports, again) == [card]

    # A refresh that read the reconciliation before the stream came back leaves its exception be
    stale = ports.reconciliations.get(ENV, reconciliation.id).changed(utc_now(), side_b=["ledger"])
    _resolve_left_stream(ports, stale, "card", utc_now())
    assert ports.exceptions.get(ENV, again.id).status == "open"
