"""The layers import downwards only: routes and services reach storage through the container and
ports, never by importing an adapter, the domain imports nothing but the domain, and no service
imports one that imports it back, however indirectly."""
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


def loaded_imports(path: Path, modules: set[str]) -> set[str]:
    """Which of `modules` the module at `path` imports as it loads: its module-level imports, those
    under an `if` or a `try` too, but neither those of an `if TYPE_CHECKING:` block nor those inside
    a function. `from package import name` names the submodule when `name` is one."""
    found: set[str] = set()

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.If):
                visit(node.orelse)
                if "TYPE_CHECKING" not in ast.unparse(node.test):
                    visit(node.body)
            elif isinstance(node, ast.Try):
                for block in (node.body, node.orelse, node.finalbody, *(h.body for h in node.handlers)):
                    visit(block)
            elif isinstance(node, ast.ImportFrom) and node.module:
                found.update(f"{node.module}.{alias.name}" if f"{node.module}.{alias.name}" in modules
                             else node.module for alias in node.names)
            elif isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)

    visit(ast.parse(path.read_text(), filename=str(path)).body)
    return found & modules


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Each cycle a depth-first walk of `graph` closes, as the modules around it."""
    cycles: list[list[str]] = []
    done: set[str] = set()
    path: list[str] = []

    def walk(module: str) -> None:
        path.append(module)
        for imported in sorted(graph[module]):
            if imported in path:
                cycles.append(path[path.index(imported):] + [imported])
            elif imported not in done:
                walk(imported)
        path.pop()
        done.add(module)

    for module in sorted(graph):
        if module not in done:
            walk(module)
    return cycles


def test_the_services_import_one_another_without_a_cycle():
    """A module of a cycle loads only when the cycle is entered at the right module (elsewhere it
    meets a module half loaded): what two services both need goes where both can import it. A
    package's modules count one by one, and importing one loads its package's __init__ first."""
    paths = {".".join(path.relative_to(CHALICELIB.parent).with_suffix("").parts).removesuffix(".__init__"): path
             for path in (CHALICELIB / "services").rglob("*.py")}
    graph = {module: loaded_imports(path, set(paths)) for module, path in paths.items()}
    for module, imported in graph.items():
        imported.update(package for package in paths if module.startswith(f"{package}."))
    assert import_cycles(graph) == []


def test_the_app_imports_without_the_engine_libraries():
    """The API's functions ship without the engine's layer: importing the app may not load polars,
    numpy or rapidfuzz (tests/deploy proves the same on the built package)."""
    _imports_without_the_engine(["app"])


def test_every_service_loads_without_the_engine_libraries():
    """A service may reach polars through the domain's frame code only from inside a function: the
    functions without the engine's layer import services too (a run's start, a record's delete)."""
    _imports_without_the_engine(sorted(
        "chalicelib." + ".".join(path.relative_to(CHALICELIB).with_suffix("").parts).removesuffix(".__init__")
        for path in (CHALICELIB / "services").rglob("*.py")))


def _imports_without_the_engine(modules: list[str]) -> None:
    import subprocess
    import sys

    blocker = ("import sys\n"
               "class Block:\n"
               "    def find_spec(self, name, path=None, target=None):\n"
               "        if name.split('.')[0] in ('polars', 'numpy', 'rapidfuzz', 'pyarrow'):\n"
               "            raise ImportError(f'{name} is in the engine layer')\n"
               "sys.meta_path.insert(0, Block())\n"
               + "".join(f"import {module}\n" for module in modules))
    done = subprocess.run([sys.executable, "-c", blocker], cwd=CHALICELIB.parent, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
