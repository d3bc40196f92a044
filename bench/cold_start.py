"""A Lambda cold start's Python work: `import app` from the packaged app and its layer, unpacked
apart as Lambda does (/var/task, /opt/python, the runtime's boto3), in a clean Python 3.12 that
may not write byte code (Lambda's code directories are read-only). Side by side in the same run:
the same trees with every `__pycache__` removed, as the package was before it shipped byte code.

    .venv/bin/python bench/cold_start.py [--repeat 7]

Prints the median CPU seconds of the child process (interpreter start included) for each case.
"""
from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from infra import deploy, packaging  # noqa: E402

PROBE = ("import resource, sys; sys.path[:0] = sys.argv[1:]; import app; "
         "usage = resource.getrusage(resource.RUSAGE_SELF); print(usage.ru_utime + usage.ru_stime)")


def cpu_seconds(python: str, paths: list[Path], environment: dict[str, str]) -> float:
    done = subprocess.run([python, "-I", "-S", "-B", "-c", PROBE, *map(str, paths)], capture_output=True,
                          text=True, env=environment, check=True)
    return float(done.stdout.strip().splitlines()[-1])


def without_byte_code(tree: Path, copy: Path) -> Path:
    shutil.copytree(tree, copy, ignore=shutil.ignore_patterns("__pycache__"))
    return copy


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="recon-bench-cold-"))
    stage = "coldbench"
    try:
        app, _ = packaging.package_app(deploy.stage_config(stage, deploy._placeholder_outputs()), stage)
        layer = packaging.build_layer()
        task = packaging.unpack(app.zip_path, work / "task")
        opt = packaging.unpack(layer.zip_path, work / "opt")
        boto3 = packaging.runtime_boto3()
        cases = {"as packaged": [task, opt / "python", boto3],
                 "no byte code (before)": [without_byte_code(task, work / "task-bare"),
                                           without_byte_code(opt / "python", work / "opt-bare"), boto3]}
        python = packaging.find_runtime_python()
        environment = {"PATH": os.environ.get("PATH", ""), "LANG": "C.UTF-8", "AWS_DEFAULT_REGION": "us-east-1",
                       "AWS_LAMBDA_FUNCTION_NAME": "recon-coldbench", "PYTHONDONTWRITEBYTECODE": "1"}
        times: dict[str, list[float]] = {name: [] for name in cases}
        for _ in range(args.repeat):  # interleaved, so that the machine's load falls on both alike
            for name, paths in cases.items():
                times[name].append(cpu_seconds(python, paths, environment))
        print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; "
              f"{python}")
        for name, measured in times.items():
            print(f"import app, {name}: median {statistics.median(measured):.2f} s CPU "
                  f"(min {min(measured):.2f}, max {max(measured):.2f}, {args.repeat} runs)")
    finally:
        shutil.rmtree(work, ignore_errors=True)
        for built in ("project", "package"):
            shutil.rmtree(packaging.BUILD / built / stage, ignore_errors=True)


if __name__ == "__main__":
    main()
