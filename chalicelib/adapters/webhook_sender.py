"""Sends one webhook attempt over HTTP (urllib3), and checks a URL's addresses.

The host is resolved here, every address it resolves to is checked (domain/webhooks.UrlPolicy),
and the connection goes to the checked address itself, so DNS that answers differently a moment
later (rebinding) cannot move the request to a refused address. TLS still verifies the
certificate against the URL's host name (SNI and the Host header carry it too). Redirects are
not followed: a 3xx is an answer like any other non-2xx. An attempt has one deadline in all
(domain/webhooks.TIMEOUT_SECONDS unless settings say otherwise).
"""
from __future__ import annotations

import ipaddress
import socket
import ssl
import threading
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import urllib3
import urllib3.connection

from chalicelib.domain.webhooks import (
    RESPONSE_EXCERPT_CHARS,
    TIMEOUT_SECONDS,
    SendOutcome,
    UrlPolicy,
    WebhookRequest,
    default_port,
)

USER_AGENT = "recon-webhooks/1.0"
CONNECTION_FAILED = "connection failed"
Resolver = Callable[..., list[tuple[Any, ...]]]  # socket.getaddrinfo's shape


class AddressRefused(Exception):
    def __init__(self, problem: str) -> None:
        super().__init__(problem)
        self.problem = problem


class HttpWebhookSender:
    def __init__(self, policy: UrlPolicy, timeout_seconds: float = TIMEOUT_SECONDS,
                 resolve: Resolver = socket.getaddrinfo) -> None:
        self._policy = policy
        self._timeout = timeout_seconds
        self._resolve = resolve

    def now(self) -> int:
        """The unix seconds a signature is stamped with: the wall clock of the attempt itself."""
        return int(time.time())

    def refusal(self, url: str) -> str | None:
        """Why deliveries may not go to `url` (as written, or any address its host resolves to)."""
        try:
            self._checked_address(url)
        except AddressRefused as refused:
            return refused.problem
        return None

    def send(self, request: WebhookRequest) -> SendOutcome:
        """One attempt, within `timeout_seconds` in all: a socket timeout bounds each read only (a
        server sending a byte a second would hold it for ever), so a watchdog cuts the connection
        at the deadline, wherever it is (connecting, TLS, the headers, the answer's excerpt)."""
        deadline = time.monotonic() + self._timeout
        try:
            address = self._checked_address(request.url)
        except AddressRefused as refused:
            return SendOutcome(error=f"refused: the URL {refused.problem}")
        parts = urlsplit(request.url)
        host = parts.hostname or ""
        port = parts.port or default_port(parts.scheme)
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        headers = {**request.headers, "content-type": "application/json", "user-agent": USER_AGENT,
                   "host": _host_header(host, parts.port)}
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return SendOutcome(error=self._timed_out())
        connection: _WatchedConnection
        if parts.scheme == "https":
            connection = _WatchedHttpsConnection(address, port, timeout=remaining, server_hostname=host,
                                                 assert_hostname=host)
        else:
            connection = _WatchedHttpConnection(address, port, timeout=remaining)
        watchdog = threading.Timer(remaining, connection.cut)
        watchdog.daemon = True
        watchdog.start()
        try:
            connection.request("POST", path, body=request.body.encode(), headers=headers, preload_content=False)
            response = connection.getresponse()
            if connection.was_cut:  # the headers broke off at the deadline (http.client takes that for their end)
                return SendOutcome(error=self._timed_out())
            head = _read_head(response, deadline)
            return SendOutcome(status_code=response.status, response_excerpt=excerpt(head))
        except Exception as error:  # noqa: BLE001 (every failure of the attempt is its outcome)
            if connection.was_cut:
                return SendOutcome(error=self._timed_out())
            return SendOutcome(error=self._failure(error))
        finally:
            watchdog.cancel()
            watchdog.join()
            connection.close()
            connection.release()

    def _timed_out(self) -> str:
        return f"timed out after {self._timeout:g} s"

    def _failure(self, error: Exception) -> str:
        """What went wrong, as a kind only: the error's own text names the host and port and the
        errno (refused, reset, unreachable), which would tell a client which ports are open."""
        if isinstance(error, urllib3.exceptions.NewConnectionError):  # (a ConnectTimeoutError subclass)
            return CONNECTION_FAILED
        if isinstance(error, (urllib3.exceptions.ConnectTimeoutError, urllib3.exceptions.ReadTimeoutError,
                              TimeoutError)):
            return self._timed_out()
        if isinstance(error, (urllib3.exceptions.SSLError, ssl.SSLError, ssl.CertificateError)):
            if _caused_by(error, (ssl.SSLCertVerificationError, ssl.CertificateError)):
                return "TLS error: the server's certificate was not accepted"
            return "TLS error"
        return CONNECTION_FAILED

    def _checked_address(self, url: str) -> str:
        """The address to connect to: the first of the host's addresses, once every one passed."""
        problem = self._policy.url_problem(url)
        if problem:
            raise AddressRefused(problem)
        parts = urlsplit(url)
        host = (parts.hostname or "").strip("[]")
        port = parts.port or default_port(parts.scheme)
        try:
            answers = self._resolve(host, port, type=socket.SOCK_STREAM)
        except (socket.gaierror, UnicodeError):
            raise AddressRefused(f"names a host that does not resolve ({host[:100]})") from None
        addresses = list(dict.fromkeys(str(answer[4][0]).split("%")[0] for answer in answers))
        if not addresses:
            raise AddressRefused(f"names a host that does not resolve ({host[:100]})")
        for address in addresses:
            # The rule alone: the address the service's DNS gave stays out of answers and last_error
            problem = self._policy.address_problem(ipaddress.ip_address(address), port, named=False)
            if problem:
                raise AddressRefused(problem)
        return addresses[0]


