"""Shared fixtures. Integration tests run on moto, with resources built from infra/template.yaml."""
from __future__ import annotations

import os
from contextlib import contextmanager

import pytest

from tests.support.worlds import WORLDS

# moto must never reach a real account; these are fakes for botocore's signer.
for name, value in {
    "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}.items():
    os.environ[name] = value
for name in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_DYNAMODB", "AWS_ENDPOINT_URL_S3", "AWS_PROFILE"):
    os.environ.pop(name, None)

REGION = "us-east-1"
# The names Settings defaults to, so that app.py's event sources (named at import) match them.
TEST_PARAMETERS = {"Stage": "dev", "DataBucketName": "recon-dev-data"}


_module_worlds_open = 0  # module-scoped moto states open in this process (see _moto)


def _clients_built_once_per_process() -> None:
    """Every test's container gets the boto3 clients the first one built (the same code builds
    them): moto intercepts any client made after it is imported (its stubber is one of botocore's
    built-in handlers), and building nine clients was a third of a test's setup."""
    import moto  # noqa: F401  (first: a client built before moto's stubber is registered is never mocked)

    from chalicelib.adapters.aws import AwsClients

    build, built = AwsClients.client, {}

    def client(self: AwsClients, service: str, config=None):
        key = (service, self.endpoint(service), self._settings.region, self._settings.local_mode, id(config))
        if key not in built:  # a config is a module's constant (identity.SESSION_CALLS): its id names it
            built[key] = build(self, service, config)
        return built[key]
    AwsClients.client = client  # type: ignore[method-assign]


_clients_built_once_per_process()


def _moto_transactions_back_up_each_table_once() -> None:
    """moto's TransactWriteItems deep-copies its table once for every action, before any, for its
    rollback: a hundred copies of the whole table for a transaction of a hundred claims, all the
    same snapshot. Here each table is copied once a transaction (the same copy serves every action).
    No other request runs meanwhile: moto's DynamoDB requests go one at a time in the suite
    (`_moto_applies_one_dynamodb_request_at_a_time`), so nothing writes a table while it is copied
    and no other call sees the swapped `copy`. tests/unit/test_moto_speedups.py holds the rollback."""
    import copy

    from moto.dynamodb import models

    run = models.DynamoDBBackend.transact_write_items

    class TablesCopiedOnce:
        """`copy` as the models module sees it during a transaction: a Table deep-copied once."""

        def __init__(self) -> None:
            self.copies: dict[int, tuple[object, object]] = {}

        def deepcopy(self, value, memo=None):
            if not isinstance(value, models.Table):
                return copy.deepcopy(value, memo)
            kept = self.copies.get(id(value))
            if kept is None or kept[0] is not value:
                kept = self.copies[id(value)] = (value, copy.deepcopy(value, memo))
            return kept[1]

        def __getattr__(self, name):
            return getattr(copy, name)

    def transact_write_items(self, transact_items):
        models.copy = TablesCopiedOnce()
        try:
            return run(self, transact_items)
        finally:
            models.copy = copy
    models.DynamoDBBackend.transact_write_items = transact_write_items


_moto_transactions_back_up_each_table_once()


# DynamoDB operations whose answers are items: moto walks each item through botocore's output
# model to serialize it (most of an import test's time); their model is plain JSON of the items.
MOTO_ITEM_OPERATIONS = frozenset({"GetItem", "PutItem", "UpdateItem", "DeleteItem", "Query", "Scan", "BatchGetItem",
                                  "BatchWriteItem", "TransactGetItems"})


def moto_item_answer_as_json(result: dict) -> str:
    """What moto's DynamoDB serializer writes for MOTO_ITEM_OPERATIONS (binary values base64, as on
    the wire); tests/unit/test_moto_speedups.py holds the two equal."""
    import base64
    import json

    def binary(value):
        if isinstance(value, bytes | bytearray):
            return base64.b64encode(value).decode()
        raise TypeError(f"{type(value).__name__} in a DynamoDB answer")
    return json.dumps(result, default=binary)


MOTO_PLAIN_JSON = {"on": True}  # off: moto's own serializer (tests/unit/test_moto_speedups.py compares)


def _moto_answers_items_as_plain_json() -> None:
    from moto.dynamodb.responses import DynamoResult

    serialize = DynamoResult.execute_result

    def execute_result(self: DynamoResult, context):
        if not MOTO_PLAIN_JSON["on"] or context.operation_model.name not in MOTO_ITEM_OPERATIONS:
            return serialize(self, context)
        return 200, {"Content-Type": "application/x-amz-json-1.0"}, moto_item_answer_as_json(self.result)
    DynamoResult.execute_result = execute_result  # type: ignore[method-assign]


_moto_answers_items_as_plain_json()

MOTO_CAST_VALUE = {}  # moto's own DynamoType.cast_value (tests/unit/test_moto_speedups.py compares)


def _moto_casts_scalars_directly() -> None:
    """moto compares and sorts key values through DynamoType.cast_value, which makes five type
    checks before it returns a string as it is, and a query compares every item of the table:
    a fifth of an API test's time. Strings, binaries and booleans are their value, unchecked."""
    from moto.dynamodb.models.dynamo_type import DynamoType

    cast = MOTO_CAST_VALUE.setdefault("cast_value", DynamoType.cast_value.fget)

    def cast_value(self: DynamoType):
        kind = self.type
        if kind == "S" or kind == "B" or kind == "BOOL":
            return self.value
        return cast(self)

    def equal(self: DynamoType, other: DynamoType) -> bool:
        return self.type == other.type and cast_value(self) == cast_value(other)

    DynamoType.cast_value = property(cast_value)  # type: ignore[method-assign,assignment]
    DynamoType.__eq__ = equal  # type: ignore[method-assign,assignment]
    DynamoType.__ne__ = lambda self, other: not equal(self, other)  # type: ignore[method-assign,assignment]


_moto_casts_scalars_directly()


def _moto_applies_one_dynamodb_request_at_a_time() -> None:
    """DynamoDB applies each request atomically: a conditional put checks and writes as one step.
    moto checks, then writes, in Python; two threads between the two (a bulk action's items, four
    at a time, appending to the audit chain's head) both pass the check and the second write
    replaces the first. One lock around each DynamoDB request gives moto DynamoDB's atomicity."""
    import threading

    from moto.dynamodb.responses import DynamoHandler

    call_action = DynamoHandler.call_action
    one_at_a_time = threading.RLock()

    def atomic_call_action(self: DynamoHandler):
        with one_at_a_time:
            return call_action(self)

    DynamoHandler.call_action = atomic_call_action  # type: ignore[method-assign]


_moto_applies_one_dynamodb_request_at_a_time()


@contextmanager
def _moto(scope: str):
    """moto for one test or one module. moto nests by sharing one state (it resets only when the
    outermost mock closes), so a test's own moto inside a module's would see and change that module's
    world: refused, not shared. In a module, put tests of a world of their own before those sharing one."""
    global _module_worlds_open
    from moto import mock_aws

    assert not _module_worlds_open, (
        f"a {scope}-scoped moto was opened while a module-scoped world is live in this process: it would share "
        "that world's state; run the tests of a fresh world before the module's shared-world tests")
    with mock_aws():
        _module_worlds_open += scope == "module"
        try:
            yield
        finally:
            _module_worlds_open -= scope == "module"


@contextmanager
def provisioned_services():
    """A container wired to the open moto, with every resource of the infra template provisioned
    (once a process; restored after), installed as the process's container until the block ends."""
    from chalicelib.adapters.aws import AwsClients
    from chalicelib.container import Container, install
    from chalicelib.local.provision import provision
    from chalicelib.settings import Settings

    settings = Settings(region=REGION, local_mode=True)

    def provisioned() -> dict[str, str]:
        return provision(AwsClients(settings), TEST_PARAMETERS, REGION, log=lambda _: None)
    outputs = WORLDS.restore_or_build("provisioned", provisioned)
    assert (outputs["TableName"], outputs["BucketName"], outputs["BulkQueueName"]) == (
        settings.table_name, settings.bucket_name, settings.bulk_queue_name)
    # The pool's ids are made up at its creation, as on AWS, where the deploy hands them to the functions.
    settings = settings.model_copy(update={"user_pool_id": outputs["UserPoolId"],
                                           "user_pool_client_id": outputs["UserPoolClientId"]})
    container = Container(settings)
    from app import app
    from chalicelib.local.statemachines import local_workflows

    # State machines run in-process and synchronously in tests, with no waits between retries.
    container.file_import_workflows = local_workflows(app, TEST_PARAMETERS, REGION, log=lambda _: None,
                                                      synchronous=True, retry_delay_scale=0)
    container.run_workflows = local_workflows(app, TEST_PARAMETERS, REGION, log=lambda _: None, synchronous=True,
                                              retry_delay_scale=0, machine="ReconciliationRunStateMachine")
    # The identity provider: a fake pool whose tokens our verifier checks (tests/fakes/identity.py).
    from tests.fakes.identity import FakeIdentityProvider
    container.identity = FakeIdentityProvider()
    install(container)
    try:
        yield container
    finally:
        install(None)


@contextmanager
def api_client(services):
    """The Chalice app in-process (chalice.test.Client) with a key of environment 'acme'."""
    from chalice.test import Client

    from app import app
    from chalicelib.services.api_keys import create_key

    with Client(app) as client:
        yield ApiClient(client, create_key(services.api_keys, "acme")[1])


@pytest.fixture
def moto_aws():
    with _moto("function"):
        yield


@pytest.fixture
def services(moto_aws):
    """A container wired to moto, with every resource of the infra template provisioned."""
    with provisioned_services() as container:
        yield container


@pytest.fixture
def api(services):
    """The Chalice app in-process (chalice.test.Client) with a key of environment 'acme'."""
    with api_client(services) as client:
        yield client


# The same, built once per module (per xdist worker), for tests that leave the world as they found it
# (module_state_unchanged checks it after each). Tests of a world of their own come first in such a module.

@pytest.fixture(scope="module")
def module_services():
    with _moto("module"), provisioned_services() as container:
        yield container


@pytest.fixture(scope="module")
def module_api(module_services):
    with api_client(module_services) as client:
        yield client


@pytest.fixture(scope="module")
def module_worker(module_services):
    return make_worker(module_services)


@pytest.fixture
def module_state_unchanged(module_services):
    """Fails a test that changed the module's shared world (what its tables, bucket and queues hold),
    so that no later test sees its effects. An API key's last use is bookkeeping of every request."""
    before = moto_state(module_services)
    yield
    assert moto_state(module_services) == before, "a test of the module's shared world changed it"


def moto_state(services) -> dict:
    aws, settings = services.aws, services.settings
    items, page = [], {}
    while True:
        answer = aws.dynamodb.scan(TableName=settings.table_name, **page)
        items += [{k: v for k, v in item.items() if k != "last_used_at"} for item in answer["Items"]]
        if "LastEvaluatedKey" not in answer:
            break
        page = {"ExclusiveStartKey": answer["LastEvaluatedKey"]}
    objects = [(o["Key"], o["ETag"]) for page in aws.s3.get_paginator("list_objects_v2").paginate(
        Bucket=settings.bucket_name) for o in page.get("Contents", [])]
    queues = {url: aws.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=[
        "ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"])["Attributes"]
        for url in aws.sqs.list_queues().get("QueueUrls", [])}
    schedules = aws.client("scheduler").list_schedules()["Schedules"]
    return {"items": sorted(items, key=repr), "objects": sorted(objects), "queues": queues,
            "schedules": sorted(repr(s) for s in schedules)}


