"""Where the records of a stream made before the changed blocks changed, found once, so that a run
reads it from the analytics mirror but for those blocks (services/imported_records.py), as it
reads a stream made since.

Such a stream has no `changes_noted`: its changes were never noted as blocks, so once one of its
records changed, runs read it from the table whole. Finding its blocks takes three steps:

1. the stream is marked `changes_noting`; every change from then on notes its block
   (`DataStreams.note_records_changed`, which reads the mark once a call);
2. once every call that read the stream before the mark has ended (a function runs at most 15
   minutes: WRITES_END_WITHIN), whatever changed without noting is in the table, and the blocks
   where the table and the mirror disagree are found: a record no longer as its import wrote it
   (claimed, reconciled, held, allocated, being deleted), an id the mirror has and the table not (a
   deleted record), one the table has and the mirror not (a late write);
3. those blocks are noted and the mark becomes `changes_noted` (`finish_noting_changes`).

A stream with an import still writing, or ended early and not settled, waits for a later pass (the
mirror does not hold all its records yet); one holding records of no import it lists stays on the
table for good (a run reading the mirror reads the table only within its imports' spans). Only a
stage where every function notes the changes of a marked stream may run this (cli.py checks the
deployed functions' RECON_NOTE_CHANGED_BLOCKS; docs/upgrades.md).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from chalicelib.domain.clock import utc_now
from chalicelib.domain.ingestion import IngestionJob
from chalicelib.domain.record_changes import Held, blocks_between, change_blocks, outside_spans
from chalicelib.observability import logger
from chalicelib.services.data_streams import live_stream_keys
from chalicelib.services.imported_records import import_spans, imports_held
from chalicelib.services.ports import Ports

# A change reads the stream's mark, then writes; the function doing both ends within Lambda's 15
# minutes, and a minute more covers the clocks and the index's lag.
WRITES_END_WITHIN = timedelta(minutes=16)


@dataclass
class ChangesNoted:
    noted: list[tuple[str, str]] = field(default_factory=list)  # (environment, stream key)
    blocks: int = 0
    waiting: list[tuple[str, str, str]] = field(default_factory=list)  # (environment, stream key, why not)
    failed: list[tuple[str, str, str]] = field(default_factory=list)  # (environment, stream key, the error)

    def describe(self) -> str:
        text = f"noted the changes of {len(self.noted)} data stream(s) ({self.blocks} block(s) changed)"
        for what, streams in (("not", self.waiting), ("failed", self.failed)):
            if streams:
                named = "; ".join(f"{env}/{key}: {why}" for env, key, why in streams)
                text += f"; {len(streams)} {what} ({named})"
        if self.waiting or self.failed:
            text += ": a stream still marked is read from the table; run this again later"
        return text


def note_past_changes(ports: Ports, environments: list[str], wait: Callable[[float], None],
                      progress: Callable[[str], None], now: Callable[[], datetime] = utc_now) -> ChangesNoted:
    """Every stream of these environments whose changes are not noted gets its blocks (above)."""
    began = {(env, key): at for env in environments for key in list(live_stream_keys(ports, env))
             if (at := ports.data_streams.begin_noting_changes(env, key, now())) is not None}
    outcome = ChangesNoted()
    if not began:
        return outcome
    ready = max(began.values()) + WRITES_END_WITHIN
    while (left := (ready - now()).total_seconds()) > 0:
        progress(f"{len(began)} data stream(s) marked; the changes begun before the marks end within "
                 f"{left / 60:.0f} minute(s)")
        wait(min(left, 60))
    for (env, key), at in sorted(began.items()):
        try:
            said = _note(ports, env, key, at, outcome)
        except Exception as error:  # (an import's object gone under a mirror rebuild, say): the others go on
            logger.exception("noting a stream's changed blocks failed", extra={"environment": env,
                                                                               "data_stream_key": key})
            said = f"failed ({type(error).__name__}: {error})"
            outcome.failed.append((env, key, said))
        progress(f"{env}/{key}: {said}")
    return outcome


def _note(ports: Ports, environment: str, stream_key: str, began: datetime, outcome: ChangesNoted) -> str:
    """Find and trust one stream's blocks; what became of it, in a few words."""
    blocks = changed_blocks(ports, environment, stream_key)
    if isinstance(blocks, str):
        outcome.waiting.append((environment, stream_key, blocks))
        return blocks
    if not ports.data_streams.finish_noting_changes(environment, stream_key, began, blocks):
        outcome.waiting.append((environment, stream_key, "deleted, or being deleted, meanwhile"))
        return "deleted, or being deleted, meanwhile"
    outcome.noted.append((environment, stream_key))
    outcome.blocks += len(blocks)
    return f"{len(blocks)} block(s)"


def changed_blocks(ports: Ports, environment: str, stream_key: str) -> set[int] | str:
    """The blocks where the stream's records in the table are not those of its imports' rows in the
    mirror; or why they cannot be told now (an import still writes) or at all."""
    if _writing(imports_held(ports, environment, stream_key)):  # (before the table's read: it takes a while)
        return WRITING
    from chalicelib.domain.matching.frames import row_ids  # polars: only the engine's functions have it

    every, changed = ports.records.ids_since_import(environment, stream_key)
    imports = imports_held(ports, environment, stream_key)  # again: every record read is of an import begun by now
    if imports is None or _writing(imports):
        return WRITING
    if strays := outside_spans(every, import_spans(imports)):  # (a bulk request of a release before stream links, say)
        return f"{len(strays)} record(s) of no listed import, such as {strays[0]}: left to the table"
    mirrored: set[int] = set()
    blocks = change_blocks(changed)
    for job, held in imports:
        if held is not Held.MIRRORED:
            continue
        rows = ports.mirror.import_rows(environment, stream_key, job.id)
        if rows is not None:
            mirrored |= row_ids(rows)
        elif (ids := job.record_ids) is not None:  # not in the mirror: no run reads it from there anyway
            blocks.update(blocks_between(ids.start, ids.stop - 1))
    return blocks | change_blocks(every ^ mirrored)


WRITING = "an import still writes (or ended early, not settled yet)"


def _writing(imports: list[tuple[IngestionJob, Held]] | None) -> bool:
    return imports is None or any(held is Held.WRITING for _, held in imports)
