"""The API reference (/v1/docs) in Debian's Chromium under its Content-Security-Policy: Swagger UI
renders the operations from our OpenAPI document, and the browser reports no violation or error."""
from __future__ import annotations

import pytest

from tests.support.chromium import needs_chromium

pytestmark = [pytest.mark.xdist_group("web"), needs_chromium]


def test_the_reference_renders_under_its_policy(stack, page):
    answer = page.goto(f"{stack.url}/docs")
    policy = answer.headers["content-security-policy"]
    assert "script-src 'self' 'sha256-" in policy and "unsafe-eval" not in policy
    page.get_by_text("/v1/reconciliation_exceptions", exact=True).first.wait_for()
    page.get_by_role("heading", name="Reconciliation Service API").first.wait_for()
    assert page.problems == []