class ApiClient:
    """Sends JSON with a key, as an API client would."""

    def __init__(self, client, key: str) -> None:
        self.client = client
        self.key = key

    def request(self, method: str, path: str, json_body=None, *, key: str | None = "default",
                headers: dict | None = None, body: str | bytes | None = None):
        import json

        sent_headers = {}
        if key == "default":
            key = self.key
        if key is not None:
            sent_headers["X-API-KEY"] = key
        if json_body is not None:
            body = json.dumps(json_body)
            sent_headers["Content-Type"] = "application/json"
        sent_headers.update(headers or {})
        return self.client.http.request(method, path, headers=sent_headers, body=body)

    def get(self, path, **kw):
        return self.request("GET", path, **kw)

    def post(self, path, json_body=None, **kw):
        return self.request("POST", path, json_body, **kw)

    def patch(self, path, json_body=None, **kw):
        return self.request("PATCH", path, json_body, **kw)

    def delete(self, path, **kw):
        return self.request("DELETE", path, **kw)


@pytest.fixture
def worker(services):
    """Runs the app's SQS handlers in-process, as the local stack does, until the queues are empty."""
    return make_worker(services)


def make_worker(services):
    """Runs the app's SQS handlers in-process, as the local stack does, until the queues are empty."""
    from app import app
    from chalicelib.local.runtime import LocalRuntime

    failures: list[str] = []
    runtime = LocalRuntime(app, services.aws.sqs, REGION, log=failures.append, redelivery_seconds=0)

    class Worker:
        def drain(self, max_batches: int = 100) -> int:
            """Deliver until empty; a handler failure fails the test (use deliver_once to expect one)."""
            handled = 0
            for _ in range(max_batches):
                batch = sum(runtime.deliver_once(config) for config in runtime.queue_handlers)
                assert not failures, failures
                if batch == 0:
                    return handled
                handled += batch
            raise AssertionError("queues did not drain")

    return Worker()


@pytest.fixture(scope="module")
def chromium():
    """One Chromium for a module (starting Playwright's driver and the browser costs about 1 s); each
    test takes a fresh context of it."""
    from playwright.sync_api import sync_playwright

    from chalicelib.adapters.browser_portal import CHROMIUM_ARGS
    from tests.support.chromium import CHROMIUM

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        yield launched
        launched.close()
