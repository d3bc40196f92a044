"""moto worlds built once per test process and restored for every test that asks for one.

Building a world through the API (streams, records ingested, a run) costs a test 1 to 12 s, and
provisioning the template 0.1 s; a copy of what moto holds is restored in about 0.02 s. A restored
world is a deep copy of moto's backends (every service the build touched: tables, objects, queues,
executions), so a test may change it freely: the next test gets the snapshot again, not the
changes. What is not in moto (the process's container, a clock a test sets) is not restored:
a cached build must leave nothing but AWS state behind and return plain values (ids, keys).
"""
from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

T = TypeVar("T")

# moto's backends hold locks and conditions (an SQS queue's); a copy gets fresh ones, as none is
# held between requests. A Condition is made anew: a copied one would keep its old lock's methods.
_FRESH_LOCKS: dict[type, Callable[[], Any]] = {type(threading.Lock()): threading.Lock,
                                              type(threading.RLock()): threading.RLock,
                                              threading.Condition: threading.Condition}


def _deepcopy_with_fresh_locks(value: Any, memo: dict[int, Any]) -> Any:
    dispatch = copy._deepcopy_dispatch  # type: ignore[attr-defined]
    added = [kind for kind in _FRESH_LOCKS if kind not in dispatch]
    for kind in added:
        dispatch[kind] = lambda _lock, _memo, make=_FRESH_LOCKS[kind]: make()
    try:
        return copy.deepcopy(value, memo)
    finally:
        for kind in added:
            del dispatch[kind]


class MotoSnapshot:
    """What the open moto holds now, kept apart from it (later requests do not change the copy)."""

    # A BackendDict's own attributes (S3's bucket_accounts: which account owns a bucket's name)
    # are world state too; these are its registry's.
    _REGISTRY_ATTRIBUTES = frozenset({"backend", "service_name", "_use_boto3_regions", "_additional_regions", "_id"})

    def __init__(self) -> None:
        from moto.core.base_backend import BackendDict

        backends = [(service, account, region, backend)
                    for service in BackendDict._instances
                    for account, by_region in service.items()
                    for region, backend in dict.items(by_region)]
        attributes = [(service, {name: value for name, value in vars(service).items()
                                 if name not in self._REGISTRY_ATTRIBUTES})
                      for service in BackendDict._instances]
        # The BackendDicts are moto's registry, shared by every world: never copied.
        self._registry = list(BackendDict._instances)
        with _untracked():
            self._backends, self._attributes = self._copy((backends, attributes))

    def _copy(self, state: Any) -> Any:
        return _deepcopy_with_fresh_locks(state, {id(service): service for service in self._registry})

    def restore(self) -> None:
        """The open moto holds what it held at the snapshot, and nothing else."""
        from moto.core.base_backend import BackendDict

        BackendDict.reset()
        backends, attributes = self._copy((self._backends, self._attributes))
        for service, account, region, backend in backends:
            dict.__setitem__(service[account], region, backend)
        for service, values in attributes:
            vars(service).update(values)


@contextmanager
def _untracked() -> Iterator[None]:
    """moto tracks every model it makes (BaseModel.__new__) and disposes of them all when it
    resets (an S3 object's buffer is closed): a snapshot's copies are kept out of that list."""
    from moto.core.model_instances import model_data

    models = [model for by_name in model_data.values() for model in by_name.values()]
    tracked = {model: len(model.instances_tracked) for model in models}
    try:
        yield
    finally:
        for model, count in tracked.items():
            del model.instances_tracked[count:]


class WorldCache:
    """Worlds by name, each built by the first test that asks and restored for the others."""

    def __init__(self) -> None:
        self._worlds: dict[str, tuple[MotoSnapshot, Any]] = {}

    def restore_or_build(self, name: str, build: Callable[[], T]) -> T:
        """`build()`'s value; the first call of a name runs it on the open moto and snapshots
        the world it leaves, later calls restore that world into the open moto instead."""
        if name in self._worlds:
            snapshot, value = self._worlds[name]
            snapshot.restore()
            return value
        value = build()
        self._worlds[name] = (MotoSnapshot(), value)
        return value


WORLDS = WorldCache()


def world_of_api(name: str, api: Any, build: Callable[[], T]) -> T:
    """`build()`'s value, its world built once a process through `api` (the tests' ApiClient) and
    restored after; `api` then uses the key the build's world holds."""
    key, value = WORLDS.restore_or_build(name, lambda: (api.key, build()))
    api.key = key
    return value


def dated(name: str) -> str:
    """A world's name for a build that dates records from today: a new world after midnight."""
    from chalicelib.domain.clock import utc_now

    return f"{name}:{utc_now().date().isoformat()}"
