"""Starts `python -m chalicelib.local` as a separate process and talks HTTP to it
(end-to-end tests and benchmarks use it exactly as a person uses `make run`)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import requests

from chalicelib.local.processes import free_port
from chalicelib.local.stack import ROOT


class StackProcess:
    def __init__(self, data_dir: Path, api_key: str, extra_env: dict[str, str] | None = None) -> None:
        self.data_dir = data_dir
        self.api_key = api_key
        self.extra_env = dict(extra_env or {})  # e.g. OPENAI_BASE_URL of a model server
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self.log_path = data_dir.parent / f"{data_dir.name}-stack.log"
        self.process: subprocess.Popen | None = None
        self.session = requests.Session()

    @property
    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        env.update(RECON_DATA_DIR=str(self.data_dir), PORT=str(self.port), RECON_API_KEY=self.api_key,
                   **self.extra_env)
        return env

    def start(self, timeout: float = 90) -> StackProcess:
        self.data_dir.parent.mkdir(parents=True, exist_ok=True)
        self.session = requests.Session()  # started again: no connection kept to the last process
        self.process = subprocess.Popen([sys.executable, "-m", "chalicelib.local"], cwd=ROOT, env=self.env,
                                        stdout=open(self.log_path, "ab"), stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"local stack exited: {self.log_path.read_text()[-3000:]}")
            try:
                if requests.get(f"{self.url}/health", timeout=1).status_code == 200:
                    return self
            except (requests.ConnectionError, requests.Timeout):  # not up yet, or slow to answer (a busy machine)
                time.sleep(0.2)
        raise RuntimeError(f"local stack not up in {timeout} s: {self.log_path.read_text()[-3000:]}")

    def stack_info(self) -> dict:
        return json.loads((self.data_dir / "stack.json").read_text())

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            self.process.wait(timeout=30)

    def cli(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "chalicelib.cli", *args], cwd=ROOT, env=self.env,
                              capture_output=True, text=True, timeout=60)

    def request(self, method: str, path: str, json_body=None, key: str | None = "default", **kwargs):
        headers = kwargs.pop("headers", {})
        if key == "default":
            key = self.api_key
        if key:
            headers["X-API-KEY"] = key
        return self.session.request(method, self.url + path, json=json_body, headers=headers, timeout=30,
                                    **kwargs)
