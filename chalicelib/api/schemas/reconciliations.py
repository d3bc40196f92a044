"""Bodies and answers of /reconciliations."""
from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from chalicelib.api.schemas.common import Model, Name, RequestModel, Timestamp, unchanged_when_absent
from chalicelib.api.schemas.data_streams import DataStreamOut
from chalicelib.api.schemas.runs import RunOut
from chalicelib.domain.reconciliations import DEFAULT_EXCEPTION_AFTER_DAYS, MAX_EXCEPTION_AFTER_DAYS

RunTypeName = Literal["continuous", "batch"]
StreamKeys = Annotated[list[str], Field(description="Keys of data streams of the environment; at least one, "
                                        "none twice, none on both sides")]
ExceptionAfterDays = Annotated[int, Field(ge=0, le=MAX_EXCEPTION_AFTER_DAYS)]


class CreateReconciliation(RequestModel):
    name: Name
    run_type: RunTypeName = "continuous"
    side_a_stream_keys: StreamKeys
    side_b_stream_keys: StreamKeys
    exception_after_days: ExceptionAfterDays = Field(
        default=DEFAULT_EXCEPTION_AFTER_DAYS, description="Days an unmatched record waits before it is an exception")


class UpdateReconciliation(RequestModel):
    name: Name = unchanged_when_absent()
    run_type: RunTypeName = unchanged_when_absent()
    side_a_stream_keys: StreamKeys = unchanged_when_absent()
    side_b_stream_keys: StreamKeys = unchanged_when_absent()
    exception_after_days: ExceptionAfterDays = unchanged_when_absent()


class ReconciliationOut(Model):
    id: int
    name: str
    run_type: str
    side_a_streams: list[DataStreamOut]
    side_b_streams: list[DataStreamOut]
    exception_after_days: int
    created_at: Timestamp
    updated_at: Timestamp
    current_run: RunOut | None = Field(description="The pending or running run, if any")
    last_run: RunOut | None = Field(description="The most recent completed, failed or cancelled run, if any")


class ReconciliationPage(Model):
    data: list[ReconciliationOut]
    next_cursor: str | None
    limit: int
