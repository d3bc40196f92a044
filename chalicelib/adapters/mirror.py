"""The analytics mirror: Parquet copies of records in S3, partitioned by environment, stream and
import (`mirror/environment=<env>/data_stream=<key>/import=<id>/part-<chunk>.parquet`).

A stream's record count comes from the mirror's listing alone, so that recounting a stream of
millions of records costs a few LIST calls, not a read of every part: a published import gets
an empty marker naming its row count (`import=<id>/_rows=<n>`, written from the parts it was
read back from), and a record deleted through the API an empty tombstone
(`deleted/import=<id>/record-<record id>`) instead of a rewrite of its part. Each row marker
is written twice: in its import, and in the stream's index of row markers
(`rows/import=<id>/_rows=<n>`), so that a count lists one key an import, not its parts (a stream
fed by a thousand bulk requests was four thousand keys listed at the end of every import). The
index says it is whole with `rows/_whole`; a stream whose index lacks it (published before the
index) is listed in full at its next count and its index made to agree with the imports' own
markers, as the mirror repair does for every stream (`reindex`).

The index's markers are rolled up as a stream grows: a count that lists `ROLL_UP_AFTER` loose
markers or more writes them, with the roll-ups it read, into one JSON object
(`rows/rollup/g=<generation>-<token>.json`: import ids and their rows) and then deletes what that
covers, so that a count lists a page and reads one object however many imports the stream has had
(a stream fed by 1,000-record bulk requests listed ten pages at the end of every import at 10M
records, a hundred at 100M). Readers list the loose markers before the roll-ups (they sort first)
and a roll-up is written before what it covers is deleted, so a reader finds each import in one or
the other; one whose roll-up is replaced under its read lists again. A stream's money (the
exceptions' refresh) goes by the same index: each import's sum is kept beside it, and once
`ROLL_UP_AFTER` imports without a tombstone have theirs, the refresh writes them into the stream's
money roll-up (`money/<epoch>/g=<generation>-<token>.json`) and later refreshes read that one object,
not one an import (a roll-up gone under the read: each import is read alone). An import forgotten (to
be written again) puts the money roll-ups out of date by a new epoch (`money/epoch/<epoch>`): only
those under the latest epoch are read.

Each chunk stages its records as one Parquet part under `staging/` while it writes them (a
chunk processed again rewrites the same part), so that nothing has to be read back from
DynamoDB. When the import turns `replicating`, its parts are published into the mirror and
read back from there to compute the import's aggregates; then each stream's parts are also
written as one object (`import=<id>/compact.parquet`, before the row marker), which readers of a
whole environment (the agents' `sql`) take instead of a thousand parts. polars is imported lazily:
only the workers that write or read the mirror load it.
"""
from __future__ import annotations

import io
import json
import re
import uuid
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

from chalicelib.domain.clock import iso
from chalicelib.domain.ingestion import ImportTotals, StreamTotals
from chalicelib.domain.records import Record
from chalicelib.domain.tallies import CurrencyAmounts, MirroredMoney, combined, money_from_plain, money_plain

PUBLISH_THREADS = 8
DELETE_BATCH = 1000  # what one DeleteObjects call takes
PREFIX = "mirror"
STAGING = "staging"
TOMBSTONES = "deleted"
ROWS_INDEX = "rows"
INDEX_WHOLE = "_whole"  # in the index: every published import's marker is in it
ROLLUPS = "rollup"  # in the index: markers rolled up into one object
MONEY_ROLLUPS = "money"  # beside the index: imports' money rolled up into one object
EPOCH = "epoch"  # among the money roll-ups: only those of the latest epoch hold (see forget_import)
FIRST_EPOCH = "0"  # before any epoch marker (sorts before every one)
ROLL_UP_AFTER = 500  # loose markers in the index before a count rolls them up (a page of a listing holds 1,000)
LISTING_ATTEMPTS = 5  # a count that finds its roll-up replaced under it lists again
COLUMNS = {"id": "Int64", "data_stream_key": "Utf8", "data_stream_id": "Int64", "date": "Utf8",
           "amount": "Int64", "currency": "Utf8", "decimal_places": "Int32", "direction": "Utf8",
           "description": "Utf8", "external_id": "Utf8", "file_import_id": "Int64", "metadata": "Utf8",
           "created_at": "Utf8"}
