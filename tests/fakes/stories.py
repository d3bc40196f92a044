"""Reconciliation stories with their usage items, as `adapters/dynamodb/stories.py` keeps them."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime

from chalicelib.domain.clock import utc_now
from chalicelib.domain.data_streams import KEY_PATTERN
from chalicelib.domain.errors import Conflict, NotFound
from chalicelib.domain.stories import Story, StoryUser, usage_holds
from tests.fakes._support import ConditionFailed, newest_first_page, padded, stored_time
from tests.fakes.counters import FakeCounters

# A usage's key: (environment, "recon" or "stream", the reconciliation id or stream key, story id).
UsageKey = tuple[str, str, object, int]


@dataclass
class _Usage:
    version: int
    created_at: datetime


class FakeStoryRepository:
    def __init__(self, counters: FakeCounters | None = None) -> None:
        self._counters = counters or FakeCounters()
        self.stories: dict[tuple[str, int], Story] = {}
        self.usages: dict[UsageKey, _Usage] = {}

    def next_id(self, environment: str) -> int:
        return self._counters.next_id(environment, "story")

    def next_link_ids(self, environment: str, count: int) -> range:
        return self._counters.next_ids(environment, "story_link", count)

    def hold(self, story: Story) -> None:
        for key in self._usage_keys(story):
            existing = self.usages.get(key)
            if existing is None or existing.version <= story.version:
                self.usages[key] = _Usage(story.version, stored_time(utc_now()))

    def release(self, story: Story, keep: Story | None = None) -> None:
        needed = set(self._usage_keys(keep)) if keep else set()
        for key in self._usage_keys(story):
            existing = self.usages.get(key)
            if key not in needed and existing is not None and existing.version <= story.version:
                del self.usages[key]

    def add(self, story: Story) -> None:
        key = (story.environment, story.id)
        if key in self.stories:
            raise ConditionFailed()
        self.stories[key] = self._stored(story)

    def get(self, environment: str, story_id: int) -> Story:
        story = self.stories.get((environment, story_id))
        if story is None:
            raise NotFound(f"reconciliation story {story_id} not found")
        return story

    def list_page(self, environment: str, limit: int, cursor: str | None) -> tuple[list[Story], str | None]:
        entries = [(padded(s.id), s) for (env, _), s in self.stories.items() if env == environment]
        return newest_first_page(f"stories:{environment}", entries, limit, cursor)

    def save(self, updated: Story, previous: Story) -> None:
        stored = self.stories.get((updated.environment, updated.id))
        if stored is None:
            raise NotFound(f"reconciliation story {updated.id} not found")
        if stored.version != updated.version - 1:
            raise Conflict(f"reconciliation story {updated.id} changed while it was being updated; retry")
        self.stories[(updated.environment, updated.id)] = replace(
            self._stored(updated), created_at=stored.created_at)
        self.release(previous, keep=updated)

    def remove(self, story: Story) -> None:
        stored = self.stories.get((story.environment, story.id))
        if stored is None:
            raise NotFound(f"reconciliation story {story.id} not found")
        if stored.version != story.version:
            raise Conflict(f"reconciliation story {story.id} changed while it was being deleted; retry")
        del self.stories[(story.environment, story.id)]
        for key in self._usage_keys(story):
            self.usages.pop(key, None)

    def users_of_reconciliation(self, environment: str, reconciliation_id: int) -> list[StoryUser]:
        return self._users(environment, "recon", reconciliation_id, lambda s: s.uses_reconciliation(reconciliation_id))

    def users_of_stream(self, environment: str, stream_key: str) -> list[StoryUser]:
        if not KEY_PATTERN.match(stream_key):
            return []
        return self._users(environment, "stream", stream_key, lambda s: s.shares_stream(stream_key))

    def _users(self, environment: str, kind: str, held: object, uses: Callable[[Story], bool]) -> list[StoryUser]:
        now = utc_now()
        users = []
        for (env, usage_kind, usage_held, story_id), usage in sorted(self.usages.items(), key=lambda i: i[0][3]):
            if (env, usage_kind, usage_held) != (environment, kind, held):
                continue
            story = self.stories.get((environment, story_id))
            if usage_holds(story, story is not None and uses(story), usage.created_at, now):
                users.append(StoryUser(story_id, story.name if story else None))
        return users

    @staticmethod
    def _usage_keys(story: Story) -> list[UsageKey]:
        return ([(story.environment, "recon", r, story.id) for r in story.reconciliation_ids]
                + [(story.environment, "stream", k, story.id) for k in story.shared_stream_keys])

    @staticmethod
    def _stored(story: Story) -> Story:
        return replace(story, created_at=stored_time(story.created_at), updated_at=stored_time(story.updated_at),
                       links=tuple(sorted(story.links, key=lambda link: link.position)))
