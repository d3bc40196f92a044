"""Debian's Chromium, as the browser worker and the web app's tests drive it."""
from __future__ import annotations

import os

import pytest

CHROMIUM = "/usr/bin/chromium"
needs_chromium = pytest.mark.skipif(not os.path.exists(CHROMIUM),
                                    reason="Chromium is not installed (apt-get install -y chromium)")
