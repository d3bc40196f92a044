"""Routes of /reconciliation_stories."""
from __future__ import annotations

from chalicelib.api.routing import ApiRequest, Router, numeric_id
from chalicelib.api.schemas import (
    CreateStory,
    CursorQuery,
    StoryLinkIn,
    StoryLinkOut,
    StoryOut,
    StoryPage,
    StoryTraceOut,
    StoryTraceQuery,
    StreamRefOut,
    UpdateStory,
)
from chalicelib.container import container
from chalicelib.domain.stories import LinkInput, LinkRole, Story
from chalicelib.services import stories as service
from chalicelib.services import story_trace

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
    wanted = {i for s in stories for i in s.reconciliation_ids}
    reconciliations = ports.reconciliations.visible(environment, wanted)
    for missing in wanted - set(reconciliations):  # a delete refused a moment ago may still hide it
        found = ports.reconciliations.find_including_deleting(environment, missing)
        if found is not None:
            reconciliations[missing] = found
    stream_keys = {k for r in reconciliations.values() for k in r.stream_keys} | {
        k for s in stories for k in s.shared_stream_keys}
    streams = ports.data_streams.get_many(environment, stream_keys)
    for key in stream_keys - set(streams):
        stream = ports.data_streams.find_including_deleting(environment, key)
        if stream is not None:
            streams[key] = stream

    def side(keys: tuple[str, ...]) -> list[StreamRefOut]:
        return [StreamRefOut(id=streams[k].id, name=streams[k].name) for k in keys if k in streams]

    def link_out(story: Story) -> list[StoryLinkOut]:
        out = []
        for link in story.links:
            reconciliation = reconciliations.get(link.reconciliation_id)
            shared = streams.get(link.shared_stream_key) if link.shared_stream_key else None
            out.append(StoryLinkOut(
                id=link.id, position=link.position, role=link.role.value, reconciliation_id=link.reconciliation_id,
                reconciliation_name=reconciliation.name if reconciliation else "",
                shared_data_stream_id=link.shared_stream_id, shared_data_stream_name=shared.name if shared else None,
                side_a_streams=side(reconciliation.side_a_stream_keys) if reconciliation else [],
                side_b_streams=side(reconciliation.side_b_stream_keys) if reconciliation else []))
        return out

    return [StoryOut(id=s.id, name=s.name, created_at=s.created_at, links=link_out(s)) for s in stories]


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
              status=204, errors=(404,))
def delete_story(request: ApiRequest, id: str) -> None:
    service.delete_story(container().ports, request.environment, numeric_id(id, "reconciliation story"))
