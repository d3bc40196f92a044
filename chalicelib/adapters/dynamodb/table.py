"""Thin access to the single DynamoDB table: typed items in, plain Python items out.

Numbers come back as int (we never store floats: money is integer minor units).
"""
from __future__ import annotations

import base64
import binascii
import heapq
import itertools
import json
import queue
import random
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from enum import Enum
from typing import Any, Generic, Literal, TypeVar, overload

from botocore.exceptions import ClientError

from chalicelib.adapters.dynamodb import keys
from chalicelib.adapters.dynamodb.attribute_values import from_attribute, to_attribute
from chalicelib.adapters.dynamodb.keys import Index
from chalicelib.adapters.dynamodb.wire import DynamoWire, bodies, body_mode
from chalicelib.domain.clock import iso, utc_now
from chalicelib.domain.errors import BadRequest, TransitionRefused
from chalicelib.domain.status_machine import Identified, StatusMachine

T = TypeVar("T")
BATCH_WRITE_LIMIT = 25
BATCH_GET_LIMIT = 100
TRANSACTION_LIMIT = 100  # actions a TransactWriteItems takes
TRANSACTION_CONFLICT_ATTEMPTS = 8  # a single write of an item a transaction holds: tries, waits doubling
TRANSACTION_CONFLICT_WAIT = 0.02  # seconds, the first wait's bound
FILTERED_READ_STEP = 200
MAX_READS_PER_PAGE = 10
# Partitions of one sharded list read at once (botocore keeps 10 connections a client).
PARTITION_THREADS = 8
P = TypeVar("P")


class ConditionFailed(Exception):
    """A conditional write found the item in another state than it required."""



@dataclass(frozen=True)
class Filter:
    """A FilterExpression with its own placeholders (names start with '#f', values with ':f')."""
    expression: str
    names: dict[str, str]
    values: dict[str, Any]


@dataclass(frozen=True)
class Page:
    items: list[dict[str, Any]]
    cursor: str | None


def serialize(item: dict[str, Any]) -> dict[str, Any]:
    # Text inline: most attributes are (a record's item is mostly keys), and a call each was a
    # third of writing a chunk's records.
    return {k: {"S": v} if type(v) is str else to_attribute(v) for k, v in item.items() if v is not None}


def deserialize(item: dict[str, Any]) -> dict[str, Any]:
    return {k: from_attribute(v) for k, v in item.items()}


def encode_cursor(last_key: dict[str, Any] | None) -> str | None:
    if not last_key:
        return None
    return encode_key(last_key)


def encode_key(key: dict[str, Any]) -> str:
    """The cursor of a (non-empty) serialized key: encode_cursor when a key is known to be there."""
    raw = json.dumps(deserialize(key), separators=(",", ":"), sort_keys=True)
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def listing_cursor(listing: str, after: str) -> str:
    """The cursor of a list merged from several partitions: its name, and the sort value it resumes below."""
    return encode_key(serialize({"listing": listing, "after": after}))


def listing_cursor_value(cursor: str, listing: str) -> str:
    """The sort value a `listing_cursor` resumes below; refused unless it is this list's."""
    return deserialize(decode_cursor(cursor, "listing", listing, ("listing", "after")))["after"]


def decode_cursor(cursor: str, partition_attr: str, partition_value: str,
                  key_attrs: tuple[str, ...] | None = None) -> dict[str, Any]:
    """Turn a cursor back into a start key, refusing any that does not belong to this list."""
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        key = json.loads(base64.urlsafe_b64decode(padded.encode()).decode())
    except (binascii.Error, ValueError, UnicodeDecodeError):
        raise BadRequest("cursor is not valid; pass the next_cursor of a previous page unchanged") from None
    expected = set(key_attrs) if key_attrs else None
    if not isinstance(key, dict) or key.get(partition_attr) != partition_value or \
            (expected is not None and set(key) != expected) or not all(isinstance(v, str) for v in key.values()):
        raise BadRequest("cursor does not belong to this list; pass the next_cursor of a previous page unchanged")
    return serialize(key)


def _read_pages_as_json(response_dict: dict[str, Any], customized_response_dict: dict[str, Any], **_) -> None:
    """botocore walks every attribute value of a Query response through the service model; json.loads
    gives the same typed values ({"S": ..}, {"N": ..}; we store no binary attributes) in a fraction
    of the time (a run's load of 2M records: 136 s -> 48 s, bench/RESULTS.md). For the reads of many
    items: queries and BatchGetItem (a story trace reads 10,000 records at a time). A raw read
    gets the body itself (`Body`), for a reader that parses it whole into columns."""
    mode = body_mode()
    if mode and response_dict["status_code"] == 200:
        if mode == "raw":
            customized_response_dict["Body"] = response_dict["body"]
        else:
            customized_response_dict.update(json.loads(response_dict["body"]))
        response_dict["body"] = b"{}"


class _JsonBodies:
    """Request bodies of the DynamoDB JSON protocol made by `json.dumps` of the parameters, as botocore's
    JSONSerializer makes them for what this module sends (maps, lists, text, integers, booleans:
    attribute values are already typed, {"N": "12"}); botocore walks every value through the service
    model first, a sixth of bulk ingestion's CPU under py-spy (bench/RESULTS.md, issue 30, fifth
    pass). Parameters json cannot write as they are (bytes of a binary attribute, a Decimal, NaN) go
    to botocore's own serializer, which also makes every request's method and headers.
    tests/unit/test_json_bodies.py holds both to the same bytes."""

    def __init__(self, serializer) -> None:
        self._serializer = serializer

    def serialize_to_request(self, parameters: dict[str, Any], operation_model) -> dict[str, Any]:
        try:
            body = json.dumps(parameters, allow_nan=False).encode()
        except (TypeError, ValueError):
            return self._serializer.serialize_to_request(parameters, operation_model)
        request = self._serializer.serialize_to_request({}, operation_model)
        request["body"] = body
        return request


