"""Reconciliation stories in DynamoDB, with the usage items that keep what they chain.

- A usage item per reconciliation of a story (in the reconciliation's partition) and per shared
  stream (in the stream's partition) keeps them from being deleted. The service writes them
  (`hold`) before it reads what they hold a last time and then writes the story; a delete of a
  reconciliation or stream marks it `deleting` first and reads the usages after. Whichever
  comes second sees the other, so no story is left with a link to something deleted.
- A usage carries the story version it was written for, so an edit removes only what no later
  edit re-added. Links are stored inside the story item; names are never copied into it.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from chalicelib.adapters.dynamodb import keys
from chalicelib.adapters.dynamodb.counters import Counters
from chalicelib.adapters.dynamodb.table import ConditionFailed, DynamoTable
from chalicelib.domain.clock import iso, parse_iso, utc_now
from chalicelib.domain.data_streams import KEY_PATTERN
from chalicelib.domain.errors import Conflict, NotFound
from chalicelib.domain.stories import LinkRole, Story, StoryLink, StoryUser, usage_holds


class StoryRepository:
    def __init__(self, table: DynamoTable, counters: Counters) -> None:
        self._table = table
        self._counters = counters

    def next_id(self, environment: str) -> int:
        return self._counters.next_id(environment, "story")

    def next_link_ids(self, environment: str, count: int) -> range:
        return self._counters.next_ids(environment, "story_link", count)

    def hold(self, story: Story) -> None:
        """Write the usage items of every reconciliation and shared stream of `story` (at its
        version; one already written by a later version stays as it is)."""
        for usage in self._usage_keys(story):
            try:
                self._table.put(self._usage_item(story, usage), condition="attribute_not_exists(pk) OR #v <= :v",
                                names={"#v": "version"}, values={":v": story.version})
            except ConditionFailed:
                pass  # a later edit wrote it already

    def release(self, story: Story, keep: Story | None = None) -> None:
        """Remove the usages `story` wrote that `keep` (the stored story, if any) does not need."""
        needed = {(u["pk"], u["sk"]) for u in self._usage_keys(keep)} if keep else set()
        for usage in self._usage_keys(story):
            if (usage["pk"], usage["sk"]) in needed:
                continue
            try:
                self._table.delete(usage, condition="#v <= :v", names={"#v": "version"},
                                   values={":v": story.version})
            except ConditionFailed:
                pass  # gone already, or re-written by a later edit

    def add(self, story: Story) -> None:
        """The story itself (its usages are held first)."""
        self._table.put_new(self._to_item(story))

    def get(self, environment: str, story_id: int) -> Story:
        item = self._table.get(keys.story(environment, story_id))
        if item is None:
            raise NotFound(f"reconciliation story {story_id} not found")
        return self._from_item(item)

    def list_page(self, environment: str, limit: int, cursor: str | None) -> tuple[list[Story], str | None]:
        page = self._table.query_page(keys.GSI1, keys.stories_index_pk(environment), limit=limit, cursor=cursor)
        return [self._from_item(i) for i in page.items], page.cursor

    def save(self, updated: Story, previous: Story) -> None:
        """Write an edit (`updated.version` one past the stored one; its usages held first), then
        remove the usages only `previous` needed."""
        try:
            self._table.update(
                keys.story(updated.environment, updated.id),
                "SET #name = :name, links = :links, updated_at = :updated_at, #v = :version",
                condition="attribute_exists(pk) AND #v = :expected",
                names={"#v": "version", "#name": "name"},
                values={":name": updated.name, ":links": [self._link_item(link) for link in updated.links],
                        ":updated_at": iso(updated.updated_at), ":version": updated.version,
                        ":expected": updated.version - 1},
            )
        except ConditionFailed:
            if self._table.get(keys.story(updated.environment, updated.id)) is None:
                raise NotFound(f"reconciliation story {updated.id} not found") from None
            raise Conflict(f"reconciliation story {updated.id} changed while it was being updated; retry") from None
        self.release(previous, keep=updated)

    def remove(self, story: Story) -> None:
        """The story first, its usages after, so a crash never frees what a story still uses. The
        delete holds only while the story is stored at `story.version`: the usages released are
        then those of the story deleted, not of a copy an edit replaced meanwhile (Conflict: read
        it again and retry)."""
        condition = "attribute_exists(pk) AND #v = :v"
        if story.version == 1:  # an item written before stories had versions reads as version 1
            condition = "attribute_exists(pk) AND (#v = :v OR attribute_not_exists(#v))"
        try:
            self._table.delete(keys.story(story.environment, story.id), condition=condition,
                               names={"#v": "version"}, values={":v": story.version})
        except ConditionFailed:
            if self._table.get(keys.story(story.environment, story.id)) is None:
                raise NotFound(f"reconciliation story {story.id} not found") from None
            raise Conflict(f"reconciliation story {story.id} changed while it was being deleted; retry") from None
        self._table.batch_write(deletes=self._usage_keys(story))

    # Users (read when a reconciliation or a data stream is deleted) ----------------------

    def users_of_reconciliation(self, environment: str, reconciliation_id: int) -> list[StoryUser]:
        """The stories that hold the reconciliation; stale usages (see usage_holds) are left out.
        Read consistently: a usage held a moment before the delete's mark must be seen."""
        usages = self._table.query_all(keys.BASE_TABLE, keys.reconciliation(environment, reconciliation_id)["pk"],
                                       sort_prefix=keys.STORY_USAGE_PREFIX, consistent=True)
        return self._users(environment, usages, lambda s: s.uses_reconciliation(reconciliation_id))

    def users_of_stream(self, environment: str, stream_key: str) -> list[StoryUser]:
        """The stories whose links share the stream; stale usages are left out."""
        if not KEY_PATTERN.match(stream_key):
            return []
        usages = self._table.query_all(keys.BASE_TABLE, keys.data_stream(environment, stream_key)["pk"],
                                       sort_prefix=keys.STORY_USAGE_PREFIX, consistent=True)
        return self._users(environment, usages, lambda s: s.shares_stream(stream_key))

    def _users(self, environment: str, usages: Iterable[dict[str, Any]], uses) -> list[StoryUser]:
        usages = list(usages)
        if not usages:
            return []
        items = self._table.get_many(keys.story(environment, u["story_id"]) for u in usages)
        stories = {s.id: s for s in map(self._from_item, items)}
        now = utc_now()
        users = []
        for usage in usages:
            story = stories.get(usage["story_id"])
            if usage_holds(story, story is not None and uses(story), parse_iso(usage["created_at"]), now):
                users.append(StoryUser(usage["story_id"], story.name if story else None))
        return users

    @staticmethod
    def _usage_keys(story: Story) -> list[dict[str, str]]:
        return ([keys.story_usage_of_reconciliation(story.environment, r, story.id) for r in story.reconciliation_ids]
                + [keys.story_usage_of_stream(story.environment, k, story.id) for k in story.shared_stream_keys])

    @staticmethod
    def _usage_item(story: Story, usage_key: dict[str, str]) -> dict[str, Any]:
        return {**usage_key, "entity": "story_usage", "environment": story.environment, "story_id": story.id,
                "version": story.version, "created_at": iso(utc_now())}

    @staticmethod
    def _link_item(link: StoryLink) -> dict[str, Any]:
        return {"id": link.id, "position": link.position, "role": link.role.value,
                "reconciliation_id": link.reconciliation_id, "shared_stream_key": link.shared_stream_key,
                "shared_stream_id": link.shared_stream_id}

    @classmethod
    def _to_item(cls, story: Story) -> dict[str, Any]:
        return {
            **keys.story(story.environment, story.id), **keys.story_index(story.environment, story.id),
            "entity": "story", "environment": story.environment, "id": story.id, "name": story.name,
            "links": [cls._link_item(link) for link in story.links], "created_at": iso(story.created_at),
            "updated_at": iso(story.updated_at), "version": story.version,
        }

    @staticmethod
    def _from_item(item: dict[str, Any]) -> Story:
        links = tuple(
            StoryLink(id=int(link["id"]), position=int(link["position"]), role=LinkRole(link["role"]),
                      reconciliation_id=int(link["reconciliation_id"]), shared_stream_key=link.get("shared_stream_key"),
                      shared_stream_id=int(link["shared_stream_id"]) if link.get("shared_stream_id") is not None
                      else None)
            for link in item["links"])
        return Story(environment=item["environment"], id=int(item["id"]), name=item["name"],
                     links=tuple(sorted(links, key=lambda link: link.position)),
                     created_at=parse_iso(item["created_at"]), updated_at=parse_iso(item["updated_at"]),
                     version=int(item.get("version", 1)))
