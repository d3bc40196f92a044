"""DynamoDB's JSON protocol spoken directly: a request signed with SigV4 and sent over urllib3, the
answer read with `json.loads`.

Why: botocore spends about 1.2 ms of the interpreter's time on each request (events, user agent,
signing, its HTTP layer, parsing through the service model), against about 0.4-0.55 ms here
(bench/table_client.py; bench/RESULTS.md, issue 30: "The table's own wire"). A run's persist sends
one conditional UpdateItem per matched record from many threads of one process, so that time, not
DynamoDB's, bounded it. Only the table's operations are spoken (the methods below, named as
botocore's); the rest of the service keeps botocore.

What stays as botocore does it: the same credentials (refreshed by botocore), endpoint, certificates
and Host signed; errors raise botocore's classes with the same `Error.Code`, lost connections its
connection errors; whether to try again, and after how long, is asked of the botocore client after
each attempt as its own endpoint asks it (`needs-retry`: its retry mode decides, with its attempts,
backoff and retry quota: throttling, 5xx, modeled retryable errors, a damaged body by its CRC32, lost
connections). Not kept: the adaptive mode's client-side rate limiting before a request is sent. The
client's events `provide-client-params`, `before-parameter-build`, `before-call` (with a request
shaped as botocore's: its handlers add the Lambda trace header) and `after-call` are emitted on the
botocore client's own hub, so whatever watches that client (the benchmarks' request counters, the
cost model) sees these requests too.
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import http.client
import json
import threading
import time
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

import botocore.exceptions
import urllib3
from botocore.auth import SIGNED_HEADERS_BLACKLIST
from botocore.hooks import first_non_none_response
from botocore.httpsession import get_cert_path
from botocore.parsers import ResponseParserError

TARGET_PREFIX = "DynamoDB_20120810."
CONTENT_TYPE = "application/x-amz-json-1.0"
SERVICE = "dynamodb"
POOL_SIZE = 32  # connections kept per host, as the botocore client's max_pool_connections
TIMEOUT = urllib3.Timeout(connect=60, read=60)  # botocore's defaults
DEFAULT_PORTS = {"http": 80, "https": 443}
# What went wrong on the way, as botocore's HTTP layer names it (botocore/httpsession.py): its retry
# checks retry these (ConnectionError, HTTPClientError), and callers catch what they caught before.
_CONNECTION_ERRORS: tuple[tuple[type[Exception], Any], ...] = (  # in botocore's order
    (urllib3.exceptions.SSLError, botocore.exceptions.SSLError),
    (urllib3.exceptions.NewConnectionError, botocore.exceptions.EndpointConnectionError),
    (urllib3.exceptions.ConnectTimeoutError, botocore.exceptions.ConnectTimeoutError),
    (urllib3.exceptions.ReadTimeoutError, botocore.exceptions.ReadTimeoutError),
    (urllib3.exceptions.ProtocolError, botocore.exceptions.ConnectionClosedError),
)

_body_mode = threading.local()


@contextmanager
def bodies(mode: str):
    """Within: Query and BatchGetItem answers as `json.loads` gives them ("json", what the table
    reads anyway), or the body itself as `{"Body": bytes}` ("raw", for readers that parse a page
    whole). Honoured by botocore clients too (the table's before-parse hook reads the same mode)."""
    _body_mode.on = mode
    try:
        yield
    finally:
        _body_mode.on = None


def body_mode() -> str | None:
    return getattr(_body_mode, "on", None)


class SigV4:
    """AWS Signature Version 4 of a DynamoDB request (a POST with a JSON body): the headers to send,
    Authorization among them. `host` as botocore signs it (`signed_host`). The signing key is derived
    once a day."""

    def __init__(self, region: str, host: str, path: str = "/") -> None:
        self._region = region
        self._host = host
        self.path = path
        self._keys: dict[tuple[str, str], bytes] = {}

    def headers(self, target: str, body: bytes, access_key: str, secret_key: str, token: str | None,
                now: datetime | None = None, extra: dict[str, str] | None = None) -> dict[str, str]:
        """`extra`: headers botocore's handlers added (by lower-case name); signed unless botocore
        leaves them unsigned (X-Amzn-Trace-Id)."""
        moment = (now or datetime.now(UTC)).strftime("%Y%m%dT%H%M%SZ")
        day = moment[:8]
        headers = {"content-type": CONTENT_TYPE, "host": self._host, "x-amz-date": moment, "x-amz-target": target}
        if token:
            headers["x-amz-security-token"] = token
        unsigned: dict[str, str] = {}
        for name, value in (extra or {}).items():
            (unsigned if name in SIGNED_HEADERS_BLACKLIST else headers)[name] = value
        signed = ";".join(sorted(headers))
        canonical = "\n".join([
            "POST", self.path, "", *(f"{name}:{' '.join(headers[name].split())}" for name in sorted(headers)), "",
            signed, hashlib.sha256(body).hexdigest()])
        scope = f"{day}/{self._region}/{SERVICE}/aws4_request"
        to_sign = f"AWS4-HMAC-SHA256\n{moment}\n{scope}\n{hashlib.sha256(canonical.encode()).hexdigest()}"
        signature = hmac.new(self._key(day, secret_key), to_sign.encode(), hashlib.sha256).hexdigest()
        headers["authorization"] = (f"AWS4-HMAC-SHA256 Credential={access_key}/{scope}, "
                                    f"SignedHeaders={signed}, Signature={signature}")
        return {**headers, **unsigned}  # the host sent as signed: urllib3 then adds none of its own

    def _key(self, day: str, secret_key: str) -> bytes:
        cached = self._keys.get((day, secret_key))
        if cached is None:
            cached = ("AWS4" + secret_key).encode()
            for part in (day, self._region, SERVICE, "aws4_request"):
                cached = hmac.new(cached, part.encode(), hashlib.sha256).digest()
            self._keys = {(day, secret_key): cached}  # one day's key at a time
        return cached


class DynamoWire:
    """The table's DynamoDB operations, sent directly (see the module's docstring). `client` is the
    botocore DynamoDB client whose endpoint, region, service model and event hub it uses;
    `credentials` botocore's (refreshable) credentials; `ca_bundle` the certificates to verify the
    endpoint with where not botocore's bundle (AWS_CA_BUNDLE, as botocore reads it)."""

    def __init__(self, client, credentials, *, ca_bundle: str | None = None) -> None:
        if credentials is None:
            raise ValueError("no AWS credentials found for DynamoDB")
        url = urllib3.util.parse_url(client.meta.endpoint_url)
        path = url.path or "/"
        self._url = f"{url.scheme}://{url.netloc}{path}"
        self._events = client.meta.events
        self._service_model = client.meta.service_model
        self._exceptions = client.exceptions  # botocore's classes of the modeled errors
        self._credentials = credentials
        self._signer = SigV4(client.meta.region_name, signed_host(client.meta.endpoint_url), path)
        verify: dict[str, Any] = {"cert_reqs": "CERT_REQUIRED", "ca_certs": ca_bundle or get_cert_path(True)} \
            if url.scheme == "https" else {}
        # One endpoint: its own pool (a PoolManager would parse the URL and find the pool per request).
        self._pool = urllib3.connection_from_url(self._url, maxsize=POOL_SIZE, timeout=TIMEOUT, retries=False, **verify)
        self.meta = client.meta  # as a botocore client's, for code that reads `meta.events`

    # The operations the table sends, as botocore names them.
    def get_item(self, **params: Any) -> dict[str, Any]:
        return self.call("GetItem", params)

    def put_item(self, **params: Any) -> dict[str, Any]:
        return self.call("PutItem", params)

    def update_item(self, **params: Any) -> dict[str, Any]:
        return self.call("UpdateItem", params)

    def delete_item(self, **params: Any) -> dict[str, Any]:
        return self.call("DeleteItem", params)

    def query(self, **params: Any) -> dict[str, Any]:
        return self.call("Query", params)

    def batch_write_item(self, **params: Any) -> dict[str, Any]:
        return self.call("BatchWriteItem", params)

    def batch_get_item(self, **params: Any) -> dict[str, Any]:
        return self.call("BatchGetItem", params)

    def transact_write_items(self, **params: Any) -> dict[str, Any]:
        return self.call("TransactWriteItems", params)

    def call(self, operation: str, params: dict[str, Any]) -> dict[str, Any]:
        """The events botocore's client emits around a call, with the same arguments, so its own
        handlers (the Lambda trace header) and ours (counters) work unchanged."""
        model = self._service_model.operation_model(operation)
        context: dict[str, Any] = {}
        emit = self._events.emit
        replaced = [r for _, r in emit(f"provide-client-params.{SERVICE}.{operation}", params=params, model=model,
                                       context=context) if r is not None]
        params = replaced[0] if replaced else params
        emit(f"before-parameter-build.{SERVICE}.{operation}", params=params, model=model, context=context)
        request = {"url_path": self._signer.path, "query_string": "", "method": "POST", "headers": {},
                   "body": json.dumps(params, allow_nan=False, default=_base64).encode(),  # values come typed
                   "url": self._url, "context": context}
        emit(f"before-call.{SERVICE}.{operation}", model=model, params=request, request_signer=None, context=context)
        response, parsed = self._send(model, request)
        emit(f"after-call.{SERVICE}.{operation}", http_response=response, parsed=parsed, model=model, context=context)
        if response.status_code >= 300:  # the class botocore raises: ClientError, or its modeled subclass
            raise self._exceptions.from_code(parsed["Error"]["Code"])(parsed, operation)
        return parsed

    def _send(self, model, request: dict[str, Any]) -> tuple[Answer, dict[str, Any]]:
        """The answer worth keeping: after each attempt, botocore's client is asked whether to try
        again, and after how long (`needs-retry`, as its endpoint asks it: its retry mode, attempts
        and retry quota decide; the quota is given back by its `after-call` handler)."""
        target, body = TARGET_PREFIX + model.name, request["body"]
        extra = {name.lower(): value for name, value in request["headers"].items()}
        attempt = 0
        while True:
            attempt += 1
            credentials = self._credentials.get_frozen_credentials()
            headers = self._signer.headers(target, body, credentials.access_key, credentials.secret_key,
                                           credentials.token, extra=extra)
            answer: Answer | None = None
            parsed: dict[str, Any] = {}
            failure: Exception | None = None
            try:
                sent = self._pool.urlopen("POST", self._signer.path, body=body, headers=headers, retries=False,
                                          preload_content=True, redirect=False)
                answer = Answer(sent.status, sent.headers, sent.data)
                parsed = _parsed(answer, model.name, attempt)
            except urllib3.exceptions.HTTPError as error:
                failure = _as_botocore(error, self._url)
            except ValueError as error:  # not a JSON object: damaged on the way (its CRC32 tells), or not DynamoDB's
                failure = ResponseParserError(f"{model.name}: unreadable answer: {error}")
            answered = answer is not None
            delay = first_non_none_response(self._events.emit(
                f"needs-retry.{SERVICE}.{model.name}", response=(answer, parsed) if answered else None,
                endpoint=None, operation=model, attempts=attempt, caught_exception=None if answered else failure,
                request_dict=request))
            if delay is not None and delay is not False:
                time.sleep(delay)
                continue
            if failure is not None:
                raise failure
            assert answer is not None
            return answer, parsed


class Answer:
    """An HTTP answer as botocore's retry checks read it (`status_code`, `headers`, `content`)."""

    def __init__(self, status_code: int, headers: Any, content: bytes) -> None:
        self.status_code, self.headers, self.content = status_code, headers, content


def signed_host(endpoint_url: str) -> str:
    """The Host header as botocore signs it: lower case, without a scheme's default port."""
    parts = urlsplit(endpoint_url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"  # an IPv6 address
    if parts.port is not None and parts.port != DEFAULT_PORTS.get(parts.scheme):
        host = f"{host}:{parts.port}"
    return host


def _as_botocore(error: Exception, url: str) -> Exception:
    for caught, named in _CONNECTION_ERRORS:
        if isinstance(error, caught):
            return named(endpoint_url=url, error=error)
    return botocore.exceptions.HTTPClientError(error=error)


def _parsed(answer: Answer, operation: str, attempt: int) -> dict[str, Any]:
    """The answer as botocore's client returns it (a success), or as it parses an error. ValueError:
    a success whose body is not a JSON object."""
    if answer.status_code >= 300:
        parsed = _error(answer)
    elif body_mode() == "raw" and operation in ("Query", "BatchGetItem"):
        parsed = {"Body": answer.content}
    else:
        parsed = json.loads(answer.content)
        if not isinstance(parsed, dict):
            raise ValueError("not a JSON object")
        if b'"B' in answer.content:
            parsed = _binary_decoded(parsed)
    parsed["ResponseMetadata"] = {**_metadata(answer), "RetryAttempts": attempt - 1}
    return parsed


def _base64(value: Any) -> str:
    """A binary attribute's bytes as the protocol carries them."""
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(value).decode()
    raise TypeError(f"a {type(value).__name__} cannot be sent to DynamoDB as it is")


def _binary_decoded(found: Any) -> Any:
    """Binary attributes ({"B": base64 text}, {"BS": [...]}) as bytes, as botocore gives them."""
    if isinstance(found, dict):
        if len(found) == 1 and "B" in found and isinstance(found["B"], str):
            return {"B": base64.b64decode(found["B"])}
        if len(found) == 1 and "BS" in found and isinstance(found["BS"], list):
            return {"BS": [base64.b64decode(v) for v in found["BS"]]}
        return {k: _binary_decoded(v) for k, v in found.items()}
    if isinstance(found, list):
        return [_binary_decoded(v) for v in found]
    return found


def _error(answer: Answer) -> dict[str, Any]:
    """The error as botocore parses one (botocore/parsers.py): a 5xx with an empty or HTML body by its
    status; else, of the JSON protocol, the code without its namespace and the message (the body's
    text when it is not JSON)."""
    body = answer.content.strip()
    if answer.status_code >= 500 and (not body or body.startswith(b"<html>")):
        reason = http.client.responses.get(answer.status_code, "")
        return {"Error": {"Code": str(answer.status_code), "Message": reason}, "ResponseMetadata": _metadata(answer)}
    try:
        found = json.loads(answer.content) if answer.content else {}
    except ValueError:
        found = {"message": answer.content.decode(errors="replace")}
    found = found if isinstance(found, dict) else {}
    code = str(found.get("__type") or answer.status_code).split(":", 1)[0].rpartition("#")[2]
    error: dict[str, Any] = {"Error": {"Code": code, "Message": found.get("message", found.get("Message", ""))},
                             "ResponseMetadata": _metadata(answer)}
    if "Item" in found:  # ReturnValuesOnConditionCheckFailure
        error["Item"] = _binary_decoded(found["Item"])
    if "CancellationReasons" in found:  # TransactionCanceledException: one a action, "None" where it passed
        error["CancellationReasons"] = [
            {**reason, "Item": _binary_decoded(reason["Item"])} if "Item" in reason else reason
            for reason in found["CancellationReasons"]]
    return error


def _metadata(answer: Answer) -> dict[str, Any]:
    return {"HTTPStatusCode": answer.status_code, "RequestId": answer.headers.get("x-amzn-requestid", ""),
            "HTTPHeaders": {name.lower(): value for name, value in answer.headers.items()}}
