"""Sends one webhook attempt over HTTP (urllib3), and checks a URL's addresses.

The host is resolved here, every address it resolves to is checked (domain/webhooks.UrlPolicy),
and the connection goes to the checked address itself, so DNS that answers differently a moment
later (rebinding) cannot move the request to a refused address. TLS still verifies the
certificate against the URL's host name (SNI and the Host header carry it too). Redirects are
not followed: a 3xx is an answer like any other non-2xx.
"""
from __future__ import annotations

import ipaddress
import socket
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import urllib3

from chalicelib.domain.webhooks import RESPONSE_EXCERPT_CHARS, SendOutcome, UrlPolicy, WebhookRequest

USER_AGENT = "recon-webhooks/1.0"
Resolver = Callable[..., list[tuple[Any, ...]]]  # socket.getaddrinfo's shape


class AddressRefused(Exception):
    def __init__(self, problem: str) -> None:
        super().__init__(problem)
        self.problem = problem


class HttpWebhookSender:
    def __init__(self, policy: UrlPolicy, timeout_seconds: float = 10.0,
                 resolve: Resolver = socket.getaddrinfo) -> None:
        self._policy = policy
        self._timeout = urllib3.Timeout(connect=timeout_seconds, read=timeout_seconds)
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
        try:
            address = self._checked_address(request.url)
        except AddressRefused as refused:
            return SendOutcome(error=f"refused: the URL {refused.problem}")
        parts = urlsplit(request.url)
        host = parts.hostname or ""
        port = parts.port or (443 if parts.scheme == "https" else 80)
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        host_header = _host_header(host, parts.port)
        pool: urllib3.HTTPConnectionPool
        if parts.scheme == "https":
            pool = urllib3.HTTPSConnectionPool(address, port, timeout=self._timeout, retries=False, maxsize=1,
                                               server_hostname=host, assert_hostname=host)
        else:
            pool = urllib3.HTTPConnectionPool(address, port, timeout=self._timeout, retries=False, maxsize=1)
        headers = {**request.headers, "content-type": "application/json", "user-agent": USER_AGENT,
                   "host": host_header}
        try:
            with pool:
                response = pool.urlopen("POST", path, body=request.body.encode(), headers=headers, redirect=False,
                                        retries=False, preload_content=False, assert_same_host=False)
                try:
                    head = response.read(RESPONSE_EXCERPT_CHARS * 4, decode_content=False) or b""
                finally:
                    response.release_conn()
                return SendOutcome(status_code=response.status, response_excerpt=excerpt(head))
        except urllib3.exceptions.NewConnectionError as error:  # (a ConnectTimeoutError subclass in urllib3 2)
            return SendOutcome(error=f"connection failed: {_short(error)}")
        except (urllib3.exceptions.ReadTimeoutError, urllib3.exceptions.ConnectTimeoutError):
            return SendOutcome(error=f"timed out after {self._timeout.read_timeout} s")
        except urllib3.exceptions.SSLError as error:
            return SendOutcome(error=f"TLS error: {_short(error)}")
        except urllib3.exceptions.HTTPError as error:
            return SendOutcome(error=f"connection failed: {_short(error)}")
        except OSError as error:
            return SendOutcome(error=f"connection failed: {_short(error)}")

    def _checked_address(self, url: str) -> str:
        """The address to connect to: the first of the host's addresses, once every one passed."""
        problem = self._policy.url_problem(url)
        if problem:
            raise AddressRefused(problem)
        parts = urlsplit(url)
        host = (parts.hostname or "").strip("[]")
        port = parts.port or (443 if parts.scheme == "https" else 80)
        try:
            answers = self._resolve(host, port, type=socket.SOCK_STREAM)
        except (socket.gaierror, UnicodeError):
            raise AddressRefused(f"names a host that does not resolve ({host[:100]})") from None
        addresses = list(dict.fromkeys(str(answer[4][0]).split("%")[0] for answer in answers))
        if not addresses:
            raise AddressRefused(f"names a host that does not resolve ({host[:100]})")
        for address in addresses:
            problem = self._policy.address_problem(ipaddress.ip_address(address))
            if problem:
                raise AddressRefused(problem)
        return addresses[0]


def excerpt(raw: bytes) -> str:
    """The start of an answer as text a person can read: bad UTF-8 replaced, control characters dropped."""
    text = raw.decode("utf-8", errors="replace")
    return "".join(c if c.isprintable() or c in "\n\t" else " " for c in text)[:RESPONSE_EXCERPT_CHARS]


def _host_header(host: str, port: int | None) -> str:
    shown = f"[{host}]" if ":" in host else host
    return f"{shown}:{port}" if port else shown


def _short(error: Exception) -> str:
    return str(error)[:200]
