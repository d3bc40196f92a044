"""What `make deploy` and `make destroy` keep in the account beside a stage's stacks, in the stage's
artifacts bucket (infra/artifacts.yaml): Chalice's record of what it deployed, and the lock that lets
one deploy or destroy at a time work on the stage. With both in the account, any checkout or CI runner
deploys, upgrades and destroys a stage as well as the one that deployed it first.

- `deploy/chalice/<stage>.json`: `.chalice/deployed/<stage>.json`, what Chalice made (the REST API's id,
  each queue's event source mapping, each function's ARN). Chalice finds its functions by name, but its
  API and its queue mappings only through this record: a deploy without it makes a second API (a new
  URL) and a second mapping per queue, and a `chalice delete` without it deletes nothing. `make deploy`
  reads it before Chalice runs and writes it back after, whether Chalice succeeded or not (what a failed
  run made is recorded too: infra/chalice_run.py); `make destroy` reads it first.
- `deploy/lock.json`: who deploys or destroys the stage right now, and since when. Taken with a
  conditional write (S3 writes it only if no object has that key: `If-None-Match: *`), released with a
  conditional delete (only if it is still the object written: `If-Match: <its ETag>`), so that a lock
  broken by hand and taken by another deploy is never released by the first.
"""
from __future__ import annotations

import contextlib
import getpass
import json
import os
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

LOCK_KEY = "deploy/lock.json"


def state_key(stage: str) -> str:
    return f"deploy/chalice/{stage}.json"


def _code(error) -> str:
    return str(getattr(error, "response", {}).get("Error", {}).get("Code", ""))


# --- the lock -------------------------------------------------------------------------------------

class StageLocked(RuntimeError):
    """Another deploy or destroy holds the stage's lock."""


@dataclass(frozen=True)
class Lock:
    bucket: str
    etag: str
    holder: dict


def holder(stage: str, command: str, identity: str) -> dict:
    """What the lock says of its holder: enough for whoever finds it to know who to ask, or that it is stale."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = os.environ.get("USER", "unknown")
    return {"stage": stage, "command": command, "identity": identity, "user": user, "host": socket.gethostname(),
            "pid": os.getpid(), "since": datetime.now(UTC).isoformat(timespec="seconds")}


def describe(held: dict, now: datetime | None = None) -> str:
    """`make deploy by <identity> (<user>@<host>, pid <pid>) since <time> (<age> ago)`."""
    since = held.get("since", "")
    age = ""
    try:
        seconds = int(((now or datetime.now(UTC)) - datetime.fromisoformat(since)).total_seconds())
        age = f" ({_duration(seconds)} ago)"
    except (TypeError, ValueError):
        pass
    return (f"{held.get('command', 'a deploy')} by {held.get('identity', 'an unknown identity')} "
            f"({held.get('user', '?')}@{held.get('host', '?')}, pid {held.get('pid', '?')}) since {since or '?'}{age}")


def _duration(seconds: int) -> str:
    if seconds < 120:
        return f"{max(seconds, 0)} s"
    if seconds < 7200:
        return f"{seconds // 60} min"
    if seconds < 172800:
        return f"{seconds // 3600} h"
    return f"{seconds // 86400} days"


def locked_message(stage: str, held: dict | None) -> str:
    who = describe(held) if held else "another deploy or destroy (its lock was released as this one looked)"
    return (f"stage {stage} is locked: {who}. Two deploys at once would each change the stacks and the app under "
            f"the other. Wait for it to end; if it is not running any more (killed, or its machine gone), break "
            f"the lock: make deploy-unlock STAGE={stage}")


def read_lock(s3, bucket: str) -> dict | None:
    try:
        return json.loads(s3.get_object(Bucket=bucket, Key=LOCK_KEY)["Body"].read())
    except s3.exceptions.ClientError as error:
        if _code(error) in ("NoSuchKey", "404"):
            return None
        raise
    except ValueError:
        return {"command": "an unreadable lock"}


def acquire(s3, bucket: str, held: dict) -> Lock:
    """Take the stage's lock, or raise StageLocked naming who holds it."""
    try:
        answer = s3.put_object(Bucket=bucket, Key=LOCK_KEY, Body=json.dumps(held, indent=1).encode(),
                               ContentType="application/json", IfNoneMatch="*")
    except s3.exceptions.ClientError as error:
        # 412 when the object exists; 409 when another conditional write of that key is under way.
        if _code(error) in ("PreconditionFailed", "ConditionalRequestConflict", "412", "409"):
            raise StageLocked(locked_message(held["stage"], read_lock(s3, bucket))) from None
        raise
    return Lock(bucket, answer["ETag"], held)


