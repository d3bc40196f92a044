"""The layers import downwards only: routes and services reach storage through the container and
ports, never by importing an adapter, and the domain imports nothing but the domain."""
import ast
from pathlib import Path

import pytest

CHALICELIB = Path(__file__).resolve().parents[2] / "chalicelib"


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


@pytest.mark.parametrize("layer", ["api", "services", "domain"])
def test_a_layer_above_storage_imports_no_adapter(layer):
    offenders = {str(path.relative_to(CHALICELIB)): sorted(m for m in imported_modules(path)
                                                          if m.startswith("chalicelib.adapters"))
                 for path in (CHALICELIB / layer).rglob("*.py")}
    assert {path: modules for path, modules in offenders.items() if modules} == {}


def test_the_domain_imports_only_the_domain():
    offenders = {str(path.relative_to(CHALICELIB)): sorted(m for m in imported_modules(path)
                                                          if m.startswith("chalicelib.")
                                                          and not m.startswith("chalicelib.domain"))
                 for path in (CHALICELIB / "domain").rglob("*.py")}
    assert {path: modules for path, modules in offenders.items() if modules} == {}


def test_the_services_import_no_polars():
    """Frame code lives in the domain (domain/matching/frames.py) and the adapters' Parquet files;
    a service hands frames on. Imports inside functions count too."""
    offenders = {str(path.relative_to(CHALICELIB)): sorted(m for m in imported_modules(path)
                                                          if m == "polars" or m.startswith("polars."))
                 for path in (CHALICELIB / "services").rglob("*.py")}
    assert {path: modules for path, modules in offenders.items() if modules} == {}


def test_the_app_imports_without_the_engine_libraries():
    """The API's functions ship without the engine's layer: importing the app may not load polars,
    numpy or rapidfuzz (tests/deploy proves the same on the built package)."""
    import subprocess
    import sys

    blocker = ("import sys\n"
               "class Block:\n"
               "    def find_spec(self, name, path=None, target=None):\n"
               "        if name.split('.')[0] in ('polars', 'numpy', 'rapidfuzz', 'pyarrow'):\n"
               "            raise ImportError(f'{name} is in the engine layer')\n"
               "sys.meta_path.insert(0, Block())\n"
               "import app\n")
    done = subprocess.run([sys.executable, "-c", blocker], cwd=CHALICELIB.parent, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
