"""Shared fixtures. Integration tests run on moto, with resources built from infra/template.yaml."""
from __future__ import annotations

import os

import pytest

# moto must never reach a real account; these are fakes for botocore's signer.
for name, value in {
    "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}.items():
    os.environ[name] = value
for name in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_DYNAMODB", "AWS_PROFILE"):
    os.environ.pop(name, None)

REGION = "us-east-1"
# The names Settings defaults to, so that app.py's event sources (named at import) match them.
TEST_PARAMETERS = {"Stage": "dev", "DataBucketName": "recon-dev-data"}


@pytest.fixture
def moto_aws():
    from moto import mock_aws

    with mock_aws():
        yield


@pytest.fixture
def services(moto_aws):
    """A container wired to moto, with every resource of the infra template provisioned."""
    from chalicelib.adapters.aws import AwsClients
    from chalicelib.container import Container, install
    from chalicelib.local.provision import provision
    from chalicelib.settings import Settings

    settings = Settings(region=REGION, local_mode=True)
    outputs = provision(AwsClients(settings), TEST_PARAMETERS, REGION, log=lambda _: None)
    assert (outputs["TableName"], outputs["BucketName"], outputs["BulkQueueName"]) == (
        settings.table_name, settings.bucket_name, settings.bulk_queue_name)
    container = Container(settings)
    from app import app
    from chalicelib.local.statemachines import local_workflows

    # State machines run in-process and synchronously in tests, with no waits between retries.
    container.file_import_workflows = local_workflows(app, TEST_PARAMETERS, REGION, log=lambda _: None,
                                                      synchronous=True, retry_delay_scale=0)
    container.run_workflows = local_workflows(app, TEST_PARAMETERS, REGION, log=lambda _: None, synchronous=True,
                                              retry_delay_scale=0, machine="ReconciliationRunStateMachine")
    install(container)
    yield container
    install(None)


@pytest.fixture
def api(services):
    """The Chalice app in-process (chalice.test.Client) with a key of environment 'acme'."""
    from chalice.test import Client

    from app import app
    from chalicelib.services.api_keys import create_key

    with Client(app) as client:
        yield ApiClient(client, create_key(services.api_keys, "acme")[1])


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
