"""Bodies and answers of the bulk actions: POST /reconciliation_exceptions/bulk,
POST /reconciliation_matches/bulk and GET /bulk_actions/{id}."""
from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, StringConstraints

from chalicelib.api.schemas.common import CursorQuery, Id, Model, QueryModel, RequestModel, Timestamp, documented, when
from chalicelib.api.schemas.reconciliation_exceptions import ExceptionsFilter
from chalicelib.domain.bulk_actions import MAX_FILTERED, MAX_IDS

IdpUserId = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=200)]
IDS = Field(default=None, min_length=1, max_length=MAX_IDS, description=f"1 to {MAX_IDS} ids, none repeated; or "
            "give `filter`", json_schema_extra=documented(uniqueItems=True))
_GIVEN = {"ids": {"type": "array"}, "filter": {"type": "object"}}  # null is not given
IDS_OR_FILTER: dict[str, Any] = {
    "anyOf": [{"required": ["ids"], "properties": {"ids": _GIVEN["ids"]}},
              {"required": ["filter"], "properties": {"filter": _GIVEN["filter"]}}],
    "not": {"required": ["ids", "filter"], "properties": _GIVEN}}


def _action_is(action: str) -> dict[str, Any]:
    return {"properties": {"action": {"const": action}}, "required": ["action"]}


EXCEPTION_RULES = documented(**IDS_OR_FILTER, allOf=[
    when(_action_is("assign"), {"anyOf": [{"required": ["user_id"]}, {"required": ["idp_user_id"]}]}),
    when(_action_is("status"), {"required": ["status"]}),
    when(_action_is("comment"), {"required": ["body"]})])


class BulkExceptionsFilter(ExceptionsFilter):
    """The exception queue's filters (GET /reconciliation_exceptions), without its order and paging;
    a field it does not take is 422 (a mistyped filter must never select everything)."""
    model_config = ConfigDict(extra="forbid")


class BulkMatchesFilter(QueryModel):
    """The match list's filters (GET /reconciliation_matches): the proposed matches of a reconciliation."""
    model_config = ConfigDict(extra="forbid")
    reconciliation_id: Id
    status: Literal["proposed"] = Field(default="proposed", description="Only proposed matches are confirmed or "
                                        "rejected")


class BulkExceptionsBody(RequestModel):
    """One action on many exceptions, named by `ids` or selected by `filter` (at most
    {cap} of them). `assign` takes `user_id` or `idp_user_id`; `status` takes `status`; `comment`
    takes `body`, `mentions` and, with an API key, `author_idp_id`.""".replace("{cap}", str(MAX_FILTERED))
    model_config = ConfigDict(json_schema_extra=EXCEPTION_RULES)
    action: Literal["assign", "status", "comment"]
    ids: list[Id] | None = IDS
    filter: BulkExceptionsFilter | None = Field(default=None, description="The queue's filters; the exceptions "
                                                "they select when the request is made")
    user_id: Id | None = Field(default=None, description="assign: the user to assign")
    idp_user_id: IdpUserId | None = Field(default=None, description="assign: or the user's id with the provider")
    status: Literal["open", "investigating", "dismissed", "resolved"] | None = Field(
        default=None, description="status: the status to move each exception to")
    body: Annotated[str, StringConstraints(min_length=1, max_length=10_000)] | None = Field(
        default=None, description="comment: the comment's text")
    author_idp_id: IdpUserId | None = Field(default=None, description="comment, with an API key: the idp_user_id "
                                            "of the active user who writes it. A signed-in person is the author")
    mentions: list[Id] = Field(default_factory=list, max_length=100, description="comment: ids of active users")


class BulkMatchesBody(RequestModel):
    """Confirm or reject many proposed matches, named by `ids` or selected by `filter` (at most
    {cap}). Reject unmatches a proposed match: its records are open again.""".replace("{cap}", str(MAX_FILTERED))
    model_config = ConfigDict(json_schema_extra=documented(**IDS_OR_FILTER))
    action: Literal["confirm", "reject"]
    ids: list[Id] | None = IDS
    filter: BulkMatchesFilter | None = None


class BulkItemResultOut(Model):
    index: int = Field(description="The item's place among the action's items (0-based)")
    id: int = Field(description="The exception's or match's id")
    status: Literal["succeeded", "failed", "skipped"] = Field(description="skipped: nothing to do, the item was "
                                                                           "already so")
    error: str | None = Field(description="Why the item failed or was skipped")


class BulkActionOut(Model):
    id: int
    url: str
    target: Literal["reconciliation_exception", "reconciliation_match"]
    action: Literal["assign", "status", "comment", "confirm", "reject"]
    status: Literal["pending", "processing", "completed", "failed"]
    params: dict[str, Any] = Field(description="The action's own fields, as given (the assignee, the status, the "
                                               "comment)")
    selection: dict[str, Any] = Field(description='What was asked: {"ids": n} or {"filter": {...}}')
    total_items: int
    processed_items: int
    succeeded_items: int
    failed_items: int
    skipped_items: int
    progress: int = Field(ge=0, le=100)
    actor: str = Field(description="Who asked: each item's audit entry and events name them")
    error: str | None
    created_at: Timestamp
    started_at: Timestamp | None
    completed_at: Timestamp | None


class BulkActionDetailOut(BulkActionOut):
    results: list[BulkItemResultOut] = Field(description="A page of the items' results, in item order (only items "
                                                         "worked so far have one)")
    next_cursor: str | None = Field(description="Pass as `cursor` for the next page of results; null at the end")


class BulkActionQuery(CursorQuery):
    limit: int = Field(default=1000, ge=1, le=1000, description="Results per page")