# `metadata` is JSON text with sorted keys (null when empty, as in the record's item), `created_at`
# ISO 8601 in UTC to the millisecond (as the API shows it): parts written before either have no such
# column, so a reader of it must fill it (every other reader names its columns).


def stream_prefix(environment: str, stream_key: str, root: str = PREFIX) -> str:
    return f"{root}/environment={environment}/data_stream={stream_key}/"


def import_prefix(environment: str, stream_key: str, job_id: int, root: str = PREFIX) -> str:
    return f"{stream_prefix(environment, stream_key, root)}import={job_id}/"


def rows_index(environment: str, stream_key: str) -> str:
    return f"{stream_prefix(environment, stream_key)}{ROWS_INDEX}/"


def index_marker_key(environment: str, stream_key: str, job_id: int, rows: int) -> str:
    return f"{rows_index(environment, stream_key)}import={job_id}/_rows={rows}"


def rollups(environment: str, stream_key: str) -> str:
    return f"{rows_index(environment, stream_key)}{ROLLUPS}/"


def money_rollups(environment: str, stream_key: str) -> str:
    return f"{stream_prefix(environment, stream_key)}{MONEY_ROLLUPS}/"


def tombstones(environment: str, stream_key: str) -> str:
    return f"{stream_prefix(environment, stream_key)}{TOMBSTONES}/"


def tombstone_key(environment: str, stream_key: str, job_id: int, record_id: int) -> str:
    return f"{tombstones(environment, stream_key)}import={job_id}/record-{record_id}"


ROWS_MARKER = re.compile(r"/import=(\d+)/_rows=(\d+)$")
TOMBSTONE = re.compile(rf"/{TOMBSTONES}/import=(\d+)/record-(\d+)$")
PART = re.compile(r"/import=(\d+)/part-\d+\.parquet$")
ROLLUP = re.compile(r"/g=(\d+)-[0-9a-f]+\.json$")  # a roll-up of the index's markers or of imports' money
MONEY_EPOCH = re.compile(rf"/{MONEY_ROLLUPS}/{EPOCH}/(\d+-[0-9a-f]+)$")  # named <generation>-<token>
# A published import's parts in one object, written with its row marker (see summarize).
COMPACT = "compact.parquet"
# Its row groups: a reader of a range of ids (an export's page of 20,000) decodes only the groups
# that hold them (a 250,000-row import in polars' default groups of 262,144: 0.6 s a page's read
# against 0.23 s in groups of 20,000; the file is no larger).
COMPACT_ROW_GROUP_ROWS = 20_000
# An import's money less its tombstones, cached beside its parts: `_money-<rows>-<tombstones>.json`
# (a new marker or tombstone changes the name, so a cache is read only while it still holds).
MONEY_CACHE = re.compile(r"/import=(\d+)/_money-(\d+)-(\d+)\.json$")


@dataclass
class _Listing:
    """A stream's mirror as its keys tell it, by import id."""
    markers: dict[int, set[int]] = field(default_factory=dict)  # published imports: the rows each marker names
    dead: dict[int, set[int]] = field(default_factory=dict)  # tombstoned record ids

    @cached_property
    def rows(self) -> dict[int, int]:
        """Each published import's rows: the largest its markers name, should a retry have seen more parts."""
        return {job_id: max(counts) for job_id, counts in self.markers.items()}


