"""The analytics mirror: parts staged and published, an import's totals read back from what was
published, stream counts from row markers less tombstones, and a stream forgotten."""
from __future__ import annotations

from dataclasses import replace

from chalicelib.domain.ingestion import ImportTotals, StreamTotals
from chalicelib.domain.records import Direction, Record, RecordStatus
from chalicelib.domain.tallies import CurrencyAmounts
from tests.contract.builders import ENV, OTHER_ENV, T0


def record(record_id: int, stream_key: str = "bank", date: str = "2024-03-01", amount: int = 100,
           direction: Direction = Direction.CREDIT, currency: str = "EUR", environment: str = ENV) -> Record:
    return Record(environment=environment, id=record_id, data_stream_key=stream_key, data_stream_id=4, date=date,
                  amount=amount, direction=direction, currency=currency, decimal_places=2,
                  status=RecordStatus.UNRECONCILED, created_at=T0, description=f"record {record_id}",
                  external_id=f"ext-{record_id}", file_import_id=7)


BANK = [record(1, date="2024-03-02", amount=1500), record(2, amount=250, direction=Direction.DEBIT, currency="USD"),
        record(4, date="2024-03-09", amount=99)]
LEDGER = [record(3, "ledger", date="2024-02-28", amount=40, direction=Direction.DEBIT)]
BANK_TOTALS = StreamTotals(count=3, credits=1599, debits=250, date_min="2024-03-01", date_max="2024-03-09",
                           currencies=("EUR", "USD"))
LEDGER_TOTALS = StreamTotals(count=1, credits=0, debits=40, date_min="2024-02-28", date_max="2024-02-28",
                             currencies=("EUR",))


def imported(mirror, job_id: int, records: list[Record], streams: list[str], environment: str = ENV) -> ImportTotals:
    mirror.write_part(environment, job_id, 0, records)
    mirror.publish(environment, job_id, streams)
    return mirror.summarize(environment, job_id, streams)


