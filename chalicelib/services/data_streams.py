"""Data stream use cases."""
from __future__ import annotations

from collections.abc import Iterator

from chalicelib.domain.clock import utc_now
from chalicelib.domain.data_streams import DataStream, StreamType, check_new_stream
from chalicelib.domain.errors import Conflict, ValidationFailed
from chalicelib.domain.ingestion import IngestionJob
from chalicelib.domain.reconciliations import StreamUser
from chalicelib.observability import logger
from chalicelib.services import audit
from chalicelib.services.matches import WRITING
from chalicelib.services.paging import every
from chalicelib.services.ports import DataStreams, Ports
from chalicelib.services.stories import confirm_unless_in_a_story

PAGE = 100  # imports or streams a listing reads at a time


def create_stream(streams: DataStreams, environment: str, *, key: str, name: str, type_: StreamType,
                  description: str | None = None, bank_account_id: str | None = None) -> DataStream:
    check_new_stream(key, type_, bank_account_id)
    stream = DataStream(
        environment=environment, id=streams.next_id(environment), key=key, name=name, type=type_,
        description=description, bank_account_id=bank_account_id, created_at=utc_now(),
    )
    streams.add(stream)
    return stream


def update_stream(streams: DataStreams, environment: str, key: str, *, name: str | None,
                  description: str | None, description_given: bool, requested_key: str | None = None,
                  requested_type: str | None = None, bank_account_id: str | None = None) -> DataStream:
    """Change name, description and bank account; key and type are immutable (accepted only when
    unchanged). A bank_feed's account is held by it alone (409 naming the stream that holds it)."""
    current = streams.get(environment, key)
    if requested_key is not None and requested_key != current.key:
        raise ValidationFailed.on("key", "is immutable")
    if requested_type is not None and requested_type != current.type.value:
        raise ValidationFailed.on("type", "is immutable")
    updated = current.renamed(name, description, description_given, bank_account_id)
    streams.save(updated, previous=current)
    audit.note_change(current, updated)
    return updated


def delete_stream(ports: Ports, environment: str, key: str) -> None:
    """Hide the stream at once, remove what belongs to it (records, property definitions, its
    part of the analytics mirror), then the stream itself. Refused (409) while a reconciliation
    uses it, a story's link shares it, or an import of it is not settled.

    A crash part-way leaves the stream marked `deleting` (invisible, its key still taken);
    repeating the DELETE finishes the work.
    """
    if ports.data_streams.find_including_deleting(environment, key) is None:
        ports.data_streams.get(environment, key)  # raises NotFound
    users = ports.reconciliations.users_of_stream(environment, key)
    if users:
        raise Conflict(f"data stream '{key}' is used by " + ", ".join(_reconciliation(u) for u in users)
                       + "; remove it from the reconciliation first")
    ports.data_streams.mark_deleting(environment, key)
    # An import at work would leave what it writes after the delete (records, mirror parts, a
    # statement's days) to show in a new stream of the same key: refused, by every delete that finds
    # it (two at once: both). Read after the mark, which an import submitted from then on finds; one
    # that read the stream just before it and links itself to it just after is not seen.
    if (job := _import_at_work(ports, environment, key)) is not None:
        ports.data_streams.unmark_deleting(environment, key)
        raise Conflict(f"data stream '{key}' has {_at_work(job)}; delete the stream once it has finished")
    # A story's save holds its shared streams before its last check: read its users after the mark.
    story_users = ports.stories.users_of_stream(environment, key)
    confirm_unless_in_a_story(ports.data_streams, environment, key, story_users, f"data stream '{key}'")
    ports.records.remove_all_of_stream(environment, key)
    ports.property_definitions.remove_all_of_stream(environment, key)
    ports.mirror.forget_stream(environment, key)
    ports.balances.remove_stream(environment, key)
    ports.reconciliations.remove_usages_of_stream(environment, key)  # stale ones, left by crashed writes
    ports.data_streams.remove(environment, key)


def imports_of_stream(ports: Ports, environment: str, key: str) -> Iterator[IngestionJob]:
    """Every import of the stream (file imports, and bulk requests linked to it), newest first, as
    the listing (an index) has them, a page read as the caller gets to it."""
    return every(lambda cursor: ports.ingestion_jobs.list_of_stream(environment, key, PAGE, cursor))


def live_stream_keys(ports: Ports, environment: str) -> Iterator[str]:
    """The keys of the environment's streams not being deleted, a page read as the caller gets to it."""
    streams = every(lambda cursor: ports.data_streams.list_page(environment, PAGE, cursor))
    return (stream.key for stream in streams if not stream.deleting)


def _import_at_work(ports: Ports, environment: str, key: str) -> IngestionJob | None:
    """An import of the stream that may still write (not settled), read again (the listing is an index)."""
    for listed in imports_of_stream(ports, environment, key):
        if not listed.settled and not (job := ports.ingestion_jobs.get(environment, listed.id)).settled:
            return job
    return None


def _at_work(job: IngestionJob) -> str:
    if not job.is_file:
        return f"bulk request {job.id} still writing into it ({job.status.value})"
    if job.status in WRITING:
        return (f"file import {job.id} still writing into it ({job.status.value}: it may be cancelled, "
                f"POST /v1/file_imports/{job.id}/cancel)")
    return f"file import {job.id} still writing into it ({job.status.value}, being settled)"


def _reconciliation(user: StreamUser) -> str:
    return f"reconciliation {user.reconciliation_id}" + (f" ('{user.name}')" if user.name else " (being created)")


def recount_records(ports: Ports, environment: str, key: str) -> None:
    """Read the stream's `records_count` from the analytics mirror, as the spec says it is.

    The request is stored first, so a recount cut short is finished by the sweeper; a request
    made while this one reads (a delete) outlives it.
    """
    counted_at = utc_now()
    ports.data_streams.request_recount(environment, key, counted_at)
    ports.data_streams.set_records_count(environment, key, ports.mirror.count_records(environment, key), counted_at)
    ports.data_streams.clear_recount_request(environment, key, counted_at)


def sweep_recounts(ports: Ports) -> int:
    """Recount every stream waiting for it (deletes ask for one); one failure stops no other."""
    done = 0
    for environment, key in ports.data_streams.recount_requests():
        try:
            recount_records(ports, environment, key)
            done += 1
        except Exception:
            logger.exception("recounting a stream failed", extra={"environment": environment, "stream": key})
    return done
