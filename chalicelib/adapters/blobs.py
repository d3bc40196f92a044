"""S3 storage of payloads and files (bulk request bodies, uploads, drops, parsed chunks)."""
from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from chalicelib.domain.ingestion import StoredFile


class PayloadStore:
    def __init__(self, s3, bucket: str) -> None:
        self._s3 = s3
        self.bucket = bucket

    def put_json(self, key: str, value: Any) -> None:
        body = json.dumps(value, separators=(",", ":")).encode()
        self._s3.put_object(Bucket=self.bucket, Key=key, Body=body, ContentType="application/json")

    def get_json(self, key: str) -> Any:
        return json.loads(self.get_bytes(key))

    def put_bytes(self, key: str, body: bytes, content_type: str = "application/octet-stream") -> None:
        self._s3.put_object(Bucket=self.bucket, Key=key, Body=body, ContentType=content_type)

    def get_bytes(self, key: str) -> bytes:
        return self._s3.get_object(Bucket=self.bucket, Key=key)["Body"].read()

    def read_file(self, key: str) -> StoredFile:
        found = self._s3.get_object(Bucket=self.bucket, Key=key)
        return StoredFile(found["Body"].read(), found["ETag"].strip('"'), found["LastModified"])

    def head_bytes(self, key: str, count: int) -> bytes:
        """The first `count` bytes (a ranged GET), e.g. to sniff a file's format."""
        return self._s3.get_object(Bucket=self.bucket, Key=key, Range=f"bytes=0-{count - 1}")["Body"].read()

    def size(self, key: str) -> int:
        return self._s3.head_object(Bucket=self.bucket, Key=key)["ContentLength"]

    def exists(self, key: str) -> bool:
        try:
            self._s3.head_object(Bucket=self.bucket, Key=key)
        except self._s3.exceptions.ClientError:
            return False
        return True

    def upload_url(self, key: str, expires_seconds: int) -> str:
        """A presigned PUT: the client uploads the file straight to S3."""
        return self._s3.generate_presigned_url("put_object", Params={"Bucket": self.bucket, "Key": key},
                                               ExpiresIn=expires_seconds)

    def list_objects(self, prefix: str) -> Iterator[dict[str, Any]]:
        for page in self._s3.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix):
            yield from page.get("Contents", [])
