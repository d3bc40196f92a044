"""The engine of the agents' `sql` tool: one read-only query, checked by domain/agents/sql_guard.py,
run by polars' SQL over one environment's records as the analytics mirror holds them (see
adapters/mirror.py), as a table `records` of the record's API fields.

The environment is the caller's, never the statement's: only that environment's published parts
are read (one listing of `mirror/environment=<env>/`; staging is another prefix), only imports whose
row marker is there (as the stream counts see them), less the tombstoned records. An import is read
from its compact object (all its parts in one, written when it was published) when it has one. The SQL context
holds nothing but that frame, and the guard refuses every file reader before polars runs anything.

The query runs in a process of its own, killed at the time or memory bound: polars' own
cancellation (`collect(background=True)` then `cancel()`) is cooperative, and a join does not
look at it: measured on polars 2.1.0, a self-join of a million records went on growing by
~0.7 GB a second after `cancel()`, which would take the Lambda down with the agent's run. The
process gets the parts' local paths, not the AWS credentials.

Published parts never change, so each is downloaded once into `cache_dir`, named by its key and
ETag (on Lambda, /tmp outlives a warm invocation): a second query costs a listing and the query's
process (~0.5 s, mostly importing polars). polars is imported by that process only.
"""
from __future__ import annotations

import hashlib
import json
import os
import pickle
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import date, datetime
from pathlib import Path
from typing import Any

from chalicelib.adapters.mirror import COLUMNS, COMPACT, PREFIX, TOMBSTONES
from chalicelib.domain.agents.sql_guard import SqlRefused, check_select
from chalicelib.domain.api_keys import ENVIRONMENT_PATTERN

# The record's API fields, in its order: data_stream_id and file_import_id stay out of the table.
FIELDS = ("id", "data_stream_key", "date", "amount", "currency", "decimal_places", "direction", "description",
          "external_id", "metadata")
TABLE = "records"
DOWNLOAD_THREADS = 16  # a million records are a thousand parts: GETs are latency, not CPU
MAX_CACHE_BYTES = 400 * 1024 * 1024  # Lambda's /tmp is 512 MB unless configured larger
MAX_ANSWER_BYTES = 16 * 1024 * 1024  # a few hundred rows, unless cells hold whole columns (string_agg)
MAX_CELL = 80  # characters of a cell in the text table; longer ones are cut
MAX_ERROR = 300  # characters of polars' message passed on
POLL_SECONDS = 0.01
# Nothing the query's process needs, and nothing it should hold: polars reads s3:// paths with them.
SECRET_VARIABLES = re.compile(r"^AWS_|KEY|SECRET|TOKEN|PASSWORD|CREDENTIAL", re.IGNORECASE)

_PART = re.compile(r"^data_stream=([^/]+)/import=(\d+)/part-\d+\.parquet$")
_ROWS = re.compile(r"^data_stream=([^/]+)/import=(\d+)/_rows=(\d+)$")
_COMPACT = re.compile(rf"^data_stream=([^/]+)/import=(\d+)/{re.escape(COMPACT)}$")
_TOMBSTONE = re.compile(rf"^data_stream=([^/]+)/{TOMBSTONES}/import=(\d+)/record-(\d+)$")


@dataclass(frozen=True)
class SqlAnswer:
    columns: list[str]
    rows: list[tuple[Any, ...]]  # at most the engine's max_rows
    truncated: bool  # the query returned more rows than `rows` holds
    total_records: int  # rows of `records` the query ran over


@dataclass
class _Mirror:
    """An environment's published parts as its listing tells them."""
    parts: list[tuple[str, str]] = field(default_factory=list)  # (key, ETag) of imports with a row marker
    dead: set[int] = field(default_factory=set)  # tombstoned ids of those imports (an id is one record)
    total: int = 0  # their rows less their tombstones