class TestAnalyticsMirror:
    def test_publish_moves_each_streams_staged_parts_once(self, mirror):
        mirror.write_part(ENV, 7, 0, [BANK[0], LEDGER[0], BANK[1]])
        mirror.write_part(ENV, 7, 1, [BANK[2]])
        assert mirror.publish(ENV, 7, ["bank"]) == 2
        assert mirror.publish(ENV, 7, ["bank"]) == 0  # a retry finds them moved
        assert mirror.publish(ENV, 8, ["bank", "ledger"]) == 0
        assert mirror.publish(ENV, 7, ["ledger", "cards"]) == 1
        assert mirror.count_records(ENV, "bank") == 0  # nothing counts before its import is summarized

    def test_an_imports_totals_come_from_its_published_parts(self, mirror):
        mirror.write_part(ENV, 7, 0, BANK[:2])
        mirror.write_part(ENV, 7, 1, BANK[2:])
        mirror.publish(ENV, 7, ["bank"])
        mirror.write_part(ENV, 7, 2, [record(9, amount=5000)])  # staged, not published: not read
        assert mirror.summarize(ENV, 7, ["bank"]) == ImportTotals(BANK_TOTALS)
        assert mirror.count_records(ENV, "bank") == 3
        assert mirror.summarize(ENV, 7, ["bank", "cards"]) == ImportTotals(BANK_TOTALS, {
            "bank": BANK_TOTALS, "cards": StreamTotals()})  # several streams: each one's part, empty or not
        assert mirror.summarize(ENV, 8, ["bank"]) == ImportTotals(StreamTotals())  # nothing published
        assert mirror.count_records(ENV, "bank") == 3

    def test_an_imports_totals_of_amounts_at_the_bound_add_up_past_64_bits(self, mirror):
        # Given an import of two credits and a debit at the largest amount a record may hold
        largest = 2**63 - 1
        records = [record(1, amount=largest), record(2, amount=largest),
                   record(3, amount=largest, direction=Direction.DEBIT)]
        # When its totals are read back from what was published
        totals = imported(mirror, 7, records, ["bank"])
        # Then they are exact
        assert (totals.total.credits, totals.total.debits) == (2 * largest, largest)

    def test_an_import_of_several_streams_keeps_each_streams_part(self, mirror):
        totals = imported(mirror, 7, BANK + LEDGER, ["bank", "ledger", "cards"])
        assert totals == ImportTotals(
            StreamTotals(count=4, credits=1599, debits=290, date_min="2024-02-28", date_max="2024-03-09",
                         currencies=("EUR", "USD")),
            {"bank": BANK_TOTALS, "ledger": LEDGER_TOTALS, "cards": StreamTotals()})
        assert [mirror.count_records(ENV, key) for key in ("bank", "ledger", "cards")] == [3, 1, 0]

    def test_a_part_written_again_replaces_it_and_the_largest_row_count_stands(self, mirror):
        mirror.write_part(ENV, 7, 0, BANK)
        mirror.write_part(ENV, 7, 0, BANK[:1])  # the chunk processed again
        assert mirror.publish(ENV, 7, ["bank"]) == 1
        assert mirror.summarize(ENV, 7, ["bank"]).total.count == 1
        mirror.write_part(ENV, 7, 0, BANK)
        mirror.publish(ENV, 7, ["bank"])
        assert mirror.summarize(ENV, 7, ["bank"]).total == BANK_TOTALS
        mirror.write_part(ENV, 7, 0, BANK[:2])
        mirror.publish(ENV, 7, ["bank"])
        assert mirror.summarize(ENV, 7, ["bank"]).total.count == 2
        assert mirror.count_records(ENV, "bank") == 3  # a retry may have seen more parts: the largest marker

    def test_tombstones_count_against_their_stream_and_import(self, mirror):
        imported(mirror, 7, BANK + LEDGER, ["bank", "ledger"])
        imported(mirror, 8, [record(10), record(11)], ["bank"])
        mirror.tombstone(ENV, "bank", 7, 1)
        mirror.tombstone(ENV, "bank", 7, 1)  # one per record
        mirror.tombstone(ENV, "bank", 9, 50)  # an import never summarized: counts nothing
        mirror.tombstone(ENV, "ledger", 7, 3)
        assert (mirror.count_records(ENV, "bank"), mirror.count_records(ENV, "ledger")) == (4, 0)
        mirror.tombstone(ENV, "bank", 8, 999)  # a record the import never had counts all the same
        assert mirror.count_records(ENV, "bank") == 3
        imported(mirror, 9, [record(50), record(51)], ["bank"])
        assert mirror.count_records(ENV, "bank") == 4  # the early tombstone counts once its import does
        assert mirror.count_records(OTHER_ENV, "bank") == 0

    def test_forget_stream_removes_all_of_it_and_nothing_else(self, mirror):
        imported(mirror, 7, BANK + LEDGER, ["bank", "ledger"])
        imported(mirror, 7, [record(1, environment=OTHER_ENV)], ["bank"], environment=OTHER_ENV)
        mirror.tombstone(ENV, "bank", 7, 1)
        mirror.write_part(ENV, 8, 0, [record(20)])  # staged only
        mirror.forget_stream(ENV, "bank")
        assert [mirror.count_records(ENV, "bank"), mirror.count_records(ENV, "ledger"),
                mirror.count_records(OTHER_ENV, "bank")] == [0, 1, 1]
        assert mirror.publish(ENV, 8, ["bank"]) == 0
        assert mirror.summarize(ENV, 7, ["bank"]) == ImportTotals(StreamTotals())
        # A new stream with the key starts empty: the old tombstone is gone with the rest.
        assert imported(mirror, 9, BANK, ["bank"]).total == BANK_TOTALS
        assert mirror.count_records(ENV, "bank") == 3

    def test_published_imports_name_each_import_with_its_rows(self, mirror):
        imported(mirror, 7, BANK + LEDGER, ["bank", "ledger"])
        imported(mirror, 70, [record(10)], ["bank"])
        mirror.write_part(ENV, 8, 0, [record(20)])  # staged only: not in the mirror yet
        mirror.publish(ENV, 8, ["bank"])  # published but not summarized: no marker, so not counted either
        assert mirror.published_imports(ENV, "bank") == {7: 3, 70: 1}
        assert mirror.published_imports(ENV, "ledger") == {7: 1}
        assert mirror.published_imports(OTHER_ENV, "bank") == {}

    def test_forget_import_removes_it_from_the_streams_named_and_nothing_else(self, mirror):
        imported(mirror, 7, BANK + LEDGER, ["bank", "ledger"])
        imported(mirror, 70, [record(10), record(11)], ["bank"])
        imported(mirror, 7, [record(1, environment=OTHER_ENV)], ["bank"], environment=OTHER_ENV)
        mirror.tombstone(ENV, "bank", 7, 1)
        mirror.tombstone(ENV, "bank", 70, 10)
        mirror.write_part(ENV, 7, 5, [record(30)])  # staged, not yet published
        mirror.forget_import(ENV, 7, ["bank"])
        assert mirror.published_imports(ENV, "bank") == {70: 2}
        assert [mirror.count_records(ENV, "bank"), mirror.count_records(ENV, "ledger"),
                mirror.count_records(OTHER_ENV, "bank")] == [1, 1, 1]
        assert mirror.publish(ENV, 7, ["bank"]) == 0  # its staged part went too
        # Written again from scratch, it counts what it holds now: its old tombstone is gone.
        assert imported(mirror, 7, BANK, ["bank"]).total == BANK_TOTALS
        assert mirror.count_records(ENV, "bank") == 4


