"""DynamoDB's JSON protocol spoken directly: a request signed with SigV4 and sent over urllib3, the
answer read with `json.loads`.

Why: botocore spends about 1.3 ms of the interpreter's time on each request (events, user agent,
signing, its HTTP layer, parsing through the service model), against about 0.2 ms here
(bench/RESULTS.md, issue 30: "The table's own wire"). A run's persist sends one conditional
UpdateItem per matched record from many threads of one process, so that time, not DynamoDB's,
bounded it. Only the table's operations are spoken (the methods below, named as botocore's); the
rest of the service keeps botocore.

What stays as botocore does it: the same credentials (refreshed by botocore), the same endpoint,
the same certificates; errors raise botocore's ClientError with the same `Error.Code`; throttling,
5xx answers, a damaged body (its CRC32) and lost connections are retried with jittered backoff up to
`MAX_ATTEMPTS` in all (botocore's standard mode; its adaptive mode's client-side rate limiter is
not kept). The client's events `provide-client-params`, `before-parameter-build`, `before-call` and
`after-call` are emitted on the botocore client's own hub, so whatever watches that client (the
benchmarks' request counters, the cost model) sees these requests too.
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import json
import random
import threading
import time
import zlib
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import urllib3
from botocore.exceptions import ClientError, EndpointConnectionError
from botocore.httpsession import get_cert_path

TARGET_PREFIX = "DynamoDB_20120810."
CONTENT_TYPE = "application/x-amz-json-1.0"
SERVICE = "dynamodb"
MAX_ATTEMPTS = 8  # as the botocore client's `max_attempts` (adapters/aws.py)
MAX_BACKOFF_SECONDS = 20.0
POOL_SIZE = 32  # connections kept per host, as the botocore client's max_pool_connections
TIMEOUT = urllib3.Timeout(connect=60, read=60)  # botocore's defaults
# Answers worth another attempt (botocore's standard retry mode for DynamoDB).
RETRYABLE_CODES = frozenset({
    "ThrottlingException", "Throttling", "ThrottledException", "RequestThrottledException",
    "ProvisionedThroughputExceededException", "RequestLimitExceeded", "TransactionInProgressException",
    "InternalServerError", "InternalFailure", "ServiceUnavailable", "RequestTimeout", "RequestTimeoutException",
    "PriorRequestNotComplete", "TooManyRequestsException", "BandwidthLimitExceeded", "LimitExceededException"
})
RETRYABLE_STATUSES = frozenset({500, 502, 503, 504})
CONNECTION_ERRORS = (urllib3.exceptions.ProtocolError, urllib3.exceptions.TimeoutError,
                     urllib3.exceptions.NewConnectionError, urllib3.exceptions.SSLError,
                     urllib3.exceptions.ProxyError, ConnectionError)

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
    """AWS Signature Version 4 of a DynamoDB request (a POST to "/" with a JSON body): the
    Authorization header and the headers it signs. The signing key is derived once a day."""

    def __init__(self, region: str, host: str) -> None:
        self._region = region
        self._host = host
        self._keys: dict[tuple[str, str], bytes] = {}

    def headers(self, target: str, body: bytes, access_key: str, secret_key: str, token: str | None,
                now: datetime | None = None) -> dict[str, str]:
        moment = (now or datetime.now(UTC)).strftime("%Y%m%dT%H%M%SZ")
        day = moment[:8]
        headers = {"content-type": CONTENT_TYPE, "host": self._host, "x-amz-date": moment, "x-amz-target": target}
        if token:
            headers["x-amz-security-token"] = token
        signed = ";".join(sorted(headers))
        canonical = "\n".join([
            "POST", "/", "", *(f"{name}:{headers[name]}" for name in sorted(headers)), "", signed,
            hashlib.sha256(body).hexdigest()])
        scope = f"{day}/{self._region}/{SERVICE}/aws4_request"
        to_sign = f"AWS4-HMAC-SHA256\n{moment}\n{scope}\n{hashlib.sha256(canonical.encode()).hexdigest()}"
        signature = hmac.new(self._key(day, secret_key), to_sign.encode(), hashlib.sha256).hexdigest()
        headers["authorization"] = (f"AWS4-HMAC-SHA256 Credential={access_key}/{scope}, "
                                    f"SignedHeaders={signed}, Signature={signature}")
        del headers["host"]  # urllib3 sends the host it connects to
        return headers

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

    def __init__(self, client, credentials, *, max_attempts: int = MAX_ATTEMPTS, ca_bundle: str | None = None) -> None:
        if credentials is None:
            raise ValueError("no AWS credentials found for DynamoDB")
        url = urllib3.util.parse_url(client.meta.endpoint_url)
        self._url = f"{url.scheme}://{url.netloc}/"
        self._events = client.meta.events
        self._service_model = client.meta.service_model
        self._credentials = credentials
        self._max_attempts = max_attempts
        self._signer = SigV4(client.meta.region_name, str(url.netloc))
        verify: dict[str, Any] = {"cert_reqs": "CERT_REQUIRED", "ca_certs": ca_bundle or get_cert_path(True)} \
            if url.scheme == "https" else {}
        self._pool = urllib3.PoolManager(num_pools=4, maxsize=POOL_SIZE, timeout=TIMEOUT, retries=False, **verify)
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

    def call(self, operation: str, params: dict[str, Any]) -> dict[str, Any]:
        model = self._service_model.operation_model(operation)
        context: dict[str, Any] = {}
        for event in ("provide-client-params", "before-parameter-build"):
            self._events.emit(f"{event}.{SERVICE}.{operation}", params=params, model=model, context=context)
        body = json.dumps(params, allow_nan=False, default=_base64).encode()  # values come typed: {"N": "12"}
        self._events.emit(f"before-call.{SERVICE}.{operation}", model=model, params=params, context=context)
        status, data, headers = self._send(operation, body)
        if status == 200:
            parsed = {"Body": data} if body_mode() == "raw" and operation in ("Query", "BatchGetItem") \
                else _binary_decoded(json.loads(data)) if b'"B' in data else json.loads(data)
            parsed["ResponseMetadata"] = _metadata(status, headers)
            self._events.emit(f"after-call.{SERVICE}.{operation}", http_response=None, parsed=parsed, model=model,
                              context=context)
            return parsed
        error = _error(status, data, headers)
        self._events.emit(f"after-call.{SERVICE}.{operation}", http_response=None, parsed=error, model=model,
                          context=context)
        raise ClientError(error, operation)  # type: ignore[arg-type]

    def _send(self, operation: str, body: bytes) -> tuple[int, bytes, Any]:
        """The answer worth keeping: a success, an error not worth retrying, or the last attempt's."""
        for attempt in range(1, self._max_attempts + 1):
            last = attempt == self._max_attempts
            credentials = self._credentials.get_frozen_credentials()
            headers = self._signer.headers(TARGET_PREFIX + operation, body, credentials.access_key,
                                           credentials.secret_key, credentials.token)
            try:
                response = self._pool.urlopen("POST", self._url, body=body, headers=headers, retries=False,
                                              preload_content=True, redirect=False)
            except CONNECTION_ERRORS as error:
                if last:
                    raise EndpointConnectionError(endpoint_url=self._url, error=error) from error
                _back_off(attempt)
                continue
            status, data = response.status, response.data
            if not last and (_damaged(data, response.headers) or _retryable(status, data)):
                _back_off(attempt)
                continue
            return status, data, response.headers
        raise AssertionError("unreachable: the last attempt returns or raises")


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