class _WatchedConnection(urllib3.connection.HTTPConnection):
    """A connection whose socket the watchdog can shut from another thread at any moment: it keeps
    a duplicate of the socket (TLS takes the original over while it shakes hands)."""
    _handle: socket.socket | None = None
    was_cut = False

    def _new_conn(self) -> socket.socket:
        sock = super()._new_conn()
        self._handle = sock.dup()
        return sock

    def cut(self) -> None:
        self.was_cut = True
        if self._handle is not None:
            try:
                self._handle.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def release(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None


class _WatchedHttpConnection(_WatchedConnection):
    pass


class _WatchedHttpsConnection(_WatchedConnection, urllib3.connection.HTTPSConnection):
    pass


def _read_head(response: urllib3.BaseHTTPResponse, deadline: float) -> bytes:
    """The start of the answer's body, as much as comes before the deadline (the status is what
    counts: an answer whose body stalls or breaks off keeps its status and what arrived)."""
    head = b""
    wanted = RESPONSE_EXCERPT_CHARS * 4
    try:
        while len(head) < wanted and time.monotonic() < deadline:
            chunk = response.read1(wanted - len(head), decode_content=False)
            if not chunk:
                break
            head += chunk
    except Exception:  # noqa: BLE001 (cut at the deadline, or the server broke off)
        pass
    return head


def excerpt(raw: bytes) -> str:
    """The start of an answer as text a person can read: bad UTF-8 replaced, control characters dropped."""
    text = raw.decode("utf-8", errors="replace")
    return "".join(c if c.isprintable() or c in "\n\t" else " " for c in text)[:RESPONSE_EXCERPT_CHARS]


def _host_header(host: str, port: int | None) -> str:
    shown = f"[{host}]" if ":" in host else host
    return f"{shown}:{port}" if port else shown


def _caused_by(error: BaseException, kinds: tuple[type[BaseException], ...]) -> bool:
    seen: BaseException | None = error
    for _ in range(5):
        if seen is None:
            return False
        if isinstance(seen, kinds):
            return True
        seen = seen.__cause__ or seen.__context__
    return False
