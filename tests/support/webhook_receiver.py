"""A webhook receiver on loopback, as a client would run one: every delivery is checked with the
off-the-shelf `standardwebhooks` library (the event kept), or counted as refused (the reason kept).
It answers 200 to each. Used by the end-to-end tests and bench/events_overhead.py."""
from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from standardwebhooks import Webhook


class VerifyingReceiver:
    def __init__(self) -> None:
        self.secret: str | None = None  # the endpoint's, once it is made
        self.events: list[dict] = []
        self.refused: list[str] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers["content-length"]))
                try:
                    receiver.events.append(Webhook(receiver.secret).verify(body, dict(self.headers)))
                except Exception as error:
                    receiver.refused.append(str(error))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks"

    def wait_for(self, event_type: str, timeout: float = 60) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = [e for e in self.events if e["type"] == event_type]
            if found:
                return found[0]
            time.sleep(0.2)
        raise AssertionError(f"no {event_type} delivered; got {[e['type'] for e in self.events]}, "
                             f"refused {self.refused}")

    def stop(self) -> None:
        self.server.shutdown()
