"""A Docker for the proofs, where no engine runs: it records what `make deploy` asks of it, and its
push puts an image manifest of the tag into the (moto) ECR repository, as a real push would."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

from infra.deploy import Docker


class PushingDocker(Docker):
    def __init__(self, ecr) -> None:
        super().__init__("docker")
        self.ecr = ecr
        self.calls: list[tuple] = []

    def check(self) -> None:
        self.calls.append(("check",))

    def login(self, registry: str, username: str, password: str) -> None:
        self.calls.append(("login", registry, username))

    def build(self, context: Path, image: str) -> None:
        self.calls.append(("build", context, image))

    def push(self, image: str) -> None:
        self.calls.append(("push", image))
        repository, tag = image.split("/", 1)[1].rsplit(":", 1)
        digest = "sha256:" + hashlib.sha256(image.encode()).hexdigest()
        manifest = {"schemaVersion": 2, "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
                    "config": {"mediaType": "application/vnd.docker.container.image.v1+json", "size": 1024,
                               "digest": digest},
                    "layers": [{"mediaType": "application/vnd.docker.image.rootfs.diff.tar.gzip", "size": 4096,
                                "digest": digest}]}
        self.ecr.put_image(repositoryName=repository, imageTag=tag, imageManifest=json.dumps(manifest))


class NoDocker(Docker):
    """Any call fails the test: what must not need Docker."""

    def check(self) -> None:
        raise AssertionError("docker was needed")

    def _run(self, *args: str, input: str | None = None, env: dict[str, str] | None = None) -> None:
        raise AssertionError(f"docker {args[0]} was run")
