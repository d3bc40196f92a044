"""Bodies and answers of /reconciliation_stories: the chain, the trace of a record, the summary."""
from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, ConfigDict, Field, WithJsonSchema

from chalicelib.api.schemas.common import (
    Id,
    Model,
    MoneyOut,
    Name,
    QueryModel,
    RequestModel,
    ResponseModel,
    Timestamp,
    unchanged_when_absent,
    when,
)
from chalicelib.api.schemas.reconciliation_exceptions import ExceptionOut
from chalicelib.api.schemas.records import RecordOut
from chalicelib.api.schemas.runs import RunOut
from chalicelib.domain.stories import MAX_LINKS as MAX_STORY_LINKS


def _digits_to_int(value: Any) -> Any:
    """An id given as a string of digits (as the spec's PATCH body types them) is that number."""
    return int(value) if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 15 else value


LinkId = Annotated[int, BeforeValidator(_digits_to_int), Field(ge=1, le=10**15 - 1),
                   WithJsonSchema({"oneOf": [{"type": "integer", "minimum": 1, "maximum": 10**15 - 1},
                                             {"type": "string", "pattern": "^[0-9]{1,15}$", "examples": ["1"]}]})]


class StoryLinkIn(RequestModel):
    model_config = ConfigDict(json_schema_extra={"allOf": [
        when({"properties": {"position": {"const": 1}}},
             {"properties": {"shared_data_stream_id": {"type": "null"}, "role": {"enum": ["origin", None]}}}),
        when({"properties": {"position": {"minimum": 2}}},
             {"required": ["shared_data_stream_id"], "properties": {"role": {"enum": ["continuation", None]}}})]})
    reconciliation_id: LinkId
    position: int = Field(ge=1, description="1-based; the positions of a chain are 1..n, in any order in the body")
    shared_data_stream_id: LinkId | None = Field(
        default=None, description="The data stream this link shares with the previous link's reconciliation "
                                  "(both must use it); none on the origin (position 1)")
    role: Literal["origin", "continuation"] | None = Field(
        default=None, description="origin for position 1, continuation for every other (may be omitted)")


StoryLinks = Annotated[list[StoryLinkIn], Field(min_length=1, max_length=MAX_STORY_LINKS)]


class CreateStory(RequestModel):
    name: Name
    links: StoryLinks


class UpdateStory(RequestModel):
    name: Name = unchanged_when_absent()
    links: StoryLinks = unchanged_when_absent("When present, replaces the whole chain")


class StreamRefOut(Model):
    id: int
    name: str


class StoryLinkOut(Model):
    id: int
    position: int
    role: str
    reconciliation_id: int
    reconciliation_name: str
    shared_data_stream_id: int | None
    shared_data_stream_name: str | None
    side_a_streams: list[StreamRefOut]
    side_b_streams: list[StreamRefOut]


class StoryOut(Model):
    id: int
    name: str
    created_at: Timestamp
    links: list[StoryLinkOut]


class StoryPage(Model):
    data: list[StoryOut]
    next_cursor: str | None
    limit: int


class OpenMoneyOut(MoneyOut):
    oldest_date: str | None = Field(description="The earliest record date (YYYY-MM-DD)")


class StoryTraceQuery(QueryModel):
    record_id: Id = Field(description="The record to follow through the story's chain")


class TraceLinkOut(ResponseModel):
    id: int
    position: int
    role: Literal["origin", "continuation"]
    reconciliation_id: int
    reconciliation_name: str


class TraceMatchOut(ResponseModel):
    id: int
    status: Literal["confirmed", "proposed"]
    reconciliation_rule_id: int | None = Field(description="null for a match made by hand")
    record_count: int


class TraceHopBreakOut(ResponseModel):
    reason: Literal["unmatched", "proposed", "exception"] = Field(
        description="unmatched or exception: records open in the link's reconciliation (the trace stops); "
                    "proposed: a match nobody confirmed yet (the trace goes on through it)")
    exception_id: int | None = Field(description="The exception holding the open records (reason exception)")


class TraceRecordsOut(ResponseModel):
    data: list[RecordOut] = Field(description="At most 20: those the trace came in by first, then by id")
    count: int = Field(description="All the hop's records")
    totals: list[MoneyOut] = Field(description="Over all the hop's records, per currency")


class TraceBreakCountsOut(ResponseModel):
    unmatched: int
    proposed: int
    exception: int


class TraceOmittedOut(ResponseModel):
    hops: int = Field(description="Hops of the step left out (not followed further)")
    records: int = Field(description="The records the trace reached those hops by")
    totals: list[MoneyOut]
    breaks: TraceBreakCountsOut = Field(description="How many of the hops left out are breaks, by reason")


class TraceHopOut(ResponseModel):
    model_config = ConfigDict(from_attributes=True, serialize_by_alias=True)
    link: TraceLinkOut
    direction: Literal["start", "upstream", "downstream"]
    via_data_stream: StreamRefOut | None = Field(description="The shared stream the hop was entered through "
                                                             "(null on a start hop)")
    match: TraceMatchOut | None
    break_: TraceHopBreakOut | None = Field(serialization_alias="break")
    records: TraceRecordsOut
    next: list[TraceHopOut] = Field(description="At most 10 hops per link step, breaks first; a start hop's "
                                                "next may go both upstream and downstream")
    next_omitted: TraceOmittedOut | None


class TraceBreakOut(ResponseModel):
    link_position: int
    reconciliation_id: int
    reason: Literal["unmatched", "proposed", "exception"]
    match_id: int | None
    exception_id: int | None
    record_ids: list[int] = Field(description="At most 20")


class StoryTraceOut(ResponseModel):
    story_id: int
    record: RecordOut
    truncated: bool = Field(description="The trace reached its budget of 200 hops followed: the rest is summarised "
                                        "in next_omitted")
    hops: list[TraceHopOut] = Field(description="The start hops (the links whose reconciliation uses the record's "
                                                "stream), by position")
    breaks: list[TraceBreakOut] = Field(description="Every break of the hops shown, in tree order")


# Story summary ----------------------------------------------------------------------------

class SideFiguresOut(Model):
    matched: list[MoneyOut] = Field(description="Records matched in the link's reconciliation, per currency")
    unmatched: list[OpenMoneyOut] = Field(description="Records still open in it, per currency")


class StreamFiguresOut(SideFiguresOut):
    data_stream: StreamRefOut
    side: Literal["a", "b"]


class FromPreviousLinkOut(Model):
    data_stream: StreamRefOut = Field(description="The shared stream")
    count: int
    totals: list[OpenMoneyOut] = Field(description="Per currency")
    oldest_date: str | None


class StoryLinkSummaryOut(Model):
    link: StoryLinkOut
    computed_at: Timestamp | None = Field(description="When the figures were computed (the oldest of the link's "
                                                      "streams): after every run, and at least hourly; null until "
                                                      "the reconciliation was first run or refreshed")
    refresh_pending: bool = Field(description="Matching changed since (a person's match, unmatch or confirm, or a "
                                              "run of a neighbouring link): the figures catch up within a minute")
    side_a: SideFiguresOut
    side_b: SideFiguresOut
    data_streams: list[StreamFiguresOut]
    open_exceptions: list[ExceptionOut] = Field(description="The link's active exceptions with their aggregates")
    last_run: RunOut | None = Field(description="The run under way, else the last one")
    from_previous_link: FromPreviousLinkOut | None = Field(
        description="A continuation only: records of the shared stream matched in the previous link but still "
                    "unmatched in this one: where the chain leaks")


class StorySummaryOut(Model):
    story_id: int
    name: str
    links: list[StoryLinkSummaryOut]