def send_json_bodies(client) -> None:
    """Make the DynamoDB client's request bodies with `json.dumps` (see _JsonBodies); once per client."""
    if not isinstance(client._serializer, _JsonBodies):
        client._serializer = _JsonBodies(client._serializer)


class DynamoTable:
    def __init__(self, client, table_name: str) -> None:
        self._client = client
        self.name = table_name
        if isinstance(client, DynamoWire):
            return  # bodies made and read by json already
        send_json_bodies(client)
        client.meta.events.register("before-parse.dynamodb.Query", _read_pages_as_json,
                                    unique_id="recon-query-pages-as-json")
        client.meta.events.register("before-parse.dynamodb.BatchGetItem", _read_pages_as_json,
                                    unique_id="recon-batch-gets-as-json")

    # Single items ---------------------------------------------------------------------

    def get(self, key: dict[str, str]) -> dict[str, Any] | None:
        response = self._client.get_item(TableName=self.name, Key=serialize(key), ConsistentRead=True)
        item = response.get("Item")
        return deserialize(item) if item else None

    def put(self, item: dict[str, Any], condition: str | None = None, values: dict[str, Any] | None = None,
            names: dict[str, str] | None = None) -> None:
        kwargs: dict[str, Any] = {"TableName": self.name, "Item": serialize(item)}
        _add_condition(kwargs, condition, values, names)
        self._call_conditional(self._client.put_item, kwargs)

    def put_new(self, item: dict[str, Any]) -> None:
        """Put an item that must not exist yet; raise ConditionFailed when it does."""
        self.put(item, condition="attribute_not_exists(pk)")

    @overload
    def update(self, key: dict[str, str], expression: str, values: dict[str, Any] | None = None,
               names: dict[str, str] | None = None, condition: str | None = None, *,
               return_new: Literal[True], keep_nulls: bool = False) -> dict[str, Any]: ...

    @overload
    def update(self, key: dict[str, str], expression: str, values: dict[str, Any] | None = None,
               names: dict[str, str] | None = None, condition: str | None = None,
               return_new: Literal[False] = False, keep_nulls: bool = False) -> None: ...

    def update(self, key: dict[str, str], expression: str, values: dict[str, Any] | None = None,
               names: dict[str, str] | None = None, condition: str | None = None,
               return_new: bool = False, keep_nulls: bool = False) -> dict[str, Any] | None:
        """keep_nulls: values that are None are written as NULL rather than dropped."""
        kwargs: dict[str, Any] = {"TableName": self.name, "Key": serialize(key), "UpdateExpression": expression}
        if return_new:
            kwargs["ReturnValues"] = "ALL_NEW"
        _add_condition(kwargs, condition, values, names, keep_nulls)
        response = self._call_conditional(self._client.update_item, kwargs)
        return deserialize(response["Attributes"]) if return_new else None

    def update_plainly(self, key: dict[str, str], *, put: dict[str, Any] | None = None, remove: Iterable[str] = (),
                       add: dict[str, Any] | None = None, present: Iterable[str] = (), absent: Iterable[str] = (),
                       equal: dict[str, Any] | None = None) -> None:
        """The update `SET put REMOVE remove ADD add` on the condition that the `present` attributes
        exist, the `absent` ones do not and those of `equal` hold those values (a set equals a set
        of the same members), sent in DynamoDB's plain parameters (AttributeUpdates, Expected), not
        as expressions: the same write, but dynalite (the local stack) parses no expression for it,
        about a quarter of its time per UpdateItem (bench/RESULTS.md, issue 30: "The table's own
        wire"). For the writes sent once per record (claims). Raises ConditionFailed."""
        updates: dict[str, dict[str, Any]] = {name: {"Action": "PUT", "Value": to_attribute(value)}
                                              for name, value in (put or {}).items()}
        updates.update({name: {"Action": "DELETE"} for name in remove})
        updates.update({name: {"Action": "ADD", "Value": to_attribute(value)} for name, value in (add or {}).items()})
        expected: dict[str, dict[str, Any]] = {name: {"ComparisonOperator": "NOT_NULL"} for name in present}
        expected.update({name: {"ComparisonOperator": "NULL"} for name in absent})
        expected.update({name: {"ComparisonOperator": "EQ", "AttributeValueList": [to_attribute(value)]}
                         for name, value in (equal or {}).items()})
        kwargs: dict[str, Any] = {"TableName": self.name, "Key": serialize(key), "AttributeUpdates": updates}
        if expected:
            kwargs["Expected"] = expected
        self._call_conditional(self._client.update_item, kwargs)

    def write_together(self, updates: Sequence[ConditionalWrite]) -> list[str] | None:
        """The updates (or puts) all made or none (one TransactWriteItems, at most TRANSACTION_LIMIT,
        no two of one item): None when made; else, none made, why each was refused as DynamoDB's
        cancellation reasons give it: "None" for an update that passed, "ConditionalCheckFailed",
        "TransactionConflict" (another write of its item was in flight), ..."""
        actions = []
        for update in updates:
            if isinstance(update, ConditionalPut):
                put: dict[str, Any] = {"TableName": self.name, "Item": serialize(update.item)}
                _add_condition(put, update.condition, None, None)
                actions.append({"Put": put})
                continue
            action: dict[str, Any] = {"TableName": self.name, "Key": serialize(update.key),
                                      "UpdateExpression": update.expression}
            _add_condition(action, update.condition, update.values, update.names)
            actions.append({"Update": action})
        try:
            self._client.transact_write_items(TransactItems=actions)
            return None
        except ClientError as error:
            if error.response["Error"]["Code"] != "TransactionCanceledException":
                raise
            return [reason.get("Code") or "None" for reason in error.response.get("CancellationReasons", [])]

    def write_whole(self, entries: Sequence[T], updates_of: Callable[[T], Sequence[ConditionalWrite]],
                    threads: int) -> list[T]:
        """Each entry's updates all made or none, entries packed whole into transactions of at most
        TRANSACTION_LIMIT updates (`write_together`: no item twice among them), `threads` in flight:
        the entries written. A cancelled transaction's entries whose every update passed go again;
        the others (an update refused, or DynamoDB's reasons saying nothing of which) are left out,
        for the caller to write one by one."""
        written: list[T] = []
        pending = [(entry, list(updates_of(entry))) for entry in entries]
        with ThreadPoolExecutor(threads) as pool:
            while pending:
                groups = _packed(pending)
                pending = []
                for group, passed in zip(groups, pool.map(self._write_group, groups)):
                    if passed is None:
                        written += [entry for entry, _ in group]
                    else:
                        pending += [group[n] for n in passed]
        return written

    def _write_group(self, group: list[tuple[T, list[ConditionalWrite]]]) -> list[int] | None:
        """One transaction of whole entries: None when made; else the positions in `group` of the
        entries whose every update passed (none when the reasons do not say, or say all passed)."""
        reasons = self.write_together([update for _, updates in group for update in updates])
        if reasons is None:
            return None
        owners = [n for n, (_, updates) in enumerate(group) for _ in updates]
        if len(reasons) != len(owners):
            return []
        refused = {owner for owner, reason in zip(owners, reasons) if reason != "None"}
        return [n for n in range(len(group)) if n not in refused] if refused else []

    def delete(self, key: dict[str, str], condition: str | None = None,
               values: dict[str, Any] | None = None, names: dict[str, str] | None = None) -> None:
        kwargs: dict[str, Any] = {"TableName": self.name, "Key": serialize(key)}
        _add_condition(kwargs, condition, values, names)
        self._call_conditional(self._client.delete_item, kwargs)

    # Guards: an item one holder at a time owns (the holder's id in `attribute`).

    def claim_guard(self, key: dict[str, str], entity: str, attribute: str, holder: Any) -> Any:
        """Make `holder` the guard's holder: None when it is (now or already), else who holds it
        (a guard given up meanwhile is claimed again)."""
        while True:
            try:
                self.put({**key, "entity": entity, attribute: holder},
                         condition=f"attribute_not_exists(pk) OR {attribute} = :me", values={":me": holder})
                return None
            except ConditionFailed:
                item = self.get(key)
                if item is not None:
                    return item[attribute]

    def take_over_guard(self, key: dict[str, str], entity: str, attribute: str, stale: Any, holder: Any) -> bool:
        """Take the guard from `stale` (False: it changed hands meanwhile)."""
        try:
            self.put({**key, "entity": entity, attribute: holder}, condition=f"{attribute} = :stale",
                     values={":stale": stale})
            return True
        except ConditionFailed:
            return False

    def release_guard(self, key: dict[str, str], attribute: str, holder: Any) -> None:
        """Give the guard up, if `holder` holds it."""
        try:
            self.delete(key, condition=f"{attribute} = :me", values={":me": holder})
        except ConditionFailed:
            pass

    def add_to_counter(self, key: dict[str, str], amount: int) -> int:
        """Atomically add `amount` to a counter and return its new value."""
        response = self._client.update_item(
            TableName=self.name, Key=serialize(key), UpdateExpression="ADD #v :n",
            ExpressionAttributeNames={"#v": "value"}, ExpressionAttributeValues={":n": {"N": str(amount)}},
            ReturnValues="UPDATED_NEW",
        )
        return int(response["Attributes"]["value"]["N"])

    @staticmethod
    def _call_conditional(operation, kwargs: dict[str, Any]) -> dict[str, Any]:
        """The write, made or refused by its condition (ConditionFailed). A write of an item a
        transaction holds (a run's claims, `write_together`) is refused by DynamoDB for the moment
        (TransactionConflictException, which botocore does not retry): tried again shortly."""
        for attempt in range(TRANSACTION_CONFLICT_ATTEMPTS):
            try:
                return operation(**kwargs)
            except ClientError as error:
                code = error.response["Error"]["Code"]
                if code == "ConditionalCheckFailedException":
                    raise ConditionFailed() from None
                if code != "TransactionConflictException" or attempt == TRANSACTION_CONFLICT_ATTEMPTS - 1:
                    raise
                time.sleep(random.uniform(0, TRANSACTION_CONFLICT_WAIT * 2 ** attempt))
        raise AssertionError("unreachable")

    # Many items ------------------------------------------------------------------------
    # A read names the key it goes by (keys.BASE_TABLE, or an index: keys.GSI1, ...) and its partition.

    def query_page(self, index: Index, partition_value: str, *, limit: int, cursor: str | None = None,
                   newest_first: bool = True, sort_prefix: str | None = None,
                   filter: Filter | None = None, consistent: bool = False) -> Page:
        """`consistent` as in query_all."""
        kwargs = self._query_kwargs(index, partition_value, sort_prefix, filter)
        kwargs["ScanIndexForward"] = not newest_first
        if consistent:
            kwargs["ConsistentRead"] = True
        key_attrs = _key_attributes(index)
        if cursor:
            kwargs["ExclusiveStartKey"] = decode_cursor(cursor, index.partition_key, partition_value, key_attrs)
        # One item more than asked tells whether another page exists, so a client never gets
        # a cursor that leads to an empty page. A filter drops items after DynamoDB's Limit,
        # so filtered queries read in larger steps until the page is full.
        kwargs["Limit"] = limit + 1 if filter is None else max(limit + 1, FILTERED_READ_STEP)
        items: list[dict[str, Any]] = []
        for _ in range(MAX_READS_PER_PAGE):
            response = self._client.query(**kwargs)
            items.extend(deserialize(i) for i in response.get("Items", []))
            if len(items) > limit or "LastEvaluatedKey" not in response:
                break
            kwargs["ExclusiveStartKey"] = response["LastEvaluatedKey"]
        else:
            # A filter that matches little would read a whole partition in one request; answer
            # with what was found and a cursor from where the reading stopped.
            return Page(items=items, cursor=encode_cursor(response["LastEvaluatedKey"]))
        if len(items) <= limit:
            return Page(items=items, cursor=None)
        items = items[:limit]
        last_key = {attr: items[-1][attr] for attr in key_attrs}
        return Page(items=items, cursor=encode_cursor(serialize(last_key)))

    def query_all(self, index: Index, partition_value: str, *, sort_prefix: str | None = None,
                  projection: str | tuple[str, ...] | None = None,
                  consistent: bool = False, typed: bool = False) -> Iterator[dict[str, Any]]:
        """Every item of the partition; `projection` names the only attributes to read; `consistent`
        reads what was written a moment ago (the table's own items only, not an index's); `typed` as
        in query_between."""
        kwargs = self._query_kwargs(index, partition_value, sort_prefix)
        _project(kwargs, projection)
        if consistent:
            kwargs["ConsistentRead"] = True
        yield from self._query_items(kwargs, typed)

    def query_newest(self, index: Index, partition_value: str, *, filter: Filter | None = None,
                     projection: str | tuple[str, ...] | None = None) -> Iterator[dict[str, Any]]:
        """The partition's items that pass `filter`, highest sort key first, read a page at a time only
        as far as the caller iterates."""
        kwargs = self._query_kwargs(index, partition_value, filter=filter)
        kwargs["ScanIndexForward"] = False
        _project(kwargs, projection)
        yield from self._query_items(kwargs)

    def _query_items(self, kwargs: dict[str, Any], typed: bool = False) -> Iterator[dict[str, Any]]:
        """The items a query finds, page after page, read only as far as the caller iterates (`typed`:
        as DynamoDB returns them, {"N": "12"})."""
        while True:
            with bodies("json"):
                response = self._client.query(**kwargs)
            yield from (response.get("Items", []) if typed else (deserialize(i) for i in response.get("Items", [])))
            if "LastEvaluatedKey" not in response:
                return
            kwargs["ExclusiveStartKey"] = response["LastEvaluatedKey"]

    def query_pages(self, index: Index, partition_value: str, *, filter: Filter | None = None,
                    projection: tuple[str, ...] | None = None) -> Iterator[list[dict[str, Any]]]:
        """Every item of the partition, a page at a time and as DynamoDB returns them (typed values:
        {"N": "12"}), for readers of many items that turn each page into columns."""
        kwargs = self._query_kwargs(index, partition_value, filter=filter)
        _project(kwargs, projection)
        while True:
            with bodies("json"):
                response = self._client.query(**kwargs)
            yield response.get("Items", [])
            if "LastEvaluatedKey" not in response:
                return
            kwargs["ExclusiveStartKey"] = response["LastEvaluatedKey"]

    def parsed_pages(self, index: Index, partitions: list[str], *,
                     filter: Filter | None = None, projection: tuple[str, ...] | None = None,
                     parse: Callable[[bytes], tuple[P, dict[str, Any] | None]],
                     threads: int = PARTITION_THREADS, between: tuple[str, str] | None = None) -> Iterator[P]:
        """Every item of the partitions (with sort keys `between` the two given, both in, when
        given), a page at a time, each page's body handed whole to `parse` (which gives what it
        makes of the page, and the page's LastEvaluatedKey, typed). The partitions are read
        `threads` at a time; pages come as they arrive, in no order across partitions. A reader
        that stops early stops the reads."""
        def pages_of(partition: str) -> Iterator[P]:
            kwargs = self._query_kwargs(index, partition, filter=filter)
            if between is not None:
                _sort_between(kwargs, index, *between)
            _project(kwargs, projection)
            while True:
                with bodies("raw"):
                    response = self._client.query(**kwargs)
                page, last_key = parse(response["Body"])
                yield page
                if last_key is None:
                    return
                kwargs["ExclusiveStartKey"] = last_key

        if len(partitions) == 1 or threads == 1:
            for partition in partitions:
                yield from pages_of(partition)
            return
        yield from _interleaved([pages_of(p) for p in partitions], threads)

    def query_between(self, index: Index, partition_value: str, sort_from: str, sort_to: str, *,
                      page_size: int | None = None, projection: str | tuple[str, ...] | None = None,
                      typed: bool = False, consistent: bool = False) -> Iterator[dict[str, Any]]:
        """Items of a partition (of the table, or of `index`) with sort keys from `sort_from` to
        `sort_to`, in order, read `page_size` at a time when given: a reader that stops early reads
        no further. `typed`: the items as DynamoDB returns them ({"N": "12"}), for readers of many
        items that take a few attributes each (deserialize costs more than the read); `consistent`
        as in query_all."""
        kwargs = self._query_kwargs(index, partition_value)
        if consistent:
            kwargs["ConsistentRead"] = True
        _sort_between(kwargs, index, sort_from, sort_to)
        if page_size is not None:
            kwargs["Limit"] = page_size
        _project(kwargs, projection)
        yield from self._query_items(kwargs, typed)

    def sort_values_below(self, index: Index, partition_value: str, *, below: str | None, page_size: int,
                          filter: Filter | None = None) -> Iterator[str]:
        """The sort values of a partition, highest first, strictly below `below` when given, read
        `page_size` at a time: a merge of many partitions reads each only as far as it needs."""
        kwargs = self._query_kwargs(index, partition_value, filter=filter)
        kwargs.update(ScanIndexForward=False, Limit=page_size)
        _project(kwargs, index.sort_key)
        _below(kwargs, index, below)
        yield from (item[index.sort_key] for item in self._query_items(kwargs))

    def sort_values_read_ahead(self, index: Index, partition_value: str, *, below: str | None, page_size: int,
                               filter: Filter | None, pool: ThreadPoolExecutor) -> Iterator[str]:
        """`sort_values_below`, the first page asked for on `pool` at once, and each next one as soon
        as the one before it arrives: a reader of millions works on one page while DynamoDB answers
        the next, and a merge of many partitions waits for their first pages side by side."""
        kwargs = self._query_kwargs(index, partition_value, filter=filter)
        kwargs.update(ScanIndexForward=False, Limit=page_size)
        _project(kwargs, index.sort_key)
        _below(kwargs, index, below)

        def fetch(start: dict[str, Any] | None) -> dict[str, Any]:
            with bodies("json"):
                return self._client.query(**kwargs, **({"ExclusiveStartKey": start} if start else {}))

        def values(pending: Future) -> Iterator[str]:
            while True:
                response = pending.result()
                last = response.get("LastEvaluatedKey")
                if last:
                    pending = pool.submit(fetch, last)
                yield from (item[index.sort_key]["S"] for item in response.get("Items", []))
                if not last:
                    return

        return values(pool.submit(fetch, None))  # the first page asked for now, beside the other partitions'

    def merged_below(self, index: Index, partitions: list[str], *, below: str | None, page_size: int,
                     filter: Filter | None = None,
                     projection: tuple[str, ...] | None = None) -> Iterator[dict[str, Any]]:
        """The items of one list sharded over `partitions` of an index, highest sort value first (the
        values are unique across them), strictly below `below` when given. Each partition is read
        `page_size` at a time as the merge needs it; the first pages at once, in parallel."""
        def reader(partition: str) -> Iterator[dict[str, Any]]:
            kwargs = self._query_kwargs(index, partition, filter=filter)
            kwargs.update(ScanIndexForward=False, Limit=page_size)
            _below(kwargs, index, below)
            _project(kwargs, projection)  # it must name the index's sort key
            return self._query_items(kwargs)

        def first_page(partition: str) -> Iterator[dict[str, Any]]:
            items = reader(partition)
            return itertools.chain(list(itertools.islice(items, page_size)), items)

        with ThreadPoolExecutor(min(len(partitions), PARTITION_THREADS)) as pool:
            started = list(pool.map(first_page, partitions))
        return heapq.merge(*started, key=lambda item: item[index.sort_key], reverse=True)

    def query_partitions(self, index: Index, partitions: list[str], *,
                         projection: str | tuple[str, ...] | None = None) -> Iterator[dict[str, Any]]:
        """Every item of several partitions (the shards of one listing), in no particular order,
        the partitions read side by side."""
        yield from in_parallel(partitions, lambda p: self.query_all(index, p, projection=projection))

    def count(self, index: Index, partition_value: str, *, filter: Filter | None = None,
              deadline: float | None = None) -> tuple[int, bool]:
        """How many items of the partition pass `filter` (only counts come back), and whether the
        count is complete: it stops once time.monotonic() passes `deadline`."""
        kwargs = {**self._query_kwargs(index, partition_value, filter=filter), "Select": "COUNT"}
        counted = 0
        while True:
            response = self._client.query(**kwargs)
            counted += response.get("Count", 0)
            if "LastEvaluatedKey" not in response:
                return counted, True
            if deadline is not None and time.monotonic() > deadline:
                return counted, False
            kwargs["ExclusiveStartKey"] = response["LastEvaluatedKey"]

    # Indexes that project keys only: the index gives the order, BatchGetItem the items ---------

    def index_items(self, index: Index, partition_value: str) -> list[dict[str, Any]]:
        """Every item listed in a keys-only index partition, read whole from the table (consistent
        reads), in index order; an item that left the partition since the index saw it is left out."""
        entries = list(self.query_all(index, partition_value))
        found = {(i["pk"], i["sk"]): i for i in self.get_many({"pk": e["pk"], "sk": e["sk"]} for e in entries)}
        items = (found.get((e["pk"], e["sk"])) for e in entries)
        return [i for i in items if i is not None and i.get(index.partition_key) == partition_value]

    def index_page(self, index: Index, partition_value: str, *, limit: int, cursor: str | None,
                   admits: Callable[[dict[str, Any]], bool]) -> Page:
        """A page, newest first, of the items a keys-only index lists, read whole by BatchGetItem
        and kept when `admits` takes them as stored (the table, not the index's eventual copy)."""
        key_attrs = _key_attributes(index)
        kwargs = self._query_kwargs(index, partition_value)
        kwargs["ScanIndexForward"] = False
        if cursor:
            kwargs["ExclusiveStartKey"] = decode_cursor(cursor, index.partition_key, partition_value, key_attrs)

        def entries() -> Iterator[tuple[dict[str, str], str]]:
            kwargs["Limit"] = limit + 1
            while True:
                response = self._client.query(**kwargs)
                for entry in map(deserialize, response.get("Items", [])):
                    position = encode_key(serialize({a: entry[a] for a in key_attrs}))
                    yield {"pk": entry["pk"], "sk": entry["sk"]}, position
                if "LastEvaluatedKey" not in response:
                    return
                kwargs["ExclusiveStartKey"] = response["LastEvaluatedKey"]
                kwargs["Limit"] = max(limit + 1, FILTERED_READ_STEP)

        return self.page_of_keys(entries(), limit, admits)

    def page_of_keys(self, candidates: Iterable[tuple[dict[str, str], str]], limit: int,
                     admits: Callable[[dict[str, Any]], bool]) -> Page:
        """A page of items from candidate keys in list order, each with the cursor that resumes
        after it: read by BatchGetItem in steps, kept when `admits` takes them. Stops at a full
        page, or after MAX_READS_PER_PAGE steps with a cursor from where the reading stopped."""
        source = iter(candidates)
        found: list[tuple[dict[str, Any], str]] = []
        step = limit + 1
        for _ in range(MAX_READS_PER_PAGE):
            batch = list(itertools.islice(source, step))
            items = {(i["pk"], i["sk"]): i for i in self.get_many(key for key, _ in batch)}
            for key, position in batch:
                item = items.get((key["pk"], key["sk"]))
                if item is not None and admits(item):
                    found.append((item, position))
            if len(found) > limit:
                return Page(items=[i for i, _ in found[:limit]], cursor=found[limit - 1][1])
            if len(batch) < step:
                return Page(items=[i for i, _ in found], cursor=None)
            step = max(limit + 1, FILTERED_READ_STEP)  # the filter drops items: read in larger steps
        more = next(source, None) is not None
        return Page(items=[i for i, _ in found], cursor=batch[-1][1] if more else None)

    def _query_kwargs(self, index: Index, partition_value: str, sort_prefix: str | None = None,
                      filter: Filter | None = None) -> dict[str, Any]:
        condition = "#p = :p"
        names = {"#p": index.partition_key}
        values: dict[str, Any] = {":p": {"S": partition_value}}
        if sort_prefix is not None:
            condition += " AND begins_with(#s, :s)"
            names["#s"] = index.sort_key
            values[":s"] = {"S": sort_prefix}
        kwargs: dict[str, Any] = {
            "TableName": self.name, "KeyConditionExpression": condition,
            "ExpressionAttributeNames": names, "ExpressionAttributeValues": values,
        }
        if index.name is not None:
            kwargs["IndexName"] = index.name
        if filter is not None:
            kwargs["FilterExpression"] = filter.expression
            names.update(filter.names)
            values.update(serialize(filter.values))
        return kwargs

    def batch_write(self, puts: Iterable[dict[str, Any]] = (), deletes: Iterable[dict[str, str]] = (),
                    threads: int = 1) -> int:
        """Write in batches of 25, retrying unprocessed items with backoff, `threads` batches at a
        time. Returns requests sent."""
        requests = [{"PutRequest": {"Item": serialize(i)}} for i in puts]
        requests += [{"DeleteRequest": {"Key": serialize(k)}} for k in deletes]
        return sum(_in_batches(self._write_batch, requests, BATCH_WRITE_LIMIT, threads))

    def batch_put_once(self, items: Iterable[dict[str, Any]], threads: int = 1) -> list[dict[str, Any]]:
        """Put the items with BatchWriteItem in batches of 25, `threads` at a time, each batch sent
        once: the items DynamoDB left unprocessed, for the caller to send as it must."""
        requests = [{"PutRequest": {"Item": serialize(i)}} for i in items]

        def send(batch: list[dict[str, Any]]) -> list[dict[str, Any]]:
            response = self._client.batch_write_item(RequestItems={self.name: batch})
            left = response.get("UnprocessedItems", {}).get(self.name, [])
            return [deserialize(request["PutRequest"]["Item"]) for request in left]

        return [item for left in _in_batches(send, requests, BATCH_WRITE_LIMIT, threads) for item in left]

    def _write_batch(self, pending: list[dict[str, Any]]) -> int:
        sent, attempt = 0, 0
        while pending:
            sent += 1
            response = self._client.batch_write_item(RequestItems={self.name: pending})
            pending = response.get("UnprocessedItems", {}).get(self.name, [])
            if pending:
                attempt += 1
                time.sleep(min(2.0, 0.05 * 2 ** attempt) * random.uniform(0.5, 1.0))
        return sent

    def move_status(self, key: dict[str, str], target: str, sources: Iterable[Any], fields: dict[str, Any],
                    leave_index: Index | None = None, also: Condition | None = None,
                    pending_event: str | None = None) -> dict[str, Any]:
        """The one conditional status change of the status tables (see StatusMoves): set `status` to
        `target` and `fields` with it, only from one of `sources` (and when `also` holds); `leave_index`
        (keys.GSI2) drops the item from a sparse index in the same write. Raises ConditionFailed when the
        stored item forbids it. `pending_event`: the mark of the event the move owes, added to the item's
        `pending_events` in the same write (services/events.py `save_and_emit`)."""
        allowed, source_values = status_in(sources)
        sets = {name: _storable(value) for name, value in fields.items()}
        names = {"#status": "status", **{f"#a{i}": name for i, name in enumerate(sets)}}
        values = {":status": target, **{f":v{i}": value for i, value in enumerate(sets.values())}}
        expression = "SET #status = :status" + "".join(f", #a{i} = :v{i}" for i in range(len(sets)))
        if leave_index:
            expression += f" REMOVE {leave_index.attributes}"
        if pending_event is not None:
            expression += f" ADD {keys.PENDING_EVENTS} :owed_event"
            values[":owed_event"] = {pending_event}
        if also is not None:
            allowed = f"{allowed} AND ({also.expression})"
            names.update(also.names)
            values.update(also.values)
        return self.update(key, expression, condition=allowed, names=names, values={**values, **source_values},
                           return_new=True, keep_nulls=True)

    def get_many(self, item_keys: Iterable[dict[str, str]], projection: tuple[str, ...] | None = None,
                 typed: bool = False, threads: int = 1) -> list[dict[str, Any]]:
        """Read items by key with BatchGetItem (100 a request, consistent reads, `threads` requests
        at a time), retrying unprocessed keys with backoff. Missing items are simply absent; order is
        not kept. `projection` names the only attributes to read; `typed` as in query_between."""
        unique = list({(k["pk"], k["sk"]): k for k in item_keys}.values())
        projected: dict[str, Any] = {}
        if projection:
            projected["ExpressionAttributeNames"] = {}
            _project(projected, projection)

        def read(batch: list[dict[str, str]]) -> list[dict[str, Any]]:
            found: list[dict[str, Any]] = []
            pending = {self.name: {"Keys": [serialize(k) for k in batch], "ConsistentRead": True, **projected}}
            attempt = 0
            while pending:
                with bodies("json"):
                    response = self._client.batch_get_item(RequestItems=pending)
                items = response.get("Responses", {}).get(self.name, [])
                found.extend(items if typed else map(deserialize, items))
                pending = response.get("UnprocessedKeys") or {}
                if pending:
                    attempt += 1
                    time.sleep(min(2.0, 0.05 * 2 ** attempt) * random.uniform(0.5, 1.0))
            return found

        return [item for found in _in_batches(read, unique, BATCH_GET_LIMIT, threads) for item in found]


