"""Which records a run reads from the analytics mirror and which from the table (domain/record_changes.py)."""
from chalicelib.domain.record_changes import (
    CHANGE_BLOCK_IDS,
    Held,
    ImportSpan,
    ReadPlan,
    change_blocks,
    ids_by_stream,
    outside_spans,
    plan_reads,
)

B = CHANGE_BLOCK_IDS


def test_a_record_id_falls_in_one_block():
    assert change_blocks([0, B - 1, B, 3 * B + 5]) == {0, 1, 3}


def test_ids_are_grouped_by_stream_in_the_order_given():
    assert ids_by_stream([("bank", 3), ("ledger", 1), ("bank", 2)]) == {"bank": [3, 2], "ledger": [1]}


def test_nothing_changed_reads_every_import_from_the_mirror():
    assert plan_reads([ImportSpan(7, 1, 2 * B), ImportSpan(8, 3 * B, 3 * B + 9)], set()) == ReadPlan((7, 8), ())


def test_an_import_whose_blocks_all_changed_is_read_from_the_table_alone():
    # Blocks 0 and 1 noted: the first import is left to the table, between its own first and last ids
    assert plan_reads([ImportSpan(7, 5, 2 * B - 1), ImportSpan(8, 2 * B, 2 * B + 9)], {0, 1, 9}) == \
        ReadPlan((8,), ((5, 2 * B - 1),))


def test_a_changed_block_inside_an_import_is_a_range_of_its_own_between_mirror_blocks():
    # An import over blocks 0-4, blocks 1 and 3 noted: two ranges, for the mirror's rows of block 2 lie between
    assert plan_reads([ImportSpan(7, 0, 5 * B - 1)], {1, 3}) == \
        ReadPlan((7,), ((B, 2 * B - 1), (3 * B, 4 * B - 1)))


def test_changed_blocks_of_neighbouring_imports_are_one_range_across_the_ids_of_no_import_read():
    # Two old imports matched whole, ids of other streams between them, then a new import: one read
    # of the table (a stream's listing holds none of the ids between) for the old ones and the block
    # the new one shares with the last of them, the rest of the new one from the mirror
    old_one, old_two = ImportSpan(1, 10, B - 1), ImportSpan(2, 3 * B, 4 * B + 99)
    new = ImportSpan(3, 4 * B + 100, 6 * B)
    plan = plan_reads([new, old_two, old_one], change_blocks(range(10, B)) | change_blocks(range(3 * B, 4 * B + 100)))
    assert plan == ReadPlan((3,), ((10, 5 * B - 1),))


def test_an_import_of_one_id_in_a_changed_block_is_that_id():
    assert plan_reads([ImportSpan(4, B + 3, B + 3)], {1}) == ReadPlan((), ((B + 3, B + 3),))


def test_an_import_that_counted_no_record_in_the_stream_is_read_only_where_a_late_write_noted_a_block():
    late = ImportSpan(5, 0, 3 * B - 1, Held.NONE_COUNTED)
    assert plan_reads([late], set()) == ReadPlan((), ())
    assert plan_reads([late], {1}) == ReadPlan((), ((B, 2 * B - 1),))
    # nor does what it never wrote keep its neighbours' changed blocks apart
    assert plan_reads([ImportSpan(4, 0, B - 1), ImportSpan(5, B, 2 * B - 1, Held.NONE_COUNTED),
                       ImportSpan(6, 2 * B, 3 * B - 1)], {0, 2}) == ReadPlan((), ((0, 3 * B - 1),))


def test_an_import_still_writing_is_read_from_neither_and_parts_the_ranges_around_it():
    imports = [ImportSpan(4, 0, B - 1), ImportSpan(5, B, 2 * B - 1, Held.WRITING), ImportSpan(6, 2 * B, 3 * B - 1)]
    assert plan_reads(imports, {0, 1, 2}) == ReadPlan((), ((0, B - 1), (2 * B, 3 * B - 1)))


def test_ids_outside_every_imports_span_are_found():
    spans = [ImportSpan(1, 10, 19), ImportSpan(2, 15, 40), ImportSpan(3, 100, 100, Held.WRITING), ImportSpan(4, 5, 6)]
    assert outside_spans([], spans) == []
    assert outside_spans([5, 6, 10, 19, 20, 40, 100], spans) == []
    assert outside_spans([101, 4, 7, 41, 99, 0], spans) == [0, 4, 7, 41, 99, 101]
    assert outside_spans([3], []) == [3]
    nested = [ImportSpan(1, 10, 50), ImportSpan(2, 20, 30)]  # a span inside another: the outer's end counts
    assert outside_spans([40, 50, 51], nested) == [51]