class TestStreamMoney:
    """A stream's money by currency: its published imports less tombstones, exact at the largest
    decimal places, and (on S3) cached per import until a tombstone changes it."""

    def test_money_by_currency_of_the_published_imports_only(self, mirror):
        imported(mirror, 7, BANK, ["bank"])
        mirror.write_part(ENV, 8, 0, [record(9, amount=5000)])  # staged: not counted
        mirror.write_part(ENV, 10, 0, [record(11, amount=7000)])
        mirror.publish(ENV, 10, ["bank"])  # published but not summarized (no row marker): not counted
        mirrored = mirror.stream_money(ENV, "bank")
        assert mirrored.imports == {7}
        assert mirrored.money == {"EUR": CurrencyAmounts("EUR", 2, 1599, 0, 2),
                                  "USD": CurrencyAmounts("USD", 1, 0, 250, 2)}
        assert mirror.stream_money(OTHER_ENV, "bank").money == {}

    def test_a_tombstone_takes_its_record_out_even_after_the_money_was_read(self, mirror):
        imported(mirror, 7, BANK, ["bank"])
        assert mirror.stream_money(ENV, "bank").money["EUR"].count == 2  # read (and cached) once
        mirror.tombstone(ENV, "bank", 7, 1)
        assert mirror.stream_money(ENV, "bank").money["EUR"] == CurrencyAmounts("EUR", 1, 99, 0, 2)
        assert mirror.stream_money(ENV, "bank").money["EUR"] == CurrencyAmounts("EUR", 1, 99, 0, 2)

    def test_amounts_with_other_decimal_places_and_beyond_64_bits_add_up_exactly(self, mirror):
        big = 2**63 - 1
        rows = [record(1, amount=big), record(2, amount=big),
                replace(record(3, amount=5), decimal_places=3)]
        imported(mirror, 7, rows, ["bank"])
        imported(mirror, 8, [record(4, amount=1)], ["bank"])
        assert mirror.stream_money(ENV, "bank").money == {
            "EUR": CurrencyAmounts("EUR", 4, big * 2 * 10 + 5 + 10, 0, 3)}

    def test_an_import_whose_marker_grows_is_read_again_and_only_the_latest_cache_is_kept(self, mirror):
        imported(mirror, 7, BANK[:1], ["bank"])
        assert mirror.stream_money(ENV, "bank").money["EUR"].count == 1
        # A settle found another part of the same import and left a larger marker.
        mirror.write_part(ENV, 7, 1, BANK[2:])
        mirror.publish(ENV, 7, ["bank"])
        mirror.summarize(ENV, 7, ["bank"])
        assert mirror.stream_money(ENV, "bank").money["EUR"] == CurrencyAmounts("EUR", 2, 1599, 0, 2)
        mirror.tombstone(ENV, "bank", 7, 4)
        assert mirror.stream_money(ENV, "bank").money["EUR"] == CurrencyAmounts("EUR", 1, 1500, 0, 2)
        if hasattr(mirror, "_s3"):  # the adapter: one cache file per import, the one that holds
            listed = mirror._keys("mirror/environment=acme/data_stream=bank/import=7/")
            assert [k.rsplit("/", 1)[1] for k in listed if "_money-" in k] == ["_money-2-1.json"]

    def test_an_imports_rows_are_read_back_once_it_is_summarized(self, mirror):
        with_metadata = replace(BANK[0], metadata={"z": 1, "a": "x"})
        assert mirror.import_rows(ENV, "bank", 7) is None
        mirror.write_part(ENV, 7, 0, [with_metadata, LEDGER[0]])
        mirror.write_part(ENV, 7, 1, BANK[1:])
        mirror.publish(ENV, 7, ["bank", "ledger"])
        assert mirror.import_rows(ENV, "bank", 7) is None  # published, not yet summarized: not held
        mirror.summarize(ENV, 7, ["bank", "ledger"])
        rows = mirror.import_rows(ENV, "bank", 7).collect().sort("id")
        assert rows["id"].to_list() == [1, 2, 4] and mirror.import_rows(OTHER_ENV, "bank", 7) is None
        first = rows.row(0, named=True)
        assert (first["amount"], first["currency"], first["description"], first["external_id"]) == (
            1500, "EUR", "record 1", "ext-1")
        assert first["metadata"] == '{"a":"x","z":1}' and first["created_at"] == "2024-03-01T09:30:15.987Z"
        assert mirror.import_rows(ENV, "ledger", 7).collect()["id"].to_list() == [3]
