"""boto3 clients for the configured endpoints: real AWS, the embedded local AWS, or moto."""
from __future__ import annotations

from functools import cached_property

import boto3
import botocore.session
from botocore.config import Config
from botocore.loaders import Loader, create_loader

from chalicelib.settings import Settings

_RETRIES = Config(retries={"max_attempts": 8, "mode": "adaptive"}, max_pool_connections=32)
_SIGV4 = Config(signature_version="s3v4")
# On AWS, the bucket's own host (https://<bucket>.s3.<region>.amazonaws.com): a path-style URL on the
# global endpoint is redirected for buckets outside us-east-1, which a browser's presigned PUT cannot
# follow. A custom endpoint (s3rver on 127.0.0.1, moto) has no per-bucket host: path style stays there.
_VIRTUAL = Config(s3={"addressing_style": "virtual"})
_UNCHECKED = Config(parameter_validation=False)
# The service models, read from botocore's JSON files once per process and shared by every
# session (read-only data): a fresh loader costs about 0.2 s for six clients.
_MODELS: Loader = create_loader()


class AwsClients:
    def __init__(self, settings: Settings) -> None:
        self._settings = settings

    @cached_property
    def _session(self) -> boto3.session.Session:
        core = botocore.session.get_session()
        core.register_component("data_loader", _MODELS)
        # The embedded AWS checks no signature; fixed credentials keep a developer's own AWS
        # profile out of local runs entirely.
        fixed = {"aws_access_key_id": "local", "aws_secret_access_key": "local"} if self._settings.local_mode else {}
        session = boto3.session.Session(region_name=self._settings.region, botocore_session=core, **fixed)
        # boto3 appends its own data folder to the loader's path on every session: keep it once.
        _MODELS.search_paths[:] = list(dict.fromkeys(_MODELS.search_paths))
        return session

    def client(self, service: str, config: Config | None = None):
        """`config` is merged over the shared one (a caller's own timeouts or retries)."""
        # S3 presigns with SigV4: boto3 would otherwise sign URLs with SigV2, which buckets made
        # since 2020 refuse.
        shared = _RETRIES.merge(_SIGV4) if service == "s3" else _RETRIES
        if service == "s3" and self.endpoint("s3") is None:
            shared = shared.merge(_VIRTUAL)
        if service == "dynamodb":  # the table checks what it is sent; checking it here first was a
            shared = shared.merge(_UNCHECKED)  # tenth of ingestion's CPU (py-spy, issue 30)
        shared = shared.merge(config) if config is not None else shared
        return self._session.client(service, endpoint_url=self.endpoint(service), config=shared)

    def endpoint(self, service: str) -> str | None:
        """Where `service` is served; None for AWS's own endpoint."""
        settings = self._settings
        own = {"dynamodb": settings.dynamodb_endpoint, "s3": settings.s3_endpoint or settings.aws_endpoint,
               "bedrock-runtime": settings.bedrock_endpoint}
        return (own[service] if service in own else settings.aws_endpoint) or None

    @cached_property
    def dynamodb(self):
        return self.client("dynamodb")

    @cached_property
    def table_client(self):
        """What the table sends its requests with: the wire (adapters/dynamodb/wire.py), or the
        botocore client itself (`Settings.dynamodb_wire` says which)."""
        if not self._settings.dynamodb_wire:
            return self.dynamodb
        from chalicelib.adapters.dynamodb.wire import DynamoWire

        return DynamoWire(self.dynamodb, self._session.get_credentials(), ca_bundle=self._settings.aws_ca_bundle)

    @cached_property
    def s3(self):
        return self.client("s3")

    @cached_property
    def sqs(self):
        return self.client("sqs")