class RecordsSql:
    def __init__(self, s3: Any, bucket: str, cache_dir: Path, max_rows: int = 200, timeout_seconds: float = 20.0,
                 max_memory_mb: int = 1024, max_cache_bytes: int = MAX_CACHE_BYTES) -> None:
        self._s3 = s3
        self._bucket = bucket
        self._cache_dir = cache_dir
        self.max_rows = max_rows
        self.timeout_seconds = timeout_seconds
        self.max_memory_mb = max_memory_mb
        self._max_cache_bytes = max_cache_bytes

    def query(self, environment: str, sql: str) -> SqlAnswer:
        """Run one SELECT over the environment's records; SqlRefused (its reason meant for the model)
        when the guard refuses it, polars cannot run it, or it passes the time or memory bound."""
        statement = check_select(sql)  # before anything is read
        if not ENVIRONMENT_PATTERN.match(environment):  # it names a directory and a prefix
            raise ValueError(f"not an environment name: {environment!r}")
        mirror = self._listing(environment)
        paths = self._cached(environment, mirror.parts)
        request = {"paths": [str(p) for p in paths], "dead": sorted(mirror.dead), "statement": statement,
                   "limit": self.max_rows + 1}
        columns, rows = self._run(request, cwd=self._cache_dir / environment)
        return SqlAnswer(columns=columns, rows=rows[:self.max_rows], truncated=len(rows) > self.max_rows,
                         total_records=mirror.total)

    @staticmethod
    def as_table(answer: SqlAnswer) -> str:
        return as_table(answer)

    def _run(self, request: dict[str, Any], cwd: Path) -> tuple[list[str], list[tuple[Any, ...]]]:
        """The query's answer from a process of its own, killed once past the time or memory bound."""
        path = os.pathsep.join(os.path.abspath(p) for p in sys.path if p)  # the app's and the layer's
        env = {name: value for name, value in os.environ.items() if not SECRET_VARIABLES.search(name)}
        # The request from a file, not a pipe: communicate() called again after its timeout keeps
        # the output it read, but stops writing an input larger than the pipe's buffer (1,000 paths).
        with tempfile.TemporaryFile() as sent:
            sent.write(json.dumps(request).encode())
            sent.seek(0)
            process = subprocess.Popen(
                [sys.executable, "-B", "-c", "from chalicelib.adapters.records_sql import serve; serve()"],
                stdin=sent, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=cwd, env={**env, "PYTHONPATH": path})
        deadline = time.monotonic() + self.timeout_seconds
        try:
            while True:
                try:
                    out, err = process.communicate(timeout=POLL_SECONDS)
                    break
                except subprocess.TimeoutExpired:
                    pass
                if time.monotonic() >= deadline:
                    raise SqlRefused(f"the query took longer than {self.timeout_seconds:g} s and was stopped: "
                                     "filter or aggregate more, avoid joining records with itself")
                if _resident_mb(process.pid) > self.max_memory_mb:
                    raise SqlRefused(f"the query needed more than {self.max_memory_mb} MB and was stopped: "
                                     "filter or aggregate more, avoid joining records with itself")
        finally:
            if process.poll() is None:
                process.kill()
                process.communicate()
        if process.returncode != 0 or not out:
            raise SqlRefused(f"the query stopped the engine (exit {process.returncode}): "
                             f"{_message(err.decode(errors='replace')) if err else 'no message'}")
        if len(out) > MAX_ANSWER_BYTES:
            raise SqlRefused(f"the answer is larger than {MAX_ANSWER_BYTES // 2**20} MB: select fewer or shorter "
                             "columns")
        kind, *answer = pickle.loads(out)  # noqa: S301 - written by serve() below, in our own process
        if kind == "refused":
            raise SqlRefused(f"the query cannot run: {answer[0]}")
        return answer[0], answer[1]

    def _listing(self, environment: str) -> _Mirror:
        prefix = f"{PREFIX}/environment={environment}/"
        parts: dict[tuple[str, int], list[tuple[str, str]]] = {}
        compact: dict[tuple[str, int], tuple[str, str]] = {}
        rows: dict[tuple[str, int], int] = {}
        dead: dict[tuple[str, int], set[int]] = {}
        pages = self._s3.get_paginator("list_objects_v2").paginate(Bucket=self._bucket, Prefix=prefix)
        for obj in (obj for page in pages for obj in page.get("Contents", [])):
            name = obj["Key"].removeprefix(prefix)
            if part := _PART.match(name):
                parts.setdefault((part[1], int(part[2])), []).append((obj["Key"], obj["ETag"]))
            elif whole := _COMPACT.match(name):
                compact[(whole[1], int(whole[2]))] = (obj["Key"], obj["ETag"])
            elif marker := _ROWS.match(name):  # the largest, should a retry have seen more parts
                rows[(marker[1], int(marker[2]))] = max(rows.get((marker[1], int(marker[2])), 0), int(marker[3]))
            elif tombstone := _TOMBSTONE.match(name):
                dead.setdefault((tombstone[1], int(tombstone[2])), set()).add(int(tombstone[3]))
        mirror = _Mirror()
        for published, count in rows.items():  # an import without its marker is not in the mirror yet
            # Its one compact object when there is one (imports published before it existed have none).
            mirror.parts += [compact[published]] if published in compact else parts.get(published, [])
            mirror.dead |= dead.get(published, set())
            mirror.total += count - len(dead.get(published, ()))
        return mirror

    def _cached(self, environment: str, parts: list[tuple[str, str]]) -> list[Path]:
        """Local copies of the parts, downloading those not cached yet; files of parts no longer
        listed are removed, and other environments' caches when the whole is over its bound."""
        directory = self._cache_dir / environment
        directory.mkdir(parents=True, exist_ok=True)
        paths = {(key, etag): directory / f"{hashlib.sha256(f'{key}|{etag}'.encode()).hexdigest()[:32]}.parquet"
                 for key, etag in parts}
        missing = [(key, etag, path) for (key, etag), path in paths.items() if not path.exists()]
        if missing:
            with ThreadPoolExecutor(DOWNLOAD_THREADS) as pool:
                list(pool.map(lambda part: self._download(*part), missing))
        kept = set(paths.values())
        for stale in directory.glob("*.parquet"):
            if stale not in kept:
                stale.unlink(missing_ok=True)
        os.utime(directory)  # the environment's last use, for the eviction of others
        if missing:
            self._evict(keep=directory)
        return sorted(paths.values())

    def _download(self, key: str, etag: str, path: Path) -> None:
        answer = self._s3.get_object(Bucket=self._bucket, Key=key)
        if answer["ETag"] != etag:  # replaced since the listing (a forgotten import written again)
            raise SqlRefused("the records changed while they were read: ask again")
        partial = path.with_name(f".{uuid.uuid4().hex}.partial")  # never a half-written part under its name
        partial.write_bytes(answer["Body"].read())
        os.replace(partial, path)

    def _evict(self, keep: Path) -> None:
        """Remove the least recently queried environments' caches while the cache is over its bound."""
        sizes = {d: sum(f.stat().st_size for f in d.iterdir()) for d in self._cache_dir.iterdir() if d.is_dir()}
        total = sum(sizes.values())
        for directory in sorted(sizes, key=lambda d: d.stat().st_mtime):
            if total <= self._max_cache_bytes:
                break
            if directory != keep:
                shutil.rmtree(directory, ignore_errors=True)
                total -= sizes[directory]