def _back_off(attempt: int) -> None:
    time.sleep(random.uniform(0, min(MAX_BACKOFF_SECONDS, 0.05 * 2 ** attempt)))


def _damaged(data: bytes, headers: Any) -> bool:
    """DynamoDB signs every body with its CRC32; one that does not match was damaged on the way."""
    expected = headers.get("x-amz-crc32")
    return expected is not None and zlib.crc32(data) != int(expected)


def _retryable(status: int, data: bytes) -> bool:
    if status == 200:
        return False
    return status in RETRYABLE_STATUSES or _code(status, data) in RETRYABLE_CODES


def _code(status: int, data: bytes) -> str:
    try:
        found = json.loads(data) if data else {}
    except ValueError:
        found = {}
    kind = found.get("__type", "") if isinstance(found, dict) else ""
    return kind.rpartition("#")[2] or str(status)


def _error(status: int, data: bytes, headers: Any) -> dict[str, Any]:
    """The error as botocore parses it: `Error.Code` without its namespace, and the message."""
    try:
        found = json.loads(data) if data else {}
    except ValueError:
        found = {}
    found = found if isinstance(found, dict) else {}
    message = found.get("message") or found.get("Message") or ""
    error: dict[str, Any] = {"Error": {"Code": _code(status, data), "Message": message},
                             "ResponseMetadata": _metadata(status, headers)}
    if "Item" in found:  # ReturnValuesOnConditionCheckFailure
        error["Item"] = found["Item"]
    return error


def _metadata(status: int, headers: Any) -> dict[str, Any]:
    return {"HTTPStatusCode": status, "RequestId": headers.get("x-amzn-requestid", "")}
