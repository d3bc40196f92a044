"""Stopping a local service that serves in the background (the benchmarks run it so): its HTTP loop
ends before its socket closes. Polling a closed socket, the loop would spin on EBADF, taking the
process's CPU until it exits."""
from __future__ import annotations

import socketserver
import threading
from types import SimpleNamespace

from chalicelib.local.__main__ import LocalService
from chalicelib.settings import Settings


class CountingServer(socketserver.TCPServer):
    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), socketserver.BaseRequestHandler)
        self.polls_after_close = 0
        self.closed = False

    def service_actions(self) -> None:  # once a loop turn
        if self.closed:
            self.polls_after_close += 1

    def server_close(self) -> None:
        self.closed = True
        super().server_close()


def test_stop_ends_the_background_http_loop_before_closing_its_socket(tmp_path):
    service = LocalService(Settings(data_dir=tmp_path / "data"), log=lambda message: None)
    http = CountingServer()
    service.server = SimpleNamespace(server=http)  # what build_server returns: its `server` serves
    before = set(threading.enumerate())
    service.serve_in_background()
    (serving,) = [thread for thread in set(threading.enumerate()) - before if thread.name == "api-server"]
    service.stop(grace_seconds=0)
    serving.join(timeout=2)
    assert not serving.is_alive(), f"the HTTP loop went on {http.polls_after_close} turns after its socket closed"
    assert http.polls_after_close == 0
