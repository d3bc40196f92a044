"""The local stack's edges: methods it does not serve, its health when an embedded service
hangs or dies, and how it stops."""
import os
import signal
import subprocess
import sys
import time

import pytest
import requests

from chalicelib.local.launcher import StackProcess
from chalicelib.local.processes import free_port, pid_alive
from chalicelib.local.stack import ROOT


@pytest.mark.parametrize("method, path, allowed", [
    ("TRACE", "/data_streams", {"GET", "POST"}),
    ("DELETE", "/data_streams", {"GET", "POST"}),
    ("PUT", "/health", {"GET"}),
    ("BREW", "/records/bulk", {"POST"}),
    ("OPTIONS", "/data_streams", {"GET", "POST"}),
])
def test_a_method_a_path_does_not_serve_answers_405_with_allow(stack, method, path, allowed):
    response = stack.request(method, path)

    assert response.status_code == 405, response.text
    assert response.headers["Content-Type"].startswith("application/json")
    assert set(response.json()) == {"message"}
    assert {m.strip() for m in response.headers["Allow"].split(",")} == allowed


def _wait_exit(process: subprocess.Popen, timeout: float) -> int | None:
    try:
        return process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        return None


def _wait_gone(pids, timeout=10) -> bool:
    deadline = time.monotonic() + timeout
    while any(pid_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    return not any(pid_alive(pid) for pid in pids)


def test_health_answers_503_naming_the_embedded_service_that_does_not_answer(tmp_path):
    stack = StackProcess(tmp_path / "data", api_key="rk_health").start()
    try:
        dynalite, moto = stack.stack_info()["child_pids"]
        for pid, name in ((dynalite, "dynalite"), (moto, "moto")):
            os.kill(pid, signal.SIGSTOP)
            try:
                response = stack.request("GET", "/health", key=None)
            finally:
                os.kill(pid, signal.SIGCONT)
            assert response.status_code == 503, response.text
            assert name in response.json()["message"]
            assert stack.request("GET", "/health", key=None).json() == {"status": "ok"}
    finally:
        stack.stop()


def test_a_stack_whose_embedded_service_died_stops_and_says_which(tmp_path):
    stack = StackProcess(tmp_path / "data", api_key="rk_dies").start()
    try:
        dynalite, moto = stack.stack_info()["child_pids"]

        os.kill(moto, signal.SIGKILL)

        assert _wait_exit(stack.process, timeout=20) == 1
        assert "[local] stopping: AWS server (moto: SQS, Step Functions; s3rver: S3) exited" in stack.log_path.read_text()
        assert _wait_gone([dynalite])
        assert not (stack.data_dir / "stack.json").exists()
    finally:
        stack.stop()


def test_sigterm_to_the_process_group_of_make_run_stops_everything_without_a_traceback(tmp_path):
    # Given the stack under a parent shell, as under `make run`, busy ingesting
    port, data_dir, log = free_port(), tmp_path / "data", tmp_path / "run.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(RECON_DATA_DIR=str(data_dir), PORT=str(port), RECON_API_KEY="rk_sigterm")
    parent = subprocess.Popen(["sh", "-c", f"'{sys.executable}' -m chalicelib.local; exit $?"], cwd=ROOT, env=env,
                              stdout=open(log, "wb"), stderr=subprocess.STDOUT, start_new_session=True)
    stack = StackProcess(data_dir, api_key="rk_sigterm")
    stack.url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                if requests.get(f"{stack.url}/health", timeout=1).status_code == 200:
                    break
            except requests.ConnectionError:
                pass
            assert time.monotonic() < deadline and parent.poll() is None, log.read_text()
            time.sleep(0.2)
        info = stack.stack_info()
        assert stack.request("POST", "/data_streams", {"key": "busy", "name": "Busy"}).status_code == 201
        items = [{"date": "2026-11-01", "data_stream_key": "busy", "amount": n + 1, "direction": "credit"}
                 for n in range(1000)]
        assert stack.request("POST", "/records/bulk", {"records": items}).status_code == 202

        # When the terminal's process group gets SIGTERM (the stack gets it twice: from the
        # signal and again when its parent dies)
        os.killpg(parent.pid, signal.SIGTERM)

        # Then every process ends, quietly
        _wait_exit(parent, timeout=30)
        assert _wait_gone([info["pid"], *info["child_pids"]], timeout=30)
        output = log.read_text()
        assert "[local] stopping" in output
        assert "Traceback" not in output, output[-3000:]
    finally:
        if parent.poll() is None:
            os.killpg(parent.pid, signal.SIGKILL)
