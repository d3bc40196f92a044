"""A browser agent's secrets in AWS Secrets Manager (moto's locally): its portal login and its
saved browser contexts, one secret each, encrypted at rest with the account's KMS key.

Names: `<prefix>/<environment>/agents/<agent id>/<credentials|browser-context|pending-context>`,
so that an IAM policy can grant a worker its stage's secrets and nothing else. A context is the
browser's storage state (cookies, local storage) as zlib-compressed JSON: a secret holds at most
64 KB, and a context that does not fit is not kept (the next run then logs in again). A context
given up is overwritten with `null` rather than deleted: Secrets Manager keeps a deleted name for
a while, and the next pause would want it back at once.
"""
from __future__ import annotations

import base64
import json
import zlib
from collections.abc import Mapping
from typing import Any

from chalicelib.domain.agents.browser import Credentials

MAX_SECRET_CHARS = 65_536
CONTEXT_KINDS = {"saved": "browser-context", "pending": "pending-context"}


class SecretsManagerBrowserSecrets:
    def __init__(self, client: Any, prefix: str) -> None:
        self._client = client
        self._prefix = prefix.strip("/")

    def _name(self, environment: str, agent_id: str, leaf: str) -> str:
        return f"{self._prefix}/{environment}/agents/{agent_id}/{leaf}"

    def put_credentials(self, environment: str, agent_id: str, credentials: Credentials) -> None:
        self._put(self._name(environment, agent_id, "credentials"),
                  json.dumps({"username": credentials.username, "password": credentials.password}))

    def credentials(self, environment: str, agent_id: str) -> Credentials | None:
        text = self._get(self._name(environment, agent_id, "credentials"))
        if text is None:
            return None
        value = json.loads(text)
        return Credentials(value["username"], value["password"])

    def put_context(self, environment: str, agent_id: str, kind: str, state: Mapping[str, Any]) -> bool:
        packed = base64.b64encode(zlib.compress(json.dumps(state, separators=(",", ":")).encode(), 9)).decode()
        if len(packed) > MAX_SECRET_CHARS:
            return False
        self._put(self._name(environment, agent_id, CONTEXT_KINDS[kind]), packed)
        return True

    def context(self, environment: str, agent_id: str, kind: str) -> Mapping[str, Any] | None:
        text = self._get(self._name(environment, agent_id, CONTEXT_KINDS[kind]))
        if not text or text == "null":
            return None
        value = json.loads(zlib.decompress(base64.b64decode(text)))
        return value if isinstance(value, dict) else None

    def drop_context(self, environment: str, agent_id: str, kind: str) -> None:
        name = self._name(environment, agent_id, CONTEXT_KINDS[kind])
        if self._get(name) not in (None, "null"):
            self._put(name, "null")

    def delete_agent(self, environment: str, agent_id: str) -> None:
        for leaf in ("credentials", *CONTEXT_KINDS.values()):
            try:
                self._client.delete_secret(SecretId=self._name(environment, agent_id, leaf),
                                           ForceDeleteWithoutRecovery=True)
            except self._client.exceptions.ResourceNotFoundException:
                pass

    def _put(self, name: str, text: str) -> None:
        try:
            self._client.put_secret_value(SecretId=name, SecretString=text)
        except self._client.exceptions.ResourceNotFoundException:
            try:
                self._client.create_secret(Name=name, SecretString=text)
            except self._client.exceptions.ResourceExistsException:  # made by another call meanwhile
                self._client.put_secret_value(SecretId=name, SecretString=text)

    def _get(self, name: str) -> str | None:
        try:
            return str(self._client.get_secret_value(SecretId=name)["SecretString"])
        except self._client.exceptions.ResourceNotFoundException:
            return None
