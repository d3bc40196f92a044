"""A Docker for the proofs, where no engine runs: it records what `make deploy` asks of it, and its
push puts an image manifest of the tag into the (moto) ECR repository, as a real push would. In the
proof's process (`PushingDocker`), or as the `docker` command of a `make deploy` run whole (`install_cli`)."""
from __future__ import annotations

import hashlib
import json
import os
import sys
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
        put_manifest(self.ecr, image)


def put_manifest(ecr, image: str) -> None:
    """What a push leaves in the repository: an image manifest under the tag."""
    repository, tag = image.split("/", 1)[1].rsplit(":", 1)
    digest = "sha256:" + hashlib.sha256(image.encode()).hexdigest()
    manifest = {"schemaVersion": 2, "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
                "config": {"mediaType": "application/vnd.docker.container.image.v1+json", "size": 1024,
                           "digest": digest},
                "layers": [{"mediaType": "application/vnd.docker.image.rootfs.diff.tar.gzip", "size": 4096,
                            "digest": digest}]}
    ecr.put_image(repositoryName=repository, imageTag=tag, imageManifest=json.dumps(manifest))


def install_cli(bin_dir: Path, log: Path) -> Path:
    """A `docker` command for `make deploy` run whole (a process of its own): `cli` below, each call appended
    to `log` as a JSON line; its pushes reach the ECR of AWS_ENDPOINT_URL. Returns the directory to put first
    on PATH."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    script = bin_dir / "docker"
    root = Path(__file__).resolve().parents[2]
    script.write_text(f"#!/bin/sh\nPYTHONPATH='{root}' DOCKER_DOUBLE_LOG='{log}' exec '{sys.executable}' -c "
                      f"'from tests.deploy.docker_double import cli; cli()' \"$@\"\n")
    script.chmod(0o755)
    return bin_dir


def cli(argv: list[str] | None = None) -> None:
    """`docker version`, `login`, `build` and `push` as infra/deploy.py Docker runs them."""
    args = argv if argv is not None else sys.argv[1:]
    with open(os.environ["DOCKER_DOUBLE_LOG"], "a") as log:
        log.write(json.dumps(args) + "\n")
    if args[0] == "version":
        print("27.5.1-proof")
    elif args[0] == "login":
        sys.stdin.read()
        print("Login Succeeded")
    elif args[0] == "push":
        import boto3

        put_manifest(boto3.client("ecr"), args[1])


class NoDocker(Docker):
    """Any call fails the test: what must not need Docker."""

    def check(self) -> None:
        raise AssertionError("docker was needed")

    def _run(self, *args: str, input: str | None = None, env: dict[str, str] | None = None) -> None:
        raise AssertionError(f"docker {args[0]} was run")