def _in_batches(send: Callable[[list[Any]], T], items: list[Any], size: int, threads: int) -> list[T]:
    """`send` of each batch of `size` items, in order, `threads` batches at a time (one after
    another when 1, or when there is a single batch)."""
    batches = [items[start:start + size] for start in range(0, len(items), size)]
    if threads > 1 and len(batches) > 1:
        with ThreadPoolExecutor(min(threads, len(batches))) as pool:
            return list(pool.map(send, batches))
    return list(map(send, batches))


def in_parallel(partitions: list[str], read: Callable[[str], Iterable[T]]) -> Iterator[T]:
    """What `read` gives for each partition (in partition order), the partitions read side by side,
    each whole before its items come out; one partition alone is read as its items are taken."""
    if len(partitions) == 1:
        yield from read(partitions[0])
        return
    with ThreadPoolExecutor(min(max(len(partitions), 1), PARTITION_THREADS)) as pool:
        for items in pool.map(lambda p: list(read(p)), partitions):
            yield from items


def confirm_delete_mark(table: DynamoTable, key: dict[str, str]) -> None:
    """A delete that found nothing (no story) using the item goes on: its `deleting` mark becomes
    keys.DELETE_CONFIRMED, which no refused delete may take back. Nothing when the item is gone: another
    delete finished it."""
    try:
        table.update(key, "SET deleting = :confirmed", condition="attribute_exists(deleting)",
                     values={":confirmed": keys.DELETE_CONFIRMED})
    except ConditionFailed:
        pass