def serve() -> None:
    """The query's process: the request as JSON on stdin, the answer pickled on stdout, either
    ("rows", columns, rows) or ("refused", polars' message)."""
    import polars as pl

    request = json.loads(sys.stdin.buffer.read())
    schema = {name: getattr(pl, COLUMNS[name]) for name in FIELDS}
    if request["paths"]:  # parts written before `metadata` existed lack it: a null column, not an error
        records = pl.scan_parquet(request["paths"], schema=schema, missing_columns="insert", extra_columns="ignore",
                                  hive_partitioning=False, glob=False).select(FIELDS)
    else:
        records = pl.LazyFrame(schema=schema)
    if request["dead"]:
        records = records.filter(~pl.col("id").is_in(request["dead"]))
    context = pl.SQLContext(frames={TABLE: records}, register_globals=False)  # nothing else to name
    try:
        frame = context.execute(request["statement"], eager=False).limit(request["limit"]).collect()
        answer: tuple[Any, ...] = ("rows", list(frame.columns), frame.rows())
    except (pl.exceptions.PolarsError, pl.exceptions.PanicException) as error:
        answer = ("refused", _message(error))
    sys.stdout.buffer.write(pickle.dumps(answer))
    sys.stdout.buffer.flush()


def _resident_mb(pid: int) -> float:
    """The process' resident memory (Linux; 0 where /proc is not there)."""
    try:
        pages = int(Path(f"/proc/{pid}/statm").read_text().split()[1])
    except (OSError, IndexError, ValueError):
        return 0.0
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20



def as_table(answer: SqlAnswer) -> str:
    """The answer as pipe-separated text for the model: a header, one line a row, and a last line
    saying how many rows (and whether more were cut)."""
    lines = [" | ".join(answer.columns)]
    lines += [" | ".join(_cell(value) for value in row) for row in answer.rows]
    if answer.truncated:
        lines.append(f"({len(answer.rows)} rows shown, the query returns more: aggregate, filter or add LIMIT)")
    else:
        lines.append(f"({len(answer.rows)} row{'' if len(answer.rows) == 1 else 's'})")
    return "\n".join(lines)


def _cell(value: Any) -> str:
    if value is None:
        text = "null"
    elif isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, date | datetime):
        text = value.isoformat()
    else:
        text = str(value)  # ints stay exact integers (minor units), floats as Python writes them
    text = text.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r").replace("|", "\\|")
    return text if len(text) <= MAX_CELL else text[:MAX_CELL - 1] + "…"


def _message(error: BaseException | str) -> str:
    """polars' message, its first line: the rest is a query plan naming the cache's files."""
    lines = str(error).strip().splitlines()
    return (lines[0] if lines else type(error).__name__)[:MAX_ERROR]
