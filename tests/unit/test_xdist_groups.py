"""The suite keeps the tests that share an expensive module fixture (the deployment proof, the browser
worker's image) on one worker with `xdist_group` marks and `--dist loadgroup` (the Makefile's default).
pytest 9.2 stopped honouring the group (pytest-xdist 3.8 renames `item._nodeid`, which pytest 9.2 no
longer reads), and each worker then built every one of those fixtures itself: this holds the pinned
pair to grouping."""
from __future__ import annotations

import subprocess
import sys
import textwrap


def test_tests_of_one_xdist_group_run_on_one_worker(tmp_path):
    for name in ("a", "b"):
        (tmp_path / f"test_{name}.py").write_text(textwrap.dedent(f"""
            import os
            import pytest

            pytestmark = pytest.mark.xdist_group(name="shared")

            @pytest.mark.parametrize("n", range(4))
            def test_{name}(n):
                with open(os.path.join(os.path.dirname(__file__), "workers.txt"), "a") as seen:
                    seen.write(os.environ["PYTEST_XDIST_WORKER"] + "\\n")
            """))
    (tmp_path / "test_free.py").write_text("def test_free():\n    pass\n")

    done = subprocess.run([sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup", "-p", "no:cacheprovider",
                           "-q", str(tmp_path)], capture_output=True, text=True, timeout=120, cwd=tmp_path)

    assert done.returncode == 0, done.stdout + done.stderr
    workers = (tmp_path / "workers.txt").read_text().split()
    assert len(workers) == 8 and len(set(workers)) == 1, workers
