"""The embedded AWS endpoint of the local stack: moto's server with SQS and Secrets Manager kept on
disk, and S3 served by s3rver from files on disk.

    python -m chalicelib.local.aws_server --port N --journal PATH [--secrets PATH] --s3-port M
        --s3-directory DIR --s3-log PATH

It starts s3rver (`s3_server.js`) on --s3-port as its own child, then serves moto on --port with
moto's SQS journaled to --journal (`sqs_journal`) and its Secrets Manager to --secrets
(`secrets_journal`; without it, secrets live in memory only). S3 requests that reach --port are
forwarded to s3rver, so anything given this one endpoint for all of AWS (AWS_ENDPOINT_URL) sees
the same buckets as the service, which calls s3rver directly (settings.s3_endpoint); moto's own
in-memory S3 is never used. If s3rver ends, so does this server, and the stack stops on it.
"""
from __future__ import annotations

import argparse
import http.client
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any

from chalicelib.local import processes

if TYPE_CHECKING:
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication

ROOT = Path(__file__).resolve().parents[2]
S3_SERVER = Path(__file__).with_name("s3_server.js")
S3RVER_PACKAGE = ROOT / "node_modules" / "s3rver"
# Headers of one HTTP connection, which a proxy does not pass on (RFC 9110, 7.6.1); and Expect, as
# this server has already answered "100 Continue" and read the body.
HOP_BY_HOP = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
              "transfer-encoding", "upgrade", "expect"}


def s3rver_command(port: int, directory: Path) -> list[str]:
    return ["node", str(S3_SERVER), "--address", processes.LOOPBACK, "--port", str(port),
            "--directory", str(directory)]


class ForwardS3:
    """A WSGI app: S3 requests go to s3rver, every other one to moto. moto's own choice of service
    (the signature's credential scope; S3 when a request names none, as a presigned URL) decides."""

    def __init__(self, moto: DomainDispatcherApplication, s3_port: int) -> None:
        self._moto = moto
        self._s3_port = s3_port

    def is_s3(self, environ: dict[str, Any]) -> bool:
        path = environ.get("PATH_INFO", "")
        if path.startswith("/moto-api"):
            return False
        host = self._moto.infer_service_region_host(environ, path)
        return host is None or self._moto.get_backend_for_host(host) == "s3"

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        if not self.is_s3(environ):
            return self._moto(environ, start_response)
        return self._forward(environ, start_response)

    def _forward(self, environ: dict[str, Any], start_response: Any) -> Iterator[bytes]:
        headers = {name[5:].replace("_", "-"): value for name, value in environ.items()
                   if name.startswith("HTTP_") and name[5:].replace("_", "-").lower() not in HOP_BY_HOP}
        length = int(environ.get("CONTENT_LENGTH") or 0)
        if environ.get("CONTENT_TYPE"):
            headers["Content-Type"] = environ["CONTENT_TYPE"]
        if length or environ["REQUEST_METHOD"] in ("PUT", "POST"):
            headers["Content-Length"] = str(length)
        # The body is read whole: the server's input stream does not end where the body does.
        body = environ["wsgi.input"].read(length) if length else None
        connection = http.client.HTTPConnection(processes.LOOPBACK, self._s3_port, timeout=120)
        connection.request(environ["REQUEST_METHOD"], environ.get("RAW_URI") or environ["PATH_INFO"], body=body,
                           headers=headers)
        response = connection.getresponse()
        start_response(f"{response.status} {response.reason}",
                       [(k, v) for k, v in response.getheaders() if k.lower() not in HOP_BY_HOP])
        try:
            while chunk := response.read(64 * 1024):
                yield chunk
        finally:
            connection.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--journal", type=Path, required=True, help="the SQS journal (SQLite)")
    parser.add_argument("--journal-synchronous", choices=("NORMAL", "FULL"), default="NORMAL",
                        help="FULL survives a power cut too, at a cost (bench/local_storage.py)")
    parser.add_argument("--secrets", type=Path, help="the Secrets Manager journal (SQLite, mode 0600)")
    parser.add_argument("--s3-port", type=int, required=True)
    parser.add_argument("--s3-directory", type=Path, required=True, help="where s3rver keeps the objects")
    parser.add_argument("--s3-log", type=Path, required=True, help="s3rver's output")
    args = parser.parse_args(argv)
    if not S3RVER_PACKAGE.exists():
        sys.exit("s3rver is not installed: run `make run` (it runs `npm ci`)")

    args.s3_directory.mkdir(parents=True, exist_ok=True)
    s3_log: Path = args.s3_log
    s3rver = processes.start(s3rver_command(args.s3_port, args.s3_directory), s3_log)
    stopping = threading.Event()

    def stop(signum: int, frame: Any) -> None:
        stopping.set()
        processes.stop([s3rver])
        sys.exit(0)

    def exit_with(child: subprocess.Popen[bytes]) -> None:
        child.wait()
        if not stopping.is_set():
            print(f"s3rver exited with code {child.returncode}; see {s3_log}", file=sys.stderr, flush=True)
            os._exit(1)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    # moto is imported while s3rver starts (each takes about 0.3 s).
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
    from werkzeug.serving import run_simple

    from chalicelib.local.secrets_journal import SecretsJournal, journaled_secrets
    from chalicelib.local.sqs_journal import SqsJournal, journaled

    processes.wait_for_port(args.s3_port, s3rver, "s3rver", s3_log)
    threading.Thread(target=exit_with, args=(s3rver,), daemon=True, name="watch-s3rver").start()
    os.environ["MOTO_PORT"] = str(args.port)  # as moto's own server sets it: some of its responses name it
    # The user pool and its client get the same ids at every start (a hash of their definition, not a
    # random one): tokens signed before a restart keep naming the pool, and its client, the API checks.
    os.environ.setdefault("MOTO_COGNITO_IDP_USER_POOL_ID_STRATEGY", "HASH")
    os.environ.setdefault("MOTO_COGNITO_IDP_USER_POOL_CLIENT_ID_STRATEGY", "HASH")
    with journaled(SqsJournal(args.journal, synchronous=args.journal_synchronous)), ExitStack() as secrets:
        if args.secrets:
            secrets.enter_context(journaled_secrets(SecretsJournal(args.secrets)))
        app = ForwardS3(DomainDispatcherApplication(create_backend_app), args.s3_port)
        run_simple(processes.LOOPBACK, args.port, app, threaded=True, request_handler=MotoRequestHandler)


if __name__ == "__main__":
    main()
