"""Payloads, run files and work queues, as `adapters/blobs.py`, `adapters/run_files.py` and
`adapters/queues.py` keep them, in memory: a missing object fails with the ClientError S3 gives
(a missing run file, with the RunInputsLost the adapter turns it into)."""
from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from botocore.exceptions import ClientError

from chalicelib.domain.ingestion import StoredFile
from chalicelib.domain.rules import Rule, validate_rule
from chalicelib.domain.runs import RunInputsLost

PREFIX = "runs"


def _no_such_key(operation: str) -> ClientError:
    return ClientError({"Error": {"Code": "NoSuchKey", "Message": "The specified key does not exist."}}, operation)


def _not_found(operation: str) -> ClientError:
    return ClientError({"Error": {"Code": "404", "Message": "Not Found"}}, operation)


class FakePayloadStore:
    def __init__(self, bucket: str = "fake-bucket") -> None:
        self.bucket = bucket
        self.objects: dict[str, tuple[bytes, datetime]] = {}  # key: (body, last modified)

    def put_json(self, key: str, value: Any) -> None:
        self.objects[key] = (json.dumps(value, separators=(",", ":")).encode(), datetime.now(UTC))

    def get_json(self, key: str) -> Any:
        return json.loads(self.get_bytes(key))

    def put_bytes(self, key: str, body: bytes, content_type: str = "application/octet-stream") -> None:
        self.objects[key] = (body, datetime.now(UTC))

    def get_bytes(self, key: str) -> bytes:
        if key not in self.objects:
            raise _no_such_key("GetObject")
        return self.objects[key][0]

    def read_file(self, key: str) -> StoredFile:
        """As GetObject tells it: the ETag of an object put in one request (the MD5 of its bytes), and its
        Last-Modified (an HTTP date: whole seconds)."""
        body = self.get_bytes(key)
        return StoredFile(body, hashlib.md5(body).hexdigest(), self.objects[key][1].replace(microsecond=0))

    def head_bytes(self, key: str, count: int) -> bytes:
        """The first `count` bytes."""
        return self.get_bytes(key)[:count]

    def size(self, key: str) -> int:
        if key not in self.objects:
            raise _not_found("HeadObject")
        return len(self.objects[key][0])

    def exists(self, key: str) -> bool:
        return key in self.objects

    def upload_url(self, key: str, expires_seconds: int) -> str:
        """A URL standing for a presigned PUT of `key` (nothing listens there)."""
        return f"https://{self.bucket}.s3.amazonaws.com/{quote(key)}?X-Amz-Expires={expires_seconds}"

    def list_objects(self, prefix: str) -> Iterator[dict[str, Any]]:
        """The objects under `prefix` in key order, each with S3's Key, Size, LastModified and ETag."""
        for key in sorted(k for k in self.objects if k.startswith(prefix)):
            body, modified = self.objects[key]
            yield {"Key": key, "Size": len(body), "LastModified": modified,
                   "ETag": f'"{hashlib.md5(body).hexdigest()}"', "StorageClass": "STANDARD"}


class FakeRunFiles:
    """Frames are kept as frames (a copy), not as Parquet; `read_frame(chunk=)` filters as the
    adapter's scan does, and `exists` answers for a name prefix as S3's listing does."""

    def __init__(self) -> None:
        self.objects: dict[str, Any] = {}  # key as the adapter names it: a frame, or JSON text

    def _key(self, environment: str, run_id: int, name: str) -> str:
        return f"{PREFIX}/{environment}/{run_id}/{name}"

    def write_frame(self, environment: str, run_id: int, name: str, frame, row_group_size: int | None = None) -> None:
        self.objects[self._key(environment, run_id, f"{name}.parquet")] = frame.clone()

    def read_frame(self, environment: str, run_id: int, name: str, chunk: int | None = None,
                   columns: list[str] | None = None):
        """The whole frame (or its `columns`), or only its rows of one `chunk` (a plan's column `chunk`)."""
        import polars as pl

        frame = self._read(environment, run_id, f"{name}.parquet")
        if chunk is None:
            return frame.clone() if columns is None else frame.select(columns)
        return frame.lazy().filter(pl.col("chunk") == chunk).collect()

    def write_rules(self, environment: str, run_id: int, rules: list[Rule]) -> None:
        """The rules the run applies, kept as the adapter keeps them: id and definition body, as JSON."""
        self.objects[self._key(environment, run_id, "rules.json")] = json.dumps(
            [{"id": r.id, "definition": r.definition.as_body()} for r in rules])

    def read_rules(self, environment: str, run_id: int, reconciliation_id: int) -> list[Rule]:
        """The rules as written, each of `reconciliation_id`, with no creation time (a run's copy)."""
        return [Rule(environment=environment, id=r["id"], reconciliation_id=reconciliation_id,
                     definition=validate_rule(r["definition"]), created_at=None)
                for r in json.loads(self._read(environment, run_id, "rules.json"))]

    def write_json(self, environment: str, run_id: int, name: str, value: Any) -> dict[str, str]:
        """Kept as JSON text; gives where the adapter would write it (Bucket, Key)."""
        location = self.json_location(environment, run_id, name)
        self.objects[location["Key"]] = json.dumps(value)
        return location

    def json_location(self, environment: str, run_id: int, name: str) -> dict[str, str]:
        return {"Bucket": "fake-run-files", "Key": self._key(environment, run_id, f"{name}.json")}

    def read_json(self, environment: str, run_id: int, name: str) -> Any:
        return json.loads(self._read(environment, run_id, f"{name}.json"))

    def _read(self, environment: str, run_id: int, name: str) -> Any:
        key = self._key(environment, run_id, name)
        if key not in self.objects:
            raise RunInputsLost(run_id, name)
        return self.objects[key]

    def exists(self, environment: str, run_id: int, name: str) -> bool:
        """Whether some file's name starts with `name` (as the adapter's listing by prefix answers)."""
        prefix = self._key(environment, run_id, name)
        return any(key.startswith(prefix) for key in self.objects)


class FakeWorkQueue:
    """`messages`: what was sent, in order, as the queue's consumer would read it (JSON round trip)."""

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []
        self.delays: list[int] = []  # each message's delay_seconds, in the same order

    def send(self, message: dict[str, Any], delay_seconds: int = 0) -> None:
        self.messages.append(json.loads(json.dumps(message, separators=(",", ":"))))
        self.delays.append(min(delay_seconds, 900))