class AnalyticsMirror:
    def __init__(self, s3, bucket: str) -> None:
        self._s3 = s3
        self._bucket = bucket

    def write_part(self, environment: str, job_id: int, part: int, records: Iterable[Record]) -> None:
        import polars as pl

        by_stream: dict[str, list[Record]] = {}
        for record in records:
            by_stream.setdefault(record.data_stream_key, []).append(record)
        schema = {name: getattr(pl, kind) for name, kind in COLUMNS.items()}
        for stream_key, rows in by_stream.items():
            frame = pl.DataFrame({
                "id": [r.id for r in rows], "data_stream_key": [r.data_stream_key for r in rows],
                "data_stream_id": [r.data_stream_id for r in rows], "date": [r.date for r in rows],
                "amount": [r.amount for r in rows], "currency": [r.currency for r in rows],
                "decimal_places": [r.decimal_places for r in rows], "direction": [r.direction.value for r in rows],
                "description": [r.description for r in rows], "external_id": [r.external_id for r in rows],
                "file_import_id": [r.file_import_id for r in rows], "metadata": [_metadata(r) for r in rows],
                "created_at": [iso(r.created_at) for r in rows],
            }, schema=schema)
            buffer = io.BytesIO()
            frame.write_parquet(buffer, compression="zstd")
            self._s3.put_object(Bucket=self._bucket, Key=f"{import_prefix(environment, stream_key, job_id, STAGING)}"
                                f"part-{part:06d}.parquet", Body=buffer.getvalue())

    def publish(self, environment: str, job_id: int, stream_keys: Iterable[str]) -> int:
        """Move an import's staged parts into the mirror (idempotent: a retry finds them moved),
        several at a time: a million-row import has a thousand parts."""
        moves = []
        for stream_key in stream_keys:
            staged = import_prefix(environment, stream_key, job_id, STAGING)
            final = import_prefix(environment, stream_key, job_id)
            moves += [(key, final + key.removeprefix(staged)) for key in self._keys(staged)]
        with ThreadPoolExecutor(PUBLISH_THREADS) as pool:
            return sum(pool.map(lambda move: self._move(*move), moves))

    def _move(self, source: str, target: str) -> int:
        try:
            self._s3.copy_object(Bucket=self._bucket, Key=target, CopySource={"Bucket": self._bucket, "Key": source})
        except self._s3.exceptions.NoSuchKey:
            return 0  # a concurrent finisher of the same job moved it first
        self._s3.delete_object(Bucket=self._bucket, Key=source)
        return 1

    def _keys(self, prefix: str) -> list[str]:
        pages = self._s3.get_paginator("list_objects_v2").paginate(Bucket=self._bucket, Prefix=prefix)
        return [obj["Key"] for page in pages for obj in page.get("Contents", [])]

    def tombstone(self, environment: str, stream_key: str, job_id: int, record_id: int) -> None:
        """Mark a record of import `job_id` deleted (idempotent: one key per record)."""
        self._put_empty(tombstone_key(environment, stream_key, job_id, record_id))

    def count_records(self, environment: str, stream_key: str) -> int:
        """The stream's records in the mirror: rows of its published imports, less the tombstones
        of those imports (a tombstone of an import never published counts nothing). Rolls the
        index's markers up when there are enough of them (see the module docstring)."""
        listed = self._markers(environment, stream_key, roll_up=True)
        return sum(count - len(listed.dead.get(job, ())) for job, count in listed.rows.items())

    def published_imports(self, environment: str, stream_key: str) -> dict[int, int]:
        """The imports of the stream the mirror holds, by id, with the rows their markers name
        (the largest), as its index of row markers tells: an import that ended without its marker
        is missing from the mirror. (The index is not checked against the imports here: `reindex`.)"""
        return self._markers(environment, stream_key).rows

    def _markers(self, environment: str, stream_key: str, roll_up: bool = False) -> _Listing:
        """The stream's row markers and tombstones, from its index of row markers (loose, and rolled
        up; rolled up anew when `roll_up` and the loose ones are enough); from a full listing, made
        the index's content, when the index is not whole."""
        index = rows_index(environment, stream_key)
        keys, rolled = self._listed_with_roll_ups(index)
        if f"{index}{INDEX_WHOLE}" not in keys:
            return self._reindexed(environment, stream_key)
        listed = self._parsed(keys + self._keys(tombstones(environment, stream_key)))
        for job_id, rows in rolled.items():
            listed.markers.setdefault(job_id, set()).add(rows)
        loose = [key for key in keys if ROWS_MARKER.search(key)]
        if roll_up and len(loose) >= ROLL_UP_AFTER:
            self._roll_up(rollups(environment, stream_key), listed.rows,
                          loose + [key for key in keys if ROLLUP.search(key)])
        return listed

    def _listed_with_roll_ups(self, prefix: str) -> tuple[list[str], dict[int, Any]]:
        """The keys under `prefix` and the entries of the roll-ups among them, listed again while a
        roll-up is replaced under the read (the listing then holds what replaced it)."""
        for _ in range(LISTING_ATTEMPTS):
            keys = self._keys(prefix)
            rolled = self._rolled_up([key for key in keys if ROLLUP.search(key)])
            if rolled is not None:
                return keys, rolled
        raise RuntimeError(f"the analytics mirror's roll-ups under {prefix} were replaced under each of "
                           f"{LISTING_ATTEMPTS} reads")

    def _rolled_up(self, keys: list[str]) -> dict[int, Any] | None:
        """The entries of these roll-ups by import id (one roll-up, but while those of counts that
        met are not merged yet: of two entries of an import, the one naming more rows, as markers
        go); None when one of them is gone since it was listed."""
        entries: dict[int, Any] = {}
        for key in keys:
            try:
                body = json.loads(self._s3.get_object(Bucket=self._bucket, Key=key)["Body"].read())
            except self._s3.exceptions.NoSuchKey:
                return None
            for job_id, entry in body["imports"].items():
                if int(job_id) not in entries or _rows_of(entry) > _rows_of(entries[int(job_id)]):
                    entries[int(job_id)] = entry
        return entries

    def _roll_up(self, prefix: str, entries: dict[int, Any], covered: list[str]) -> None:
        """Write these imports' entries as one roll-up under `prefix`, then delete the markers and
        roll-ups it covers (in that order: a reader finds each import in one or the other)."""
        generation = max((int(found[1]) for key in covered if (found := ROLLUP.search(key))), default=0) + 1
        body = json.dumps({"imports": {str(job_id): entry for job_id, entry in sorted(entries.items())}},
                          separators=(",", ":"))
        self._s3.put_object(Bucket=self._bucket, Body=body.encode(),
                            Key=f"{prefix}g={generation:08d}-{uuid.uuid4().hex[:12]}.json")
        self._delete(sorted(covered))

    def reindex(self, environment: str, stream_key: str) -> dict[int, int]:
        """Make the stream's index of row markers agree with its imports' own markers (a full
        listing: the repair's view, which must not trust the index) and return those imports with
        their rows. Mends an import published without its index entry (by code from before the
        index, still running during a deploy) and an entry left of an import forgotten meanwhile."""
        return self._reindexed(environment, stream_key).rows

    def _reindexed(self, environment: str, stream_key: str) -> _Listing:
        index_keys, own_keys = self._split_listing(environment, stream_key)
        listed = self._parsed(own_keys)
        indexed = {key for key in index_keys if ROWS_MARKER.search(key)}
        rolled_up = [key for key in index_keys if ROLLUP.search(key)]
        if rolled_up or len(listed.rows) >= ROLL_UP_AFTER:  # what it holds as one roll-up, in place of the old
            self._roll_up(rollups(environment, stream_key), listed.rows, rolled_up)
            held: set[str] = set()
            covered = {key for key in indexed if (found := ROWS_MARKER.search(key))  # as many rows or fewer
                       and int(found[2]) <= listed.rows.get(int(found[1]), -1)}
        else:
            held = {index_marker_key(environment, stream_key, job_id, rows)
                    for job_id, counts in listed.markers.items() for rows in counts}
            covered = set()
        for key in sorted(held - indexed):
            self._put_empty(key)
        # An entry whose import's own marker the listing did not see, unless that marker came since
        # (an import published as the listing passed it: its entry is written after its own marker).
        stray = [key for key in sorted(indexed - held - covered)
                 if not self._exists(key.replace(f"/{ROWS_INDEX}/import=", "/import=", 1))]
        self._delete(sorted(covered) + stray)
        self._put_empty(f"{rows_index(environment, stream_key)}{INDEX_WHOLE}")
        return listed

    def _exists(self, key: str) -> bool:
        try:
            self._s3.head_object(Bucket=self._bucket, Key=key)
        except self._s3.exceptions.ClientError as error:
            if error.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                return False
            raise
        return True

    def stream_money(self, environment: str, stream_key: str) -> MirroredMoney:
        """The stream's money by currency: every published import's rows less its tombstones. Each
        import's figure is kept, beside it (`_money-<rows>-<tombstones>.json`) and, once `ROLL_UP_AFTER`
        imports without a tombstone have theirs, in the stream's money roll-up (one object), so a
        stream of thousands of imports costs its index's listing, the roll-up, and a small read of
        each import not rolled up yet; only an import with a new tombstone is read again."""
        listed = self._markers(environment, stream_key)
        money_keys = self._keys(money_rollups(environment, stream_key))  # after the index: see forget_import
        epochs = _epochs(money_keys)
        epoch = max(epochs, default=FIRST_EPOCH)
        current = f"{money_rollups(environment, stream_key)}{epoch}/"
        rollup_keys = [key for key in money_keys if ROLLUP.search(key)]
        # Of the latest epoch only (a refresh that listed an epoch before writes under it); one replaced
        # under this read: each import is read alone.
        rolled = self._rolled_up([key for key in rollup_keys if key.startswith(current)]) or {}

        def money_of_import(job_id: int) -> _ImportMoney:
            deleted, rows = listed.dead.get(job_id, set()), listed.rows[job_id]
            if not deleted and (kept := rolled.get(job_id)) and kept["rows"] == rows:
                return _ImportMoney(money_from_plain(kept["money"]), exact=True)
            return self._import_money(environment, stream_key, job_id, rows, deleted)

        with ThreadPoolExecutor(PUBLISH_THREADS) as pool:
            found = dict(zip(listed.rows, pool.map(money_of_import, listed.rows)))
        kept_sums = [figure.kept for figure in found.values() if figure.kept]
        if kept_sums and self._latest_epoch(environment, stream_key) != epoch:
            # An import forgotten meanwhile: the sums this refresh kept may be of its old parts (see
            # forget_import); none is kept, nor rolled up.
            self._delete(kept_sums)
            found = {job_id: replace(figure, exact=figure.exact and not figure.kept)
                     for job_id, figure in found.items()}
        whole = {job_id: {"rows": listed.rows[job_id], "money": money_plain(figure.money)}
                 for job_id, figure in found.items() if figure.exact and not listed.dead.get(job_id)}
        if sum(1 for job_id, entry in whole.items() if rolled.get(job_id) != entry) >= ROLL_UP_AFTER:
            older_epochs = [key for name, key in epochs.items() if name != epoch]
            self._roll_up(current, whole, rollup_keys + older_epochs)
        return MirroredMoney(combined(*(figure.money for figure in found.values())), frozenset(listed.rows))

    def _import_money(self, environment: str, stream_key: str, job_id: int, rows: int,
                      deleted: set[int]) -> _ImportMoney:
        """An import's money less these tombstones, from its kept sum or else its parts (then kept, and
        the sums it supersedes deleted); exact when its parts are those its marker counted."""
        prefix = import_prefix(environment, stream_key, job_id)
        cache = f"{prefix}_money-{rows}-{len(deleted)}.json"
        try:
            kept = self._s3.get_object(Bucket=self._bucket, Key=cache)["Body"].read()
            return _ImportMoney(money_from_plain(json.loads(kept)), exact=True)
        except self._s3.exceptions.NoSuchKey:
            pass
        keys = self._keys(prefix)
        money, read = self._money([key for key in keys if PART.search(key)], deleted)
        if read != rows:
            return _ImportMoney(money, exact=False)
        self._s3.put_object(Bucket=self._bucket, Key=cache, Body=json.dumps(money_plain(money)).encode())
        self._delete([key for key in keys if MONEY_CACHE.search(key) and key != cache])  # those it supersedes
        return _ImportMoney(money, exact=True, kept=cache)

    def _latest_epoch(self, environment: str, stream_key: str) -> str:
        return max(_epochs(self._keys(f"{money_rollups(environment, stream_key)}{EPOCH}/")), default=FIRST_EPOCH)

    def _split_listing(self, environment: str, stream_key: str) -> tuple[list[str], list[str]]:
        """Every key of the stream's prefix: those of its index of row markers, and the others."""
        index = rows_index(environment, stream_key)
        keys = self._keys(stream_prefix(environment, stream_key))
        return [key for key in keys if key.startswith(index)], [key for key in keys if not key.startswith(index)]

    @staticmethod
    def _parsed(keys: list[str]) -> _Listing:
        listed = _Listing()
        for key in keys:
            if marker := ROWS_MARKER.search(key):
                listed.markers.setdefault(int(marker[1]), set()).add(int(marker[2]))
            elif tombstone := TOMBSTONE.search(key):
                listed.dead.setdefault(int(tombstone[1]), set()).add(int(tombstone[2]))
        return listed

    def import_rows(self, environment: str, stream_key: str, job_id: int) -> Any | None:
        """Every row of a published import of the stream, tombstoned rows included, as a lazy frame
        over its compressed Parquet (its compact copy, or its parts when it has none): a reader
        that filters it by id decodes only the row groups it needs. None when the mirror does not
        hold the import (not published, or published without its row marker yet)."""
        import polars as pl

        prefix = import_prefix(environment, stream_key, job_id)
        keys = self._keys(prefix)
        if not any(ROWS_MARKER.search(key) for key in keys):
            return None
        wanted = [f"{prefix}{COMPACT}"] if f"{prefix}{COMPACT}" in keys else [key for key in keys if PART.search(key)]
        frames = [pl.scan_parquet(io.BytesIO(self._s3.get_object(Bucket=self._bucket, Key=key)["Body"].read()))
                  for key in wanted]
        return pl.concat(frames, how="diagonal_relaxed") if frames else None

    def _money(self, part_keys: list[str], deleted: set[int]) -> tuple[dict[str, CurrencyAmounts], int]:
        """Money by currency of these parts' rows, but the deleted ones, and how many rows the parts hold."""
        import polars as pl

        from chalicelib.domain.matching.frames import MONEY_COLUMNS, money_by

        frames = [self._read(key, ["id", *MONEY_COLUMNS]) for key in part_keys]
        if not frames:
            return {}, 0
        everything = pl.concat(frames)
        return money_by(everything.filter(~pl.col("id").is_in(list(deleted)))).get(None, {}), everything.height

    def forget_import(self, environment: str, job_id: int, stream_keys: Iterable[str]) -> None:
        """Remove an import from these streams' mirror, staged or published, with its markers and
        tombstones, so that it can be written again from the table. Its streams' money roll-ups
        then go out of date at once, by a new epoch written after the import's own sums are gone:
        a refresh that read those sums before writes its roll-up in the epoch before, which no
        reader takes (the import may come back with as many rows and other amounts). A sum of the
        old parts a refresh keeps late is deleted by this forget's second look at the import, or
        else by the refresh itself, which looks at the epoch once it has kept its sums. Left open:
        a refresh that dies between keeping such a sum and its look, or another refresh (of the new
        epoch) reading that sum in those milliseconds, keeps the old money until the next forget."""
        keys: list[str] = []
        for stream_key in stream_keys:
            keys += self._keys(import_prefix(environment, stream_key, job_id))
            keys += self._keys(import_prefix(environment, stream_key, job_id, STAGING))
            keys += self._keys(f"{tombstones(environment, stream_key)}import={job_id}/")
            keys += self._keys(f"{rows_index(environment, stream_key)}import={job_id}/")
        self._delete(keys)
        for stream_key in stream_keys:
            self._forget_rolled_up(rollups(environment, stream_key), job_id)
            self._new_epoch(environment, stream_key)
            self._delete([key for key in self._keys(import_prefix(environment, stream_key, job_id))
                          if MONEY_CACHE.search(key)])

    def _new_epoch(self, environment: str, stream_key: str) -> None:
        """A money epoch after every one there is, written until it is the latest when looked at again:
        a forget meeting another writes one of the same generation, and one of the two would sort
        before the other's, so that a refresh listing in between took the loser as the latest."""
        latest = self._latest_epoch(environment, stream_key)
        for _ in range(LISTING_ATTEMPTS):
            mine = f"{int(latest.split('-')[0]) + 1:08d}-{uuid.uuid4().hex[:12]}"
            self._put_empty(f"{money_rollups(environment, stream_key)}{EPOCH}/{mine}")
            latest = self._latest_epoch(environment, stream_key)
            if latest == mine:
                return
        raise RuntimeError(f"the money epoch of stream {stream_key!r} moved on under each of {LISTING_ATTEMPTS} "
                           "writes: other repairs are forgetting its imports; run this one again")

    def _forget_rolled_up(self, prefix: str, job_id: int) -> None:
        """These roll-ups without the import, should one hold it. A count that read the import's
        loose marker before it was forgotten may roll it up again just after: the mirror repair
        reindexes the streams it wrote imports of again at its end, which mends that; should such
        a count meet that reindex too, the stream counts the import's old rows until the next repair."""
        keys, rolled = self._listed_with_roll_ups(prefix)
        if job_id in rolled:
            self._roll_up(prefix, {j: entry for j, entry in rolled.items() if j != job_id}, keys)

    def forget_stream(self, environment: str, stream_key: str) -> None:
        """Remove everything of a deleted stream, staged or published, so that a new stream
        with the same key starts empty."""
        self._delete(self._keys(stream_prefix(environment, stream_key))
                     + self._keys(stream_prefix(environment, stream_key, STAGING)))

    def _put_empty(self, key: str) -> None:
        """A marker: its key says all it has to say."""
        self._s3.put_object(Bucket=self._bucket, Key=key, Body=b"")

    def _delete(self, keys: list[str]) -> None:
        """DeleteObjects answers 200 with the keys it could not delete (a permission, say) listed
        apart: those fail here, or they would stay behind unseen."""
        for start in range(0, len(keys), DELETE_BATCH):
            batch = keys[start:start + DELETE_BATCH]
            answer = self._s3.delete_objects(Bucket=self._bucket,
                                             Delete={"Objects": [{"Key": key} for key in batch], "Quiet": True})
            if errors := answer.get("Errors"):
                first = errors[0]
                raise RuntimeError(f"{len(errors)} object(s) of the analytics mirror not deleted, the first "
                                   f"{first.get('Key')}: {first.get('Code')} {first.get('Message', '')}".rstrip())

    def _read(self, key: str, columns: list[str] | None):
        """A part's rows: the columns named, or all of them (None)."""
        import polars as pl

        body = self._s3.get_object(Bucket=self._bucket, Key=key)["Body"].read()
        return pl.read_parquet(io.BytesIO(body), columns=columns)

    def _write_compact(self, prefix: str, parts: list[Any]) -> None:
        """All of a published import's rows in one object (`compact.parquet`), for readers of whole
        environments (the agents' `sql`): a million records are a thousand parts, and a thousand GETs
        cost more than the query. Parts written before `metadata` existed get it as null."""
        import polars as pl

        buffer = io.BytesIO()
        pl.concat(parts, how="diagonal_relaxed").write_parquet(buffer, compression="zstd",
                                                               row_group_size=COMPACT_ROW_GROUP_ROWS)
        self._s3.put_object(Bucket=self._bucket, Key=f"{prefix}{COMPACT}", Body=buffer.getvalue())

    def summarize(self, environment: str, job_id: int, stream_keys: Iterable[str]) -> ImportTotals:
        """Totals of a published import, read from its Parquet parts; leaves each stream's row
        marker (rewritten the same by a retry: the published parts no longer change)."""
        frames: dict[str, list] = {}
        for stream_key in stream_keys:
            prefix = import_prefix(environment, stream_key, job_id)
            parts = [self._read(key, None) for key in self._keys(prefix) if PART.search(key)]
            if parts:  # before the marker: a reader that sees the marker finds the compact copy too
                self._write_compact(prefix, parts)
            rows = sum(p.height for p in parts)
            self._put_empty(f"{prefix}_rows={rows}")
            self._put_empty(index_marker_key(environment, stream_key, job_id, rows))
            frames[stream_key] = parts
        total = _totals([f for parts in frames.values() for f in parts])
        if len(frames) > 1:  # a bulk request feeding several streams: each stream's imports list shows its part
            return ImportTotals(total, {key: _totals(parts) for key, parts in frames.items()})
        return ImportTotals(total)


