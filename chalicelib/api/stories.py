"""Routes of /reconciliation_stories."""
from __future__ import annotations

from typing import TypeVar

from chalicelib.api.reconciliation_exceptions import exceptions_out
from chalicelib.api.routing import ApiRequest, Router, numeric_id
from chalicelib.api.schemas.common import CursorQuery, MoneyOut
from chalicelib.api.schemas.reconciliation_exceptions import ExceptionOut
from chalicelib.api.schemas.runs import RunOut
from chalicelib.api.schemas.stories import (
    CreateStory,
    FromPreviousLinkOut,
    OpenMoneyOut,
    SideFiguresOut,
    StoryLinkIn,
    StoryLinkOut,
    StoryLinkSummaryOut,
    StoryOut,
    StoryPage,
    StorySummaryOut,
    StoryTraceOut,
    StoryTraceQuery,
    StreamFiguresOut,
    StreamRefOut,
    UpdateStory,
)
from chalicelib.container import container
from chalicelib.domain.data_streams import DataStream
from chalicelib.domain.stories import LinkInput, LinkRole, Story
from chalicelib.domain.tallies import Money
from chalicelib.services import stories as service
from chalicelib.services import story_summary, story_trace
from chalicelib.services.story_summary import LinkSummary

router = Router("stories")
STORIES = "/reconciliation_stories"


def link_inputs(links: list[StoryLinkIn]) -> list[LinkInput]:
    return [LinkInput(index=i, reconciliation_id=link.reconciliation_id, position=link.position,
                      shared_data_stream_id=link.shared_data_stream_id,
                      role=LinkRole(link.role) if link.role else None)
            for i, link in enumerate(links)]


def stories_out(stories: list[Story], environment: str) -> list[StoryOut]:
    """Render stories with the names of their reconciliations and streams as they are now (read in
    one batch for all of them: nothing is copied into a story, so a rename shows at once)."""
    ports = container().ports
    reconciliations = service.chained_reconciliations(ports, environment,
                                                      (i for s in stories for i in s.reconciliation_ids))
    streams = service.chained_streams(ports, environment, [k for r in reconciliations.values() for k in r.stream_keys]
                                      + [k for s in stories for k in s.shared_stream_keys])

    def side(keys: tuple[str, ...]) -> list[StreamRefOut]:
        return [StreamRefOut.model_validate(streams[k], from_attributes=True) for k in keys if k in streams]

    def link_out(story: Story) -> list[StoryLinkOut]:
        out = []
        for link in story.links:
            reconciliation = reconciliations.get(link.reconciliation_id)
            shared = streams.get(link.shared_stream_key) if link.shared_stream_key else None
            out.append(StoryLinkOut.from_entity(
                link, reconciliation_name=reconciliation.name if reconciliation else "",
                shared_data_stream_id=link.shared_stream_id, shared_data_stream_name=shared.name if shared else None,
                side_a_streams=side(reconciliation.side_a_stream_keys) if reconciliation else [],
                side_b_streams=side(reconciliation.side_b_stream_keys) if reconciliation else []))
        return out

    return [StoryOut.from_entity(s, links=link_out(s)) for s in stories]


@router.route("POST", STORIES, summary="Create a reconciliation story: reconciliations chained in order",
              status=201, body=CreateStory, response=StoryOut, errors=(422,))
def create_story(request: ApiRequest) -> StoryOut:
    body: CreateStory = request.body
    story = service.create_story(container().ports, request.environment, name=body.name,
                                 links=link_inputs(body.links))
    return stories_out([story], request.environment)[0]


@router.route("GET", STORIES, summary="List reconciliation stories, newest first",
              query=CursorQuery, response=StoryPage, errors=(400, 422))
def list_stories(request: ApiRequest) -> StoryPage:
    query: CursorQuery = request.query
    page, cursor = container().ports.stories.list_page(request.environment, query.limit, query.cursor)
    return StoryPage(data=stories_out(page, request.environment), next_cursor=cursor, limit=query.limit)


@router.route("GET", STORIES + "/{id}", summary="Get a reconciliation story", response=StoryOut, errors=(404,))
def get_story(request: ApiRequest, id: str) -> StoryOut:
    story = container().ports.stories.get(request.environment, numeric_id(id, "reconciliation story"))
    return stories_out([story], request.environment)[0]


