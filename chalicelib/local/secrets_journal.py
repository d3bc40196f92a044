"""Secrets Manager of the local stack kept on disk: moto's secrets journaled to a SQLite file.

moto keeps secrets in memory only, so a browser agent's portal login (set with the CLI) would be
gone at every restart of `make run`. The embedded AWS server runs moto with its Secrets Manager
backend hooked (`journaled_secrets`): after every call that changes a secret (create, put a
value, update, tag, delete, restore, ...) the secret's whole state is written to the journal, or
its row deleted once the secret is gone (ForceDeleteWithoutRecovery), before the call answers.
When the server starts, every journaled secret is put back as it was: its ARN, its versions that
carry a staging label (AWS too drops the others, in time), its dates, its deletion mark.
Replicas in other regions are not kept.
"""
from __future__ import annotations

import inspect
import json
import os
import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast

from moto.secretsmanager.models import FakeSecret, SecretsManagerBackend, secretsmanager_backends

SCHEMA = """
CREATE TABLE IF NOT EXISTS secrets (
    account TEXT NOT NULL,
    region TEXT NOT NULL,
    name TEXT NOT NULL,
    secret TEXT NOT NULL,  -- the attributes of moto's FakeSecret (JSON)
    PRIMARY KEY (account, region, name)
);
"""
# The backend's calls that change a secret, and their argument naming it (a name or an ARN).
CHANGES = {
    "create_secret": "name", "update_secret": "secret_id", "put_secret_value": "secret_id",
    "delete_secret": "secret_id", "restore_secret": "secret_id", "rotate_secret": "secret_id",
    "cancel_rotate_secret": "secret_id", "update_secret_version_stage": "secret_id",
    "put_resource_policy": "secret_id", "delete_resource_policy": "secret_id", "tag_resource": "arn",
    "untag_resource": "arn",
}


class SecretsJournal:
    """The journal's file. Thread-safe: moto's server answers each request in its own thread."""

    def __init__(self, path: Path | str) -> None:
        # The file holds the local secrets in clear text (as moto's memory does): its owner's only.
        # SQLite gives its transient journal file the same mode.
        if str(path) != ":memory:":
            os.close(os.open(path, os.O_RDWR | os.O_CREAT, 0o600))
            os.chmod(path, 0o600)
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA synchronous=FULL")  # rare writes: each one survives a power cut
        self._db.executescript(SCHEMA)
        self.lock = threading.RLock()  # held across a change and its journaling, so both keep one order

    def save(self, secret: FakeSecret) -> None:
        state = {name: value for name, value in vars(secret).items() if name != "replicas"}
        state["versions"] = {version_id: version for version_id, version in secret.versions.items()
                             if version["version_stages"]}
        with self.lock:
            self._db.execute("INSERT INTO secrets (account, region, name, secret) VALUES (?, ?, ?, ?) "
                             "ON CONFLICT (account, region, name) DO UPDATE SET secret = excluded.secret",
                             (secret.account_id, secret.region, secret.name, json.dumps(state)))

    def forget(self, account: str, region: str, name: str) -> None:
        with self.lock:
            self._db.execute("DELETE FROM secrets WHERE account = ? AND region = ? AND name = ?",
                             (account, region, name))

    def secrets(self) -> list[FakeSecret]:
        with self.lock:
            rows = self._db.execute("SELECT secret FROM secrets ORDER BY account, region, name").fetchall()
        restored = []
        for (text,) in rows:
            secret = cast(FakeSecret, FakeSecret.__new__(FakeSecret))  # as it was, not made anew (new ARN, dates)
            vars(secret).update(json.loads(text), replicas=[])
            restored.append(secret)
        return restored

    def close(self) -> None:
        with self.lock:
            self._db.close()


@contextmanager
def journaled_secrets(journal: SecretsJournal) -> Iterator[SecretsJournal]:
    """moto's Secrets Manager holding the journal's secrets, and writing to it while inside (the
    hooks are undone on leaving: tests run moto in-process beside other tests)."""
    for secret in journal.secrets():
        secretsmanager_backends[secret.account_id][secret.region].secrets[secret.name] = secret
    originals: list[tuple[str, Callable[..., Any]]] = []
    try:
        for method, argument in CHANGES.items():
            original = getattr(SecretsManagerBackend, method)
            originals.append((method, original))
            setattr(SecretsManagerBackend, method, _journaling(journal, original, argument))
        yield journal
    finally:
        for method, original in reversed(originals):
            setattr(SecretsManagerBackend, method, original)


def _journaling(journal: SecretsJournal, original: Callable[..., Any], argument: str) -> Callable[..., Any]:
    signature = inspect.signature(original)
    if argument not in signature.parameters:  # moto changed: journaling by a wrong argument would lose secrets
        raise RuntimeError(f"moto's SecretsManagerBackend.{original.__name__} has no argument {argument}")

    def change(backend: SecretsManagerBackend, *args: Any, **kwargs: Any) -> Any:
        identifier = signature.bind(backend, *args, **kwargs).arguments[argument]
        with journal.lock:
            before = backend.secrets.get(identifier)  # by name or ARN
            name = before.name if before is not None else identifier
            try:
                return original(backend, *args, **kwargs)
            finally:
                after = dict.get(backend.secrets, name)
                if isinstance(after, FakeSecret):
                    journal.save(after)
                elif after is None:
                    journal.forget(backend.account_id, backend.region_name, name)

    return change
