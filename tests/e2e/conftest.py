"""End-to-end fixtures: the real local stack (`python -m chalicelib.local`) over HTTP."""
from __future__ import annotations

import pytest

from chalicelib.local.launcher import StackProcess


@pytest.fixture(scope="session")
def stack(tmp_path_factory):
    running = StackProcess(tmp_path_factory.mktemp("stack") / "data", api_key="rk_e2e-test-key").start()
    yield running
    running.stop()


from tests.support.web_app import page  # noqa: E402,F401  (the web app's tests' page in Chromium)