@router.route("GET", STORIES + "/{id}/trace", summary="Follow one record through the story's chain, link by link",
              query=StoryTraceQuery, response=StoryTraceOut, errors=(404, 422))
def trace_record(request: ApiRequest, id: str) -> StoryTraceOut:
    query: StoryTraceQuery = request.query
    trace = story_trace.trace_record(container().ports, request.environment, numeric_id(id, "reconciliation story"),
                                     query.record_id)
    return StoryTraceOut.model_validate(trace, from_attributes=True)


@router.route("PATCH", STORIES + "/{id}", summary="Rename a story, or replace its whole chain (links)",
              body=UpdateStory, response=StoryOut, errors=(404, 409, 422))
def update_story(request: ApiRequest, id: str) -> StoryOut:
    body: UpdateStory = request.body
    story = service.update_story(container().ports, request.environment, numeric_id(id, "reconciliation story"),
                                 name=body.name, links=link_inputs(body.links) if body.links is not None else None)
    return stories_out([story], request.environment)[0]


@router.route("DELETE", STORIES + "/{id}", summary="Delete a reconciliation story (its reconciliations stay)",
              status=204, errors=(404, 409))
def delete_story(request: ApiRequest, id: str) -> None:
    service.delete_story(container().ports, request.environment, numeric_id(id, "reconciliation story"))


@router.route("GET", STORIES + "/{id}/summary", summary="Where the chain leaks: each link's matched and unmatched "
              "money, open exceptions and last run, and what passed the previous link but not this one",
              response=StorySummaryOut, errors=(404,))
def summarize_story(request: ApiRequest, id: str) -> StorySummaryOut:
    environment = request.environment
    summary = story_summary.summarize_story(container().ports, environment, numeric_id(id, "reconciliation story"))
    links = stories_out([summary.story], environment)[0].links
    keys = {f.data_stream_key for s in summary.links for f in s.figures.streams} | {
        link.shared_stream_key for link in summary.story.links if link.shared_stream_key}
    streams = container().ports.data_streams.get_many(environment, keys)
    exceptions = exceptions_out(environment, [e for s in summary.links for e in s.exceptions])
    return StorySummaryOut(story_id=summary.story.id, name=summary.story.name, links=[
        _link_summary_out(s, out, streams, [e for e in exceptions if e.reconciliation_id == s.link.reconciliation_id])
        for s, out in zip(summary.links, links, strict=True)])


def _link_summary_out(summary: LinkSummary, link: StoryLinkOut, streams: dict[str, DataStream],
                      exceptions: list[ExceptionOut]) -> StoryLinkSummaryOut:
    figures = summary.figures

    def ref(key: str) -> StreamRefOut:
        stream = streams.get(key)
        return StreamRefOut(id=stream.id if stream else 0, name=stream.name if stream else key)

    from_previous = None
    if figures.from_previous is not None and summary.link.shared_stream_key:
        totals = _money(figures.from_previous, OpenMoneyOut)
        from_previous = FromPreviousLinkOut(
            data_stream=ref(summary.link.shared_stream_key), count=sum(t.count for t in totals), totals=totals,
            oldest_date=min((t.oldest_date for t in totals if t.oldest_date), default=None))
    return StoryLinkSummaryOut(
        link=link, computed_at=figures.computed_at, refresh_pending=summary.refresh_pending,
        side_a=SideFiguresOut(matched=_money(figures.side_a_matched, MoneyOut),
                              unmatched=_money(figures.side_a_unmatched, OpenMoneyOut)),
        side_b=SideFiguresOut(matched=_money(figures.side_b_matched, MoneyOut),
                              unmatched=_money(figures.side_b_unmatched, OpenMoneyOut)),
        data_streams=[StreamFiguresOut(data_stream=ref(s.data_stream_key), side=s.side,
                                       matched=_money(s.matched, MoneyOut), unmatched=_money(s.unmatched, OpenMoneyOut))
                      for s in figures.streams],
        open_exceptions=exceptions, last_run=RunOut.model_validate(summary.last_run) if summary.last_run else None,
        from_previous_link=from_previous)


M = TypeVar("M", bound=MoneyOut)


def _money(money: Money, model: type[M]) -> list[M]:
    """Money by currency as the API lists it, currencies in order."""
    return [model.model_validate(money[c], from_attributes=True) for c in sorted(money)]