@dataclass(frozen=True)
class Condition:
    """A condition a status move must also meet, beside its allowed "from" statuses."""
    expression: str
    names: dict[str, str] = field(default_factory=dict)
    values: dict[str, Any] = field(default_factory=dict)


def status_in(statuses: Iterable[Any], attribute: str = "#status") -> tuple[str, dict[str, str]]:
    """'#status IN (:in0, :in1)' and its values, for the allowed "from" states of a conditional write."""
    values = {f":in{i}": getattr(s, "value", s) for i, s in enumerate(statuses)}
    return f"{attribute} IN ({', '.join(values)})", values


E = TypeVar("E", bound=Identified)
S = TypeVar("S", bound=Enum)


class StatusMoves(Generic[E, S]):
    """`move` for a repository whose entities follow a status table: a conditional write from the
    statuses `statuses` allows into the target, which leaves the sparse index of active items
    (gsi2) when the target is finished. A repository names its table, the `noun` its refusals
    speak of, the `key` of an (environment, id) and how an item reads back (`_from_item`)."""
    _table: DynamoTable
    statuses: StatusMachine[S]
    noun: str
    key: Callable[[str, int], dict[str, str]]  # a staticmethod: keys.run, keys.investigation, ...

    @staticmethod
    def _from_item(item: dict[str, Any]) -> E:
        raise NotImplementedError

    def _move_condition(self, target: S) -> Condition | None:
        """What the stored item must also hold to move to `target` (none unless a repository says)."""
        return None

    def move(self, entity: E, /, target: S, **fields: object) -> E:
        """Move `entity` to `target` if its stored status allows it, setting `fields` with the move.
        Raises TransitionRefused when the stored status does not allow it."""
        sources = self.statuses.sources_of(target)
        if not sources:  # no status leads there (back to pending): refused, as the condition would be
            raise TransitionRefused(f"{self.noun} {entity.id} cannot move to {target.value}")
        try:
            item = self._table.move_status(self.key(entity.environment, entity.id), target.value, sources, fields,
                                           leave_index=keys.GSI2 if target in self.statuses.finished else None,
                                           also=self._move_condition(target))
        except ConditionFailed:
            raise TransitionRefused(f"{self.noun} {entity.id} cannot move to {target.value}") from None
        return self._from_item(item)

    def _claim_restart(self, entity: E, restarts: int, last_progress_at: datetime | None, counted: bool = True,
                       counted_fields: dict[str, Any] | None = None) -> bool:
        """Claim one restart of a stuck entity (the sweeper's): False when it finished meanwhile, came
        back (its heartbeat moved) or another sweeper restarted it (its restarts moved). Not
        `counted`, the heartbeat alone moves (a resume after the process that ran it died);
        `counted`, `counted_fields` are set with the count."""
        active = [s.value for s in self.statuses.statuses if s not in self.statuses.finished]
        values: dict[str, Any] = {f":s{n}": status for n, status in enumerate(active)}
        condition = (f"#status IN ({', '.join(values)}) "
                     "AND (attribute_not_exists(restarts) OR restarts = :restarts)")
        if last_progress_at is None:  # none seen: one claimed meanwhile wrote one
            condition += " AND attribute_not_exists(last_progress_at)"
        else:
            condition += " AND last_progress_at = :seen"
            values[":seen"] = iso(last_progress_at)
        update = "SET last_progress_at = :now"
        values.update({":restarts": restarts, ":now": iso(utc_now())})
        if counted:
            update += ", restarts = if_not_exists(restarts, :zero) + :one"
            values.update({":zero": 0, ":one": 1})
            for n, (name, value) in enumerate((counted_fields or {}).items()):
                update += f", {name} = :counted{n}"
                values[f":counted{n}"] = value
        try:
            self._table.update(self.key(entity.environment, entity.id), update, condition=condition,
                               names={"#status": "status"}, values=values)
        except ConditionFailed:
            return False
        return True


