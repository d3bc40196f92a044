"""A dynalite of a test's own (the local stack's DynamoDB, or dynalite's own command line)."""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import boto3

from chalicelib.local import processes


@contextmanager
def local_dynalite(command: Path, folder: Path) -> Iterator[Any]:
    """A dynalite started by `command` on a store in `folder`, and a client of it; stopped after."""
    folder.mkdir()
    port = processes.free_port()
    log = folder / "dynalite.log"
    server = processes.start(["node", str(command), "--host", "127.0.0.1", "--port", str(port), "--path",
                              str(folder / "db"), "--createTableMs", "0", "--deleteTableMs", "0"], log)
    try:
        processes.wait_for_port(port, server, "dynalite", log)
        yield boto3.client("dynamodb", endpoint_url=f"http://127.0.0.1:{port}", region_name="us-east-1",
                           aws_access_key_id="local", aws_secret_access_key="local")
    finally:
        server.terminate()
        server.wait(timeout=30)
