"""The web app's pinned files (chalicelib/web/vendor/MANIFEST): each is node_modules' file of the version
package.json pins, byte for byte, with the hash the manifest records; every vendor file the app serves
is in the manifest, and nothing else is in the folder but the manifest and the licences."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from chalicelib.api.web import IMMUTABLE, WEB_FILES

ROOT = Path(__file__).resolve().parents[2]
VENDOR = ROOT / "chalicelib" / "web" / "vendor"


def manifest() -> list[dict[str, str]]:
    rows = [line.split("\t") for line in (VENDOR / "MANIFEST").read_text().splitlines()
            if line and not line.startswith("#")]
    return [dict(zip(("file", "package", "version", "source", "sha256", "licence"), row, strict=True)) for row in rows]


@pytest.mark.parametrize("entry", manifest(), ids=lambda entry: entry["file"])
def test_each_pinned_file_is_the_pinned_packages_own(entry):
    pinned = json.loads((ROOT / "package.json").read_text())["dependencies"]
    assert pinned[entry["package"]] == entry["version"]
    source = ROOT / entry["source"]
    installed = json.loads((ROOT / "node_modules" / entry["package"] / "package.json").read_text())
    assert (installed["version"], installed["license"]) == (entry["version"], entry["licence"])
    committed = (VENDOR / entry["file"]).read_bytes()
    assert committed == source.read_bytes(), f"{entry['file']} differs from {entry['source']}"
    assert hashlib.sha256(committed).hexdigest() == entry["sha256"]
    assert entry["version"] in entry["file"]  # a new version gets a new name: its caching is immutable


def test_the_served_vendor_files_are_the_manifests_and_the_folder_holds_nothing_else():
    served = {path.removeprefix("vendor/") for path, _, caching in WEB_FILES.values() if path.startswith("vendor/")}
    assert served == {entry["file"] for entry in manifest()}
    assert all(caching == IMMUTABLE for path, _, caching in WEB_FILES.values() if path.startswith("vendor/"))
    licences = {f"LICENSE-{entry['package']}" for entry in manifest()}
    assert {path.name for path in VENDOR.iterdir()} == served | licences | {"MANIFEST"}
    for entry in manifest():
        assert (VENDOR / f"LICENSE-{entry['package']}").read_bytes() == \
            (ROOT / "node_modules" / entry["package"] / "LICENSE").read_bytes()