def _key_attributes(index: Index) -> tuple[str, ...]:
    """The attributes of a page's last key in `index`: the table's key, and the index's."""
    table = keys.BASE_TABLE
    return tuple(dict.fromkeys((table.partition_key, table.sort_key, index.partition_key, index.sort_key)))


def _below(kwargs: dict[str, Any], index: Index, below: str | None) -> None:
    """Only sort values strictly below `below`, when given (a merge resuming from its cursor)."""
    if below is not None:
        kwargs["KeyConditionExpression"] += " AND #below < :below"
        kwargs["ExpressionAttributeNames"]["#below"] = index.sort_key
        kwargs["ExpressionAttributeValues"][":below"] = {"S": below}


def _sort_between(query: dict[str, Any], index: Index, sort_from: str, sort_to: str) -> None:
    """A Query's key condition narrowed to sort keys from `sort_from` to `sort_to`, both in."""
    query["KeyConditionExpression"] += " AND #s BETWEEN :from AND :to"
    query["ExpressionAttributeNames"]["#s"] = index.sort_key
    query["ExpressionAttributeValues"].update({":from": {"S": sort_from}, ":to": {"S": sort_to}})


def _project(kwargs: dict[str, Any], projection: str | tuple[str, ...] | None) -> None:
    """Read only the attributes named (a query's ProjectionExpression)."""
    if projection:
        names = (projection,) if isinstance(projection, str) else projection
        kwargs["ProjectionExpression"] = ", ".join(f"#proj{i}" for i in range(len(names)))
        kwargs["ExpressionAttributeNames"].update({f"#proj{i}": name for i, name in enumerate(names)})


