"""A status table: the moves allowed between the statuses of one kind of entity (ingestion jobs,
runs, investigations, exceptions). Each entity declares its table once, in its own module; the
repositories turn a move into a conditional write whose allowed "from" statuses are
`sources_of(target)`, so the rule lives in the domain."""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from enum import Enum
from typing import Generic, Protocol, TypeVar

S = TypeVar("S", bound=Enum)


class StatusMachine(Generic[S]):
    """Built from `{source: targets}`. A status with no entry (or no targets) has no way out: it is
    finished."""

    def __init__(self, moves: Mapping[S, Iterable[S]]) -> None:
        statuses = type(next(iter(moves)))
        self.statuses: tuple[S, ...] = tuple(statuses)
        self.moves: dict[S, frozenset[S]] = {s: frozenset(moves.get(s, ())) for s in self.statuses}
        self.finished: frozenset[S] = frozenset(s for s, targets in self.moves.items() if not targets)

    def can_move(self, source: S, target: S) -> bool:
        return target in self.moves[source]

    def sources_of(self, target: S) -> tuple[S, ...]:
        """The statuses an entity may be in to move to `target`, in the order of the statuses."""
        return tuple(s for s, targets in self.moves.items() if target in targets)


class Identified(Protocol):
    """An entity of a status table as its repository finds it again: by environment and id."""
    @property
    def environment(self) -> str: ...
    @property
    def id(self) -> int: ...