@dataclass(frozen=True)
class _ImportMoney:
    """An import's money as a refresh read it; exact when of the parts its marker counted, `kept` the
    sum this refresh wrote beside the import (None when it read one, or a roll-up)."""
    money: dict[str, CurrencyAmounts]
    exact: bool
    kept: str | None = None


def _epochs(keys: Iterable[str]) -> dict[str, str]:
    """The money epochs among these keys: each one's name (`<generation>-<token>`) and key."""
    return {found[1]: key for key in keys if (found := MONEY_EPOCH.search(key))}


def _rows_of(entry: Any) -> int:
    """The rows a roll-up's entry names: a marker's (an int), or a money figure's."""
    return entry if isinstance(entry, int) else int(entry["rows"])


def _metadata(record: Record) -> str | None:
    return json.dumps(record.metadata, sort_keys=True, separators=(",", ":")) if record.metadata else None


def _totals(frames: list[Any]) -> StreamTotals:
    """Count, credits, debits, date range and currencies of published rows."""
    import polars as pl

    from chalicelib.domain.matching.frames import amount_sum

    if not frames:
        return StreamTotals()
    data = pl.concat(frames, how="diagonal_relaxed")  # parts of before and after a new column
    credit = pl.col("direction") == "credit"
    row = data.select(
        pl.len().alias("count"),
        amount_sum(pl.col("amount").filter(credit)).alias("credits"),
        amount_sum(pl.col("amount").filter(~credit)).alias("debits"),
        pl.col("date").min().alias("date_min"), pl.col("date").max().alias("date_max"),
    ).row(0, named=True)
    return StreamTotals(count=int(row["count"]), credits=int(row["credits"] or 0), debits=int(row["debits"] or 0),
                        date_min=row["date_min"], date_max=row["date_max"],
                        currencies=tuple(sorted(data["currency"].unique().to_list())))
