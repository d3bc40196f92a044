"""What a cold start imports: every function of the stage starts with `import app`, so app.py imports
only what Chalice needs to route an event (bench/cold_start.py measures its CPU; no timing here)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from chalicelib.api.mount import TABLE, route_table

ROOT = Path(__file__).resolve().parents[2]
# Imported by a handler or at a route's first request, never by `import app`.
NOT_AT_IMPORT = ("boto3", "botocore", "s3transfer", "urllib3", "aws_lambda_powertools", "polars", "numpy", "pyarrow",
                 "sqlglot", "chalicelib.api.routing", "chalicelib.api.routers", "chalicelib.api.middleware",
                 "chalicelib.api.schemas", "chalicelib.container", "chalicelib.adapters", "chalicelib.handlers",
                 "chalicelib.services", "chalicelib.observability")


def test_the_route_table_is_the_routers_own():
    assert TABLE.read_text() == route_table(), "out of date: run `python -m chalicelib.api.mount`"


def test_importing_the_app_imports_no_route_handler_service_or_aws_sdk():
    probe = "import json, sys; import app; print(json.dumps(sorted(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True)
    loaded = json.loads(done.stdout.splitlines()[-1])
    early = [m for m in loaded if any(m == name or m.startswith(f"{name}.") for name in NOT_AT_IMPORT)]
    assert early == []


def test_the_app_routes_every_route_of_the_routers_to_its_view():
    probe = ("import json; import app; print(json.dumps(sorted([m, p, e.view_name] for p, ms in app.app.routes.items() "
             "for m, e in ms.items())))")
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True)
    from chalicelib.api.routers import ROUTERS
    from chalicelib.api.routing import API_PREFIX

    routed = sorted([s.method, API_PREFIX + s.path, r.views[(s.method, API_PREFIX + s.path)].__name__]
                    for r in ROUTERS for s in r.specs)
    assert json.loads(done.stdout.splitlines()[-1]) == routed
