"""A Lambda cold start's Python work: `import app` from the packaged app and its layer, unpacked
apart as Lambda does (/var/task, /opt/python, the runtime's boto3), in a clean Python 3.12 that
may not write byte code (Lambda's code directories are read-only). Side by side in the same run:
the same trees with every `__pycache__` removed, as the package was before it shipped byte code.

    .venv/bin/python bench/cold_start.py [--repeat 7] [--keep DIR] [--against DIR] [--requests]

Prints the median CPU seconds of the child process (interpreter start included) for each case.

--keep DIR     unpack into DIR and leave it there: DIR/task, DIR/opt/python and build/runtime-boto3 are
               what a function sees, e.g. for `python3.12 -I -S -B -X importtime -c "import sys;
               sys.path[:0] = [...]; import app"`.
--against DIR  a tree an earlier run kept (say of the commit before a change): measured in the same
               run, interleaved, as a third case.
--requests     also what the first requests cost after `import app`, in the same cold process: the
               API's GET /v1/records (an API key checked, a stream's records listed) and one sweep
               of the sweeper (every minute), against a moto server this process starts and
               provisions (its own CPU is not the child's).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from infra import deploy, packaging  # noqa: E402

PROBE = ("import resource, sys; sys.path[:0] = sys.argv[1:]; import app; "
         "usage = resource.getrusage(resource.RUSAGE_SELF); print(usage.ru_utime + usage.ru_stime)")

# argv: the request ("api" or "sweeper"), the API key, then the paths. Prints one JSON line: the CPU
# seconds of `import app`, of the first request and of a second one, and their answers.
REQUEST_PROBE = """
import json, resource, sys, uuid
which, key = sys.argv[1], sys.argv[2]
sys.path[:0] = sys.argv[3:]

def cpu():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime

import app
imported = cpu()

class Context:
    function_name = "recon-coldbench"
    memory_limit_in_mb = 1024
    aws_request_id = "bench"
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:recon-coldbench"

    def get_remaining_time_in_millis(self):
        return 300_000

def api():
    resource, query = "/v1/records", {"data_stream_key": "bank"}
    headers = {"Host": "abc.execute-api.us-east-1.amazonaws.com", "X-API-KEY": key}
    event = {"resource": resource, "path": resource, "httpMethod": "GET", "headers": headers,
             "multiValueHeaders": {k: [v] for k, v in headers.items()}, "queryStringParameters": query,
             "multiValueQueryStringParameters": {k: [v] for k, v in query.items()}, "pathParameters": None,
             "stageVariables": None, "body": None, "isBase64Encoded": False,
             "requestContext": {"resourcePath": resource, "httpMethod": "GET", "path": "/api" + resource,
                                "stage": "api", "requestId": str(uuid.uuid4()), "accountId": "123456789012",
                                "identity": {"sourceIp": "127.0.0.1"}}}
    return app.app(event, Context())["statusCode"]

def sweeper():
    event = {"version": "0", "id": str(uuid.uuid4()), "detail-type": "Scheduled Event", "source": "aws.events",
             "account": "123456789012", "time": "2026-11-29T00:00:00Z", "region": "us-east-1",
             "resources": ["arn:aws:events:us-east-1:123456789012:rule/recon-coldbench-sweep"], "detail": {}}
    app.sweep_stuck_jobs(event, Context())
    return "ok"

