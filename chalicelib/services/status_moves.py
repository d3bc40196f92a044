"""The move of a status-table entity that several workers may try at once (redeliveries, the
sweeper, a cancel): whoever comes second gets the entity as the first left it."""
from __future__ import annotations

from enum import Enum
from typing import Protocol, TypeVar

from chalicelib.domain.errors import TransitionRefused
from chalicelib.domain.status_machine import Identified

E = TypeVar("E", bound=Identified)
S = TypeVar("S", bound=Enum)
S_contra = TypeVar("S_contra", bound=Enum, contravariant=True)


class Movable(Protocol[E, S_contra]):
    """A repository of entities that follow a status table (see adapters' StatusMoves)."""
    def move(self, entity: E, /, target: S_contra, **fields: object) -> E: ...
    def get(self, environment: str, entity_id: int, /) -> E: ...


def move_or_reload(repository: Movable[E, S], entity: E, target: S, **fields: object) -> E:
    """Move `entity` to `target`, setting `fields` with it; when its stored status refuses the
    move (another worker moved it first), the entity as stored."""
    try:
        return repository.move(entity, target, **fields)
    except TransitionRefused:
        return repository.get(entity.environment, entity.id)