def release(s3, lock: Lock, log: Callable[[str], None] = print) -> None:
    """Delete the lock if it is still the one `acquire` wrote. Gone already (`make destroy` deletes the
    bucket with it) is released; another one (broken by hand, then taken) is left to its holder."""
    try:
        s3.delete_object(Bucket=lock.bucket, Key=LOCK_KEY, IfMatch=lock.etag)
    except s3.exceptions.ClientError as error:
        code = _code(error)
        if code in ("NoSuchBucket", "NoSuchKey", "404"):
            return
        if code in ("PreconditionFailed", "412"):
            log(f"note: the lock of stage {lock.holder['stage']} was broken while this {lock.holder['command']} "
                f"ran, and is now {describe(read_lock(s3, lock.bucket) or {})}: left to it")
            return
        raise


@contextlib.contextmanager
def locked(s3, bucket: str, held: dict, log: Callable[[str], None] = print) -> Iterator[Lock]:
    """The stage's lock for the duration of the block, released however the block ends."""
    lock = acquire(s3, bucket, held)
    try:
        yield lock
    finally:
        release(s3, lock, log)


def break_lock(s3, bucket: str) -> dict | None:
    """`make deploy-unlock`: delete the lock, whoever holds it; what it said, or None when there was none."""
    held = read_lock(s3, bucket)
    if held is not None:
        s3.delete_object(Bucket=bucket, Key=LOCK_KEY)
    return held


# --- Chalice's deployed state -------------------------------------------------------------------------

def fetch(s3, bucket: str, stage: str, deployed_dir: Path, log: Callable[[str], None] = print) -> str:
    """Put the account's record of the stage's app where Chalice reads it (`<deployed_dir>/<stage>.json`).
    Returns where the record came from: "account"; "checkout", when the account has none yet but this
    checkout has one (a stage deployed before its record was kept in the account: it is uploaded after the
    deploy); "none", when neither has one (a new stage, or a lost record: see `app_functions`)."""
    local = deployed_dir / f"{stage}.json"
    try:
        body = s3.get_object(Bucket=bucket, Key=state_key(stage))["Body"].read()
    except s3.exceptions.ClientError as error:
        if _code(error) not in ("NoSuchKey", "404"):
            raise
        if local.exists():
            log(f"deploy state: none in s3://{bucket}/{state_key(stage)} yet; this checkout's {local.name} is used, "
                "and kept there from now on")
            return "checkout"
        return "none"
    json.loads(body)  # a record Chalice can read, or stop here
    deployed_dir.mkdir(parents=True, exist_ok=True)
    local.write_bytes(body)
    return "account"


def store(s3, bucket: str, stage: str, deployed_dir: Path) -> bool:
    """Upload `<deployed_dir>/<stage>.json` (what Chalice recorded) to the account; False when there is none."""
    local = deployed_dir / f"{stage}.json"
    if not local.exists():
        return False
    s3.put_object(Bucket=bucket, Key=state_key(stage), Body=local.read_bytes(), ContentType="application/json")
    return True


def lost_record_message(stage: str, bucket: str, functions: list[str]) -> str:
    return (f"stage {stage} has its app deployed ({len(functions)} functions, such as {functions[0]}) but no record "
            f"of it: neither s3://{bucket}/{state_key(stage)} nor this checkout's .chalice/deployed/{stage}.json. "
            "Going on would make a second REST API and a second mapping for each queue (or, for a destroy, leave every "
            "function behind). Run this command once from the checkout that last deployed the stage (its record is "
            f"then kept in the account), or upload that record: aws s3 cp .chalice/deployed/{stage}.json "
            f"s3://{bucket}/{state_key(stage)}")