def _storable(value: Any) -> Any:
    """A field as DynamoDB keeps it: timestamps as ISO text, floats (scores, never money) as exact
    decimals of their text, tuples as lists."""
    if isinstance(value, datetime):
        return iso(value)
    if isinstance(value, float):
        return Decimal(str(value))
    if isinstance(value, tuple):
        return list(value)
    return value


def _add_condition(kwargs: dict[str, Any], condition: str | None, values: dict[str, Any] | None,
                   names: dict[str, str] | None, keep_nulls: bool = False) -> None:
    if condition:
        kwargs["ConditionExpression"] = condition
    if values:
        kwargs["ExpressionAttributeValues"] = (
            {k: to_attribute(v) for k, v in values.items()} if keep_nulls else serialize(values)
        )
    if names:
        kwargs["ExpressionAttributeNames"] = names



@dataclass(frozen=True)
class ConditionalUpdate:
    """An UpdateItem's parameters, for `DynamoTable.write_together`."""
    key: dict[str, str]
    expression: str
    condition: str
    values: dict[str, Any]
    names: dict[str, str] | None = None


@dataclass(frozen=True)
class ConditionalPut:
    """A PutItem's item and condition, for `DynamoTable.write_together`."""
    item: dict[str, Any]
    condition: str


ConditionalWrite = ConditionalUpdate | ConditionalPut


