"""Statement days of bank_feed streams: one per stream and statement, newest first (a window of
dates narrows them), the newest before a day, and each stream's latest day, which only moves
forward; a stream's delete takes them all."""
from __future__ import annotations

from datetime import date, timedelta

from chalicelib.domain.balances import StatementDay
from tests.contract.builders import ENV, OTHER_ENV

D0 = date(2024, 3, 1)


def day(offset: int, stream_key: str = "bank", statement_id: str = "st", environment: str = ENV,
        closing: int = 100, job_id: int = 7) -> StatementDay:
    return StatementDay(environment=environment, data_stream_key=stream_key, date=D0 + timedelta(days=offset),
                        statement_id=f"{statement_id}-{offset}", account="DE89", currency="EUR", decimal_places=2,
                        opening_booked=closing - 10, closing_booked=closing, closing_available=None,
                        file_import_id=job_id)


class TestBalanceRepository:
    def test_days_are_listed_newest_first_a_page_at_a_time_within_the_window(self, balances):
        balances.put_many([day(n) for n in range(5)] + [day(0, stream_key="cards"), day(0, environment=OTHER_ENV)])

        page, cursor = balances.page(ENV, "bank", 2, None)
        rest, end = balances.page(ENV, "bank", 10, cursor)
        assert [d.date for d in page + rest] == [D0 + timedelta(days=n) for n in (4, 3, 2, 1, 0)] and end is None
        assert page[0] == day(4)
        window, _ = balances.page(ENV, "bank", 10, None, date_from=D0 + timedelta(days=1),
                                  date_to=D0 + timedelta(days=3))
        assert [d.date.day for d in window] == [4, 3, 2]
        assert balances.older_than(day(2)) == day(1) and balances.older_than(day(0)) is None

    def test_the_same_statement_again_replaces_its_day(self, balances):
        balances.put_many([day(1, closing=100, job_id=7)])
        balances.put_many([day(1, closing=100, job_id=8)])
        assert balances.page(ENV, "bank", 10, None)[0] == [day(1, job_id=8)]

    def test_a_streams_latest_day_only_moves_forward(self, balances):
        balances.put_many([day(1), day(3)])
        balances.put_many([day(2)])  # an older statement imported later
        balances.put_many([day(0, stream_key="cards")])
        assert balances.latest_of(ENV, ["bank", "cards", "none"]) == {"bank": day(3), "cards": day(0, "cards")}
        balances.put_many([day(5)])
        assert balances.latest_of(ENV, ["bank"]) == {"bank": day(5)}

    def test_a_streams_delete_removes_its_days_and_latest_only(self, balances):
        balances.put_many([day(1), day(2), day(1, stream_key="cards")])
        balances.remove_stream(ENV, "bank")
        assert balances.page(ENV, "bank", 10, None) == ([], None)
        assert balances.latest_of(ENV, ["bank", "cards"]) == {"cards": day(1, "cards")}
