"""Which of a stream's records a run reads from the analytics mirror, and which from the table.

The mirror holds each import's rows as the import wrote them. A record claimed by a match, deleted,
or written by an execution after its import was counted is no longer (or never was) as its
import's rows say; whatever does that notes first the block of ids the record's id falls in
(`change_block`). A run then takes from the mirror the records of every block nothing noted, and
reads the noted blocks from the table: in steady state, the blocks of the imports earlier runs
matched (whose open records are few: the open-records index holds only those) and none of a new
import's but the one it may share with the import before it.
"""
from __future__ import annotations

from bisect import bisect_right
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from enum import Enum

# 16,384 ids: a million records claimed note 62 blocks (one small item each, written once), and a
# new import leaves at most a block of its records to the table on account of its neighbours.
CHANGE_BLOCK_IDS = 1 << 14


def change_block(record_id: int) -> int:
    return record_id // CHANGE_BLOCK_IDS


def change_blocks(record_ids: Iterable[int]) -> set[int]:
    return {change_block(record_id) for record_id in record_ids}


def blocks_between(first_id: int, last_id: int) -> range:
    """The blocks ids first to last (both in) fall in."""
    return range(change_block(first_id), change_block(last_id) + 1)


def ids_by_stream(records: Iterable[tuple[str, int]]) -> dict[str, list[int]]:
    """(stream key, record id) pairs as the ids of each stream, as changes are noted."""
    grouped: dict[str, list[int]] = {}
    for stream_key, record_id in records:
        grouped.setdefault(stream_key, []).append(record_id)
    return grouped


class Held(Enum):
    """What is known of an import's records in the stream read."""
    MIRRORED = "mirrored"  # the mirror holds every record it created there
    NONE_COUNTED = "none_counted"  # it created none there; only a late write, which notes its block, may have
    WRITING = "writing"  # still writing: none of its records is read (a run leaves them out)


@dataclass(frozen=True)
class ImportSpan:
    """The ids an import may have given its records (a job's block: first to last, both in)."""
    job_id: int
    first_id: int
    last_id: int
    held: Held = Held.MIRRORED


@dataclass(frozen=True)
class ReadPlan:
    """The imports whose mirror rows are read (their rows in a changed block left out), and the id
    ranges (first and last, both in) read from the table: every changed block of the imports not
    writing, neighbouring ones read as one range unless mirror rows or an import still writing lie
    between them."""
    from_mirror: tuple[int, ...]
    from_table: tuple[tuple[int, int], ...]


def plan_reads(imports: Iterable[ImportSpan], changed: Collection[int]) -> ReadPlan:
    pieces: list[tuple[int, int, str, int]] = []  # first id, last id, where it is read from, job
    for span in imports:
        for block in blocks_between(span.first_id, span.last_id):
            first = max(span.first_id, block * CHANGE_BLOCK_IDS)
            last = min(span.last_id, (block + 1) * CHANGE_BLOCK_IDS - 1)
            if span.held is Held.WRITING:
                pieces.append((first, last, "nowhere", span.job_id))
            elif block in changed:
                pieces.append((first, last, "table", span.job_id))
            elif span.held is Held.MIRRORED:
                pieces.append((first, last, "mirror", span.job_id))
    pieces.sort()
    from_mirror: dict[int, None] = {}
    ranges: list[tuple[int, int]] = []
    joins = False  # whether a table piece may join the range before it
    for first, last, source, job_id in pieces:
        if source == "mirror":
            from_mirror[job_id] = None
        if source != "table":
            joins = False
        elif joins:
            ranges[-1] = (ranges[-1][0], last)
        else:
            ranges.append((first, last))
            joins = True
    return ReadPlan(tuple(from_mirror), tuple(ranges))


def outside_spans(record_ids: Iterable[int], imports: Iterable[ImportSpan]) -> list[int]:
    """The ids no import's span holds: records a run reading the mirror would never read (plan_reads
    reads the table only within the imports' spans)."""
    spans = sorted((span.first_id, span.last_id) for span in imports)
    firsts = [first for first, _ in spans]
    reach, lasts = -1, []
    for _, last in spans:  # the furthest id covered by a span that begins at or before each one
        reach = max(reach, last)
        lasts.append(reach)
    return sorted(i for i in record_ids if (at := bisect_right(firsts, i) - 1) < 0 or lasts[at] < i)