call = {"api": api, "sweeper": sweeper}[which]
answers = [call()]
first = cpu()
answers.append(call())
second = cpu()
print(json.dumps({"import": imported, "first": first - imported, "second": second - first, "answers": answers}))
"""


def cpu_seconds(python: str, paths: list[Path], environment: dict[str, str]) -> float:
    done = subprocess.run([python, "-I", "-S", "-B", "-c", PROBE, *map(str, paths)], capture_output=True,
                          text=True, env=environment, check=True)
    return float(done.stdout.strip().splitlines()[-1])


def request_seconds(python: str, paths: list[Path], environment: dict[str, str], which: str, key: str) -> dict:
    done = subprocess.run([python, "-I", "-S", "-B", "-c", REQUEST_PROBE, which, key, *map(str, paths)],
                          capture_output=True, text=True, env=environment)
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-3000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def without_byte_code(tree: Path, copy: Path) -> Path:
    shutil.copytree(tree, copy, ignore=shutil.ignore_patterns("__pycache__"))
    return copy


def moto_stage() -> tuple[object, str, str]:
    """A moto server with the stage's resources, an API key of environment 'acme' and its stream 'bank'."""
    import logging

    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # a line per request otherwise

    from chalicelib.adapters.aws import AwsClients
    from chalicelib.container import Container
    from chalicelib.domain.data_streams import StreamType
    from chalicelib.local.provision import provision
    from chalicelib.services.api_keys import create_key
    from chalicelib.services.data_streams import create_stream
    from chalicelib.settings import Settings

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    url = f"http://127.0.0.1:{port}"
    settings = Settings(region="us-east-1", local_mode=True, aws_endpoint=url, dynamodb_endpoint=url, s3_endpoint=url)
    provision(AwsClients(settings), {"Stage": "dev", "DataBucketName": settings.bucket_name}, "us-east-1",
              log=lambda _: None)
    services = Container(settings)
    secret = create_key(services.api_keys, "acme")[1]
    create_stream(services.ports.data_streams, "acme", key="bank", name="Bank", type_=StreamType.API)
    return server, url, secret


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--keep", type=Path, help="unpack into this directory and leave it there")
    parser.add_argument("--against", type=Path, help="a directory an earlier run kept, measured beside")
    parser.add_argument("--requests", action="store_true", help="also the first requests after the import")
    args = parser.parse_args()
    work = args.keep.resolve() if args.keep else Path(tempfile.mkdtemp(prefix="recon-bench-cold-"))
    if args.keep:
        shutil.rmtree(work, ignore_errors=True)
    stage = "coldbench"
    server = None
    try:
        app, _ = packaging.package_app(deploy.stage_config(stage, deploy._placeholder_outputs()), stage)
        layer = packaging.build_layer()
        task = packaging.unpack(app.zip_path, work / "task")
        opt = packaging.unpack(layer.zip_path, work / "opt")
        boto3 = packaging.runtime_boto3()
        cases = {"as packaged": [task, opt / "python", boto3],
                 "no byte code (before)": [without_byte_code(task, work / "task-bare"),
                                           without_byte_code(opt / "python", work / "opt-bare"), boto3]}
        if args.against:
            against = args.against.resolve()
            cases[f"kept in {against}"] = [against / "task", against / "opt" / "python", boto3]
        python = packaging.find_runtime_python()
        environment = {"PATH": os.environ.get("PATH", ""), "LANG": "C.UTF-8", "AWS_DEFAULT_REGION": "us-east-1",
                       "AWS_LAMBDA_FUNCTION_NAME": "recon-coldbench", "PYTHONDONTWRITEBYTECODE": "1"}
        loads = [os.getloadavg()[0]]
        times: dict[str, list[float]] = {name: [] for name in cases}
        for _ in range(args.repeat):  # interleaved, so that the machine's load falls on both alike
            for name, paths in cases.items():
                times[name].append(cpu_seconds(python, paths, environment))
            loads.append(os.getloadavg()[0])
        print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, load average {min(loads):.1f} to "
              f"{max(loads):.1f}; {python}")
        for name, measured in times.items():
            print(f"import app, {name}: median {statistics.median(measured):.2f} s CPU "
                  f"(min {min(measured):.2f}, max {max(measured):.2f}, {args.repeat} runs)")
        if args.requests:
            server, url, key = moto_stage()
            served = {**environment, "AWS_ENDPOINT_URL": url, "AWS_ACCESS_KEY_ID": "bench",
                      "AWS_SECRET_ACCESS_KEY": "bench"}
            measured_cases = {name: paths for name, paths in cases.items() if name != "no byte code (before)"}
            for which in ("api", "sweeper"):
                results: dict[str, list[dict]] = {name: [] for name in measured_cases}
                loads = [os.getloadavg()[0]]
                for _ in range(args.repeat):
                    for name, paths in measured_cases.items():
                        results[name].append(request_seconds(python, paths, served, which, key))
                    loads.append(os.getloadavg()[0])
                what = "GET /v1/records" if which == "api" else "a sweep"
                print(f"{what}, load average {min(loads):.1f} to {max(loads):.1f}:")
                for name, runs in results.items():
                    medians = {part: statistics.median(r[part] for r in runs) for part in ("import", "first", "second")}
                    both = statistics.median(r["import"] + r["first"] for r in runs)
                    print(f"  {name}: import app {medians['import']:.2f} s, the first {medians['first']:.2f} s, "
                          f"both {both:.2f} s CPU (medians of {args.repeat}); a second {medians['second']:.3f} s; "
                          f"answers {runs[-1]['answers']}")
    finally:
        if server is not None:
            server.stop()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        for built in ("project", "package"):
            shutil.rmtree(packaging.BUILD / built / stage, ignore_errors=True)


if __name__ == "__main__":
    main()