_DONE = object()


def _interleaved(sources: list[Iterator[P]], threads: int) -> Iterator[P]:
    """What the sources give, read `threads` at a time, as it comes; a few pages wait at most (the
    reader's memory stays its own). Stops the reads when the reader stops or a read fails."""
    arrived: queue.Queue = queue.Queue(maxsize=2 * threads)
    stop = threading.Event()

    def hand_over(value: Any) -> bool:
        while not stop.is_set():
            try:
                arrived.put(value, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def read(source: Iterator[P]) -> None:
        try:
            for value in source:
                if not hand_over(value):
                    return
            hand_over(_DONE)
        except Exception as error:  # the reader raises it
            hand_over(error)

    with ThreadPoolExecutor(min(threads, len(sources))) as pool:
        for source in sources:
            pool.submit(read, source)
        try:
            finished = 0
            while finished < len(sources):
                value = arrived.get()
                if value is _DONE:
                    finished += 1
                elif isinstance(value, Exception):
                    raise value
                else:
                    yield value
        finally:
            stop.set()


def started(sources: list[Iterator[P]], threads: int = PARTITION_THREADS) -> list[Iterator[P]]:
    """The sources, each one's first value read at once (a merge of many partitions asks each for its
    first page before it can give anything)."""
    if len(sources) < 2:
        return sources
    with ThreadPoolExecutor(min(threads, len(sources))) as pool:
        firsts: list[Any] = list(pool.map(lambda source: next(source, _DONE), sources))
    return [itertools.chain([first], source) for first, source in zip(firsts, sources, strict=True)
            if first is not _DONE]


def _packed(entries: list[tuple[T, list[ConditionalWrite]]]) -> list[list[tuple[T, list[ConditionalWrite]]]]:
    """Entries whole and in order, as many a transaction as TRANSACTION_LIMIT updates hold."""
    groups: list[list[tuple[T, list[ConditionalWrite]]]] = []
    size = 0
    for entry in entries:
        if not groups or size + len(entry[1]) > TRANSACTION_LIMIT:
            groups.append([])
            size = 0
        groups[-1].append(entry)
        size += len(entry[1])
    return groups
