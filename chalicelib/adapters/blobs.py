"""S3 storage of payloads (bulk request bodies, uploaded files)."""
from __future__ import annotations

import json
from typing import Any


class PayloadStore:
    def __init__(self, s3, bucket: str) -> None:
        self._s3 = s3
        self._bucket = bucket

    def put_json(self, key: str, value: Any) -> None:
        body = json.dumps(value, separators=(",", ":")).encode()
        self._s3.put_object(Bucket=self._bucket, Key=key, Body=body, ContentType="application/json")

    def get_json(self, key: str) -> Any:
        return json.loads(self._s3.get_object(Bucket=self._bucket, Key=key)["Body"].read())
