"""A run's working files in S3 (`runs/<env>/<run id>/<name>.parquet`): the open records the load
phase read and the matches the engine found, so that each phase of the state machine is a short
Lambda call that a retry can repeat from the same input. A fanned-out run adds its partitions
(`partitions/<round>/<partition>/a|b.parquet`), each partition's outcome beside them, and a manifest
a round (`partitions/<round>/manifest.json`: the JSON array the Distributed Map's ItemReader reads)."""
from __future__ import annotations

import io
import json
from typing import Any

from chalicelib.domain.rules import Rule, validate_rule
from chalicelib.domain.runs import RunInputsLost

PREFIX = "runs"


class RunFiles:
    def __init__(self, s3, bucket: str) -> None:
        self._s3 = s3
        self._bucket = bucket

    def _key(self, environment: str, run_id: int, name: str) -> str:
        return f"{PREFIX}/{environment}/{run_id}/{name}"

    def write_frame(self, environment: str, run_id: int, name: str, frame, row_group_size: int | None = None) -> None:
        buffer = io.BytesIO()
        frame.write_parquet(buffer, compression="zstd", row_group_size=row_group_size)
        self._s3.put_object(Bucket=self._bucket, Key=self._key(environment, run_id, f"{name}.parquet"),
                            Body=buffer.getvalue())

    def read_frame(self, environment: str, run_id: int, name: str, chunk: int | None = None,
                   columns: list[str] | None = None):
        """The whole frame (or its `columns`), or only its rows of one `chunk` (a plan's column
        `chunk`): then only the row groups whose statistics allow that chunk are decoded."""
        import polars as pl

        data = io.BytesIO(self._read(environment, run_id, f"{name}.parquet"))
        if chunk is None:
            return pl.read_parquet(data, columns=columns)
        return pl.scan_parquet(data).filter(pl.col("chunk") == chunk).collect()

    def write_rules(self, environment: str, run_id: int, rules: list[Rule]) -> None:
        """The rules the run applies, as the load phase read them (a later edit changes no run)."""
        self.write_json(environment, run_id, "rules", [{"id": r.id, "definition": r.definition.as_body()}
                                                       for r in rules])

    def read_rules(self, environment: str, run_id: int, reconciliation_id: int) -> list[Rule]:
        return [Rule(environment=environment, id=r["id"], reconciliation_id=reconciliation_id,
                     definition=validate_rule(r["definition"]), created_at=None)
                for r in self.read_json(environment, run_id, "rules")]

    def write_json(self, environment: str, run_id: int, name: str, value: Any) -> dict[str, str]:
        """Write `<name>.json`; gives where it is, as a state's S3 parameters name it (Bucket, Key)."""
        location = self.json_location(environment, run_id, name)
        self._s3.put_object(**location, Body=json.dumps(value).encode())
        return location

    def json_location(self, environment: str, run_id: int, name: str) -> dict[str, str]:
        """Where `<name>.json` is, as a state's S3 parameters name it (Bucket, Key)."""
        return {"Bucket": self._bucket, "Key": self._key(environment, run_id, f"{name}.json")}

    def read_json(self, environment: str, run_id: int, name: str) -> Any:
        return json.loads(self._read(environment, run_id, f"{name}.json"))

    def _read(self, environment: str, run_id: int, name: str) -> bytes:
        """The file's bytes; RunInputsLost when it is gone (a retry would not bring it back)."""
        try:
            body = self._s3.get_object(Bucket=self._bucket, Key=self._key(environment, run_id, name))
        except self._s3.exceptions.NoSuchKey:
            raise RunInputsLost(run_id, name) from None
        return body["Body"].read()

    def exists(self, environment: str, run_id: int, name: str) -> bool:
        listed = self._s3.list_objects_v2(Bucket=self._bucket, Prefix=self._key(environment, run_id, name), MaxKeys=1)
        return listed.get("KeyCount", 0) > 0
