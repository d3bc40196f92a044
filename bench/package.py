"""Package sizes against Lambda's limits, and cold import times of the packaged app in a clean
Python 3.12 (only the unpacked app, the layer and boto3 on sys.path, as on Lambda).

    .venv/bin/python bench/package.py

Each import time is the median of fresh interpreters, with the bare interpreter's start-up
measured the same way in the same run as the baseline.
"""
from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from infra import deploy, packaging  # noqa: E402
from infra.functions import FUNCTIONS, GROUPS, role_output  # noqa: E402

RUNS = 7
PLACEHOLDER_OUTPUTS = {**{role_output(group): "arn:aws:iam::123456789012:role/bench" for group in GROUPS},
                       "TableName": "t", "BucketName": "b", "BulkQueueName": "q", "InvestigationQueueName": "i",
                       "AgentRunQueueName": "a", "ScheduleGroupName": "g",
                       "WebhookEventQueueName": "we", "WebhookDeliveryQueueName": "wd", "EventBusName": "eb",
                       "SchedulerRoleArn": "arn:aws:iam::123456789012:role/scheduler",
                       "FileImportStateMachineArn": "arn:aws:states:us-east-1:123456789012:stateMachine:f",
                       "ReconciliationRunStateMachineArn": "arn:aws:states:us-east-1:123456789012:stateMachine:r",
                       "BrowserRunStateMachineArn": "arn:aws:states:us-east-1:123456789012:stateMachine:br",
                       "SecretsPrefix": "recon-bench", "MailFrom": "recon@example.com",
                       "ModelId": "anthropic.claude-3-5-haiku-20241022-v1:0", "UserPoolId": "us-east-1_bench",
                       "UserPoolClientId": "bench",
                       "EngineLayerArn": "arn:aws:lambda:us-east-1:123456789012:layer:engine:1"}


def timed(python: str, paths: list[str], code: str) -> float:
    script = f"import sys; sys.path[:0] = {paths!r}\n{code}"
    times = []
    for _ in range(RUNS):
        started = time.perf_counter()
        subprocess.run([python, "-I", "-S", "-c", script], check=True,
                       env={"AWS_DEFAULT_REGION": "us-east-1", "RECON_BUCKET_NAME": "b", "PATH": "/usr/bin:/bin"})
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    layer = packaging.build_layer()
    app, _ = packaging.package_app(deploy.stage_config("bench", PLACEHOLDER_OUTPUTS), "bench")
    print(f"app zip: {packaging.mib(app.zipped_bytes)} zipped (limit {packaging.mib(packaging.MAX_DIRECT_UPLOAD_ZIP)}), "
          f"{packaging.mib(app.unzipped_bytes)} unzipped")
    print(f"engine layer: {packaging.mib(layer.zipped_bytes)} zipped, {packaging.mib(layer.unzipped_bytes)} unzipped")
    largest = app.unzipped_bytes + layer.unzipped_bytes
    print(f"largest function (app + layer): {packaging.mib(largest)} of {packaging.mib(packaging.MAX_UNZIPPED)}, "
          f"margin {packaging.mib(packaging.MAX_UNZIPPED - largest)}; "
          f"{sum(f.engine for f in FUNCTIONS.values())} of {len(FUNCTIONS)} functions carry the layer")

    python = packaging.find_runtime_python()
    boto3_dir = packaging.runtime_boto3()
    with tempfile.TemporaryDirectory() as tmp:
        task = packaging.unpack(app.zip_path, Path(tmp) / "task")
        opt = packaging.unpack(layer.zip_path, Path(tmp) / "opt") / "python"
        paths = [str(task), str(opt), str(boto3_dir)]
        bare = timed(python, [], "pass")
        boto = timed(python, paths, "import boto3")
        api = timed(python, paths, "import app")
        worker = timed(python, paths, "import app\nimport chalicelib.domain.matching")
        investigation = timed(python, paths, "import app\nimport chalicelib.domain.investigations.engine")
    print(f"cold start, median of {RUNS} fresh python{packaging.PYTHON_VERSION} -I -S:")
    print(f"  bare interpreter              {bare * 1000:7.0f} ms (baseline)")
    print(f"  import boto3                  {boto * 1000:7.0f} ms")
    print(f"  API function (import app)     {api * 1000:7.0f} ms  ({(api - bare) * 1000:.0f} ms over the baseline)")
    print(f"  run worker (+ the engine)     {worker * 1000:7.0f} ms  ({(worker - bare) * 1000:.0f} ms over the baseline)")
    print(f"  investigation worker          {investigation * 1000:7.0f} ms  ({(investigation - bare) * 1000:.0f} ms over the baseline)")


if __name__ == "__main__":
    main()
