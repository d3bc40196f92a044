"""Builds what Lambda runs: the engine layer from wheels for the Lambda platform, and the app's
package with `chalice package` under the runtime's Python; then checks both against Lambda's
limits (sizes, and the glibc each compiled file needs). Stages the browser worker's container
image's build context (infra/browser/Dockerfile), which `make deploy` builds with Docker. `make
deploy` and the package tests use the same functions, so what is tested is what is deployed.

Runtime: python3.12 on Amazon Linux 2023 (glibc 2.34). Chalice takes the runtime from the
interpreter it runs under, so packaging runs in `.venv-deploy`, made with Python 3.12.
"""
from __future__ import annotations

import contextlib
import fcntl
import glob
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUILD = ROOT / "build"
# Where Chalice reads and writes its record of a stage's app (each staged project links it).
DEPLOYED_DIR = ROOT / ".chalice" / "deployed"
DEPLOY_VENV = ROOT / ".venv-deploy"

RUNTIME = "python3.12"
PYTHON_VERSION = "3.12"
# Amazon Linux 2023, what the python3.12 runtime runs on: glibc 2.34, libstdc++ of GCC 11.
RUNTIME_GLIBC = (2, 34)
RUNTIME_GLIBCXX = (3, 4, 29)
# Wheels a glibc 2.34 system loads: uv takes the newest manylinux tag up to 2.34 a package has.
RUNTIME_PLATFORM = "x86_64-manylinux_2_34"
# uv (installed with the development requirements) resolves and installs in seconds where pip takes minutes.
UV_PIP_INSTALL = [sys.executable, "-m", "uv", "pip", "install", "--quiet"]

# Lambda's limits, in bytes.
MAX_DIRECT_UPLOAD_ZIP = 50 * 1024 * 1024        # `chalice deploy` uploads the zip in the API call
MAX_UNZIPPED = 250 * 1024 * 1024                 # a function's code plus all its layers

# The layer needs none of these at run time: test suites, type stubs, build headers.
LAYER_PRUNE_DIRS = {"tests", "testing", "__pyinstaller", "include", "f2py"}
LAYER_PRUNE_SUFFIXES = (".pyi", ".pyx", ".pxd", ".h", ".c", ".cpp")
# Its pin of pydantic (~=2.13) is older than the app's: installed without its dependencies,
# the rest of which requirements-deploy.txt lists.
SAM_TRANSLATOR = "aws-sam-translator==1.115.0"
# The app's package never needs the embedded local AWS.
APP_EXCLUDED = ("chalicelib/local",)
# The app's dependencies published only as a source distribution: pure Python or data, so built here.
SOURCE_ONLY = ("openapi-ui-bundles",)
# Parts of the app's dependencies it never loads: /v1/docs serves Swagger UI only (api/meta.py), not the
# bundle's other two viewers (1.7 MiB of an API function's 250 MiB with the engine layer); of Powertools the
# app uses Logger and Metrics only (observability.py), never these utilities (3.5 MiB), none of which
# Logger, Metrics or Tracer import (jmespath_utils and typing, which they do, stay).
APP_DEPENDENCIES_UNUSED = ("openapi_ui_bundles/rapidoc", "openapi_ui_bundles/redoc") + tuple(
    f"aws_lambda_powertools/utilities/{name}" for name in (
        "auth_alpha", "batch", "circuit_breaker", "data_classes", "data_masking", "feature_flags", "idempotency",
        "kafka", "parameters", "parser", "streaming", "validation"))


@dataclass
class Package:
    zip_path: Path
    zipped_bytes: int
    unzipped_bytes: int
    files: list[str] = field(default_factory=list)


def find_runtime_python() -> str:
    """A Python 3.12 interpreter: on PATH, or one of pyenv's."""
    candidates = [shutil.which(f"python{PYTHON_VERSION}")]
    pyenv_pattern = f"~/.pyenv/versions/{PYTHON_VERSION}.*/bin/python{PYTHON_VERSION}"
    candidates += sorted(glob.glob(os.path.expanduser(pyenv_pattern)))
    candidates += sorted(glob.glob(f"/usr/local/bin/python{PYTHON_VERSION}"))
    for candidate in filter(None, candidates):
        probe = subprocess.run([candidate, "-c", "import sys; print(sys.version_info[:2])"],
                               capture_output=True, text=True)
        if probe.returncode == 0 and probe.stdout.strip() == str(tuple(map(int, PYTHON_VERSION.split(".")))):
            return candidate
    raise RuntimeError(f"no Python {PYTHON_VERSION} found (the Lambda runtime is {RUNTIME}); "
                       f"install it (pyenv install {PYTHON_VERSION}, or your system's python{PYTHON_VERSION})")


def _digest(*paths: Path, extra: str = "") -> str:
    digest = hashlib.sha256(extra.encode())
    for path in paths:
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def _zip_tree(source: Path, zip_path: Path, prefix: str = "") -> None:
    tmp = zip_path.with_suffix(".tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED, compresslevel=6) as archive:
        for path in sorted(source.rglob("*")):
            if path.is_file():
                archive.write(path, prefix + path.relative_to(source).as_posix())
    tmp.replace(zip_path)


def describe(zip_path: Path) -> Package:
    with zipfile.ZipFile(zip_path) as archive:
        infos = archive.infolist()
    return Package(zip_path, zip_path.stat().st_size, sum(i.file_size for i in infos),
                   [i.filename for i in infos if not i.is_dir()])


@contextlib.contextmanager
def _exclusive(build: Path, name: str):
    """One builder at a time per build directory (two test workers may ask at once)."""
    build.mkdir(parents=True, exist_ok=True)
    with open(build / f".{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def build_layer(requirements: Path = ROOT / "requirements-layer.txt", build: Path = BUILD) -> Package:
    """The engine layer's zip (`python/...`), built once per requirements file and recipe."""
    recipe = json.dumps([RUNTIME_PLATFORM, sorted(LAYER_PRUNE_DIRS), LAYER_PRUNE_SUFFIXES, PYTHON_VERSION])
    zip_path = build / f"engine-layer-{_digest(requirements, Path(__file__), extra=recipe)}.zip"
    with _exclusive(build, "engine-layer"):
        if not zip_path.exists():
            _build_layer(requirements, build, zip_path)
    return describe(zip_path)


def _build_layer(requirements: Path, build: Path, zip_path: Path) -> None:
    staging = build / "engine-layer"
    shutil.rmtree(staging, ignore_errors=True)
    target = staging / "python"
    # Copies, not uv's hard links into its cache: the layer's shared objects are stripped in place
    # below, and stripping a linked file rewrites the cache and every virtualenv linked to it (a
    # test process with polars loaded crashed when that happened under it).
    subprocess.run([*UV_PIP_INSTALL, "--link-mode", "copy", "--target", str(target), "--python-version",
                    PYTHON_VERSION, "--python-platform", RUNTIME_PLATFORM, "--only-binary", ":all:",
                    "-r", str(requirements)], check=True)
    _prune(target)
    _strip_shared_objects(target)
    _compile(target)
    _zip_tree(staging, zip_path)
    shutil.rmtree(staging, ignore_errors=True)


def runtime_boto3(build: Path = BUILD) -> Path:
    """boto3 as the Lambda runtime provides it, for running the package in a clean interpreter."""
    target = build / "runtime-boto3"
    with _exclusive(build, "runtime-boto3"):
        if not (target / "boto3").exists():
            subprocess.run([*UV_PIP_INSTALL, "--target", str(target), "--python-version", PYTHON_VERSION,
                            "--python-platform", RUNTIME_PLATFORM, "--only-binary", ":all:", "boto3==1.44.5"],
                           check=True)
    return target


def _prune(root: Path) -> None:
    for path in sorted(root.rglob("*"), key=lambda p: len(p.parts), reverse=True):
        if path.is_dir() and path.name in LAYER_PRUNE_DIRS and path.parent != root:
            shutil.rmtree(path, ignore_errors=True)
        elif path.is_file() and path.name.endswith(LAYER_PRUNE_SUFFIXES):
            path.unlink()
    shutil.rmtree(root / "bin", ignore_errors=True)


def _strip_shared_objects(root: Path) -> None:
    """Debug symbols are most of polars' size (about 170 MB -> 132 MB); dynamic symbols stay.
    Libraries auditwheel vendored (`<package>.libs/`) are left alone: their headers were
    rewritten by patchelf, and stripped they no longer load ("ELF load command address/offset
    not page-aligned", measured on numpy's OpenBLAS)."""
    objects = [str(p) for p in root.rglob("*.so*")
               if p.is_file() and is_elf(p) and not any(part.endswith(".libs") for part in p.relative_to(root).parts)]
    if objects:
        subprocess.run(["strip", "--strip-unneeded", *objects], check=True)


def _compile(root: Path) -> None:
    """Byte code for the runtime's Python: Lambda's file system is read-only, so modules that are
    not compiled here would be compiled again on every cold start. Checked by nothing (unchecked
    hash): a zip keeps modification times to 2 seconds, so a timestamp-checked .pyc of a source
    written at an odd second reads as stale once unzipped, and is compiled again every time."""
    python = find_runtime_python()
    subprocess.run([python, "-m", "compileall", "-q", "-j", "0", "--invalidation-mode", "unchecked-hash", str(root)],
                   check=True, stdout=subprocess.DEVNULL)


def app_dependencies(requirements: Path = ROOT / "requirements.txt", build: Path = BUILD) -> Path:
    """requirements.txt installed from wheels for the Lambda platform and compiled for its Python,
    once per requirements file and recipe: the app's `vendor/` tree. Chalice would install them
    itself, as sources only, to be compiled again on every cold start."""
    recipe = json.dumps([RUNTIME_PLATFORM, PYTHON_VERSION])
    target = build / f"app-dependencies-{_digest(requirements, Path(__file__), extra=recipe)}"
    with _exclusive(build, "app-dependencies"):
        if not target.exists():
            staging = build / "app-dependencies.tmp"
            shutil.rmtree(staging, ignore_errors=True)
            subprocess.run([*UV_PIP_INSTALL, "--link-mode", "copy", "--target", str(staging), "--python-version",
                            PYTHON_VERSION, "--python-platform", RUNTIME_PLATFORM, "--only-binary", ":all:",
                            *(arg for name in SOURCE_ONLY for arg in ("--no-binary", name)),
                            "-r", str(requirements)], check=True)
            for unused in APP_DEPENDENCIES_UNUSED:
                shutil.rmtree(staging / unused)
            _strip_shared_objects(staging)  # cryptography's Rust extension: 14.4 MB -> 11.6 MB
            _compile(staging)
            staging.rename(target)
    return target


# Compiles app.py, and the two modules of Chalice's own that Chalice zips as sources (chalice/__init__.py and
# chalice/app.py, read from the Chalice that packages: the deploy virtualenv's), into vendor/.
_COMPILE_APP = """
import pathlib, py_compile, sys
import chalice, chalice.app
vendor, tag = pathlib.Path(sys.argv[2]), sys.argv[3]
for source, cache in ((sys.argv[1], vendor / "__pycache__"), (chalice.__file__, vendor / "chalice" / "__pycache__"),
                      (chalice.app.__file__, vendor / "chalice" / "__pycache__")):
    cfile = cache / f"{pathlib.Path(source).stem}.{tag}.pyc"
    py_compile.compile(source, cfile=str(cfile), doraise=True,
                       invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
"""


def _compile_app(project: Path) -> None:
    """chalicelib's byte code goes in the zip with it (Chalice zips the whole directory); app.py's and
    Chalice's own modules' go through `vendor/`, whose files Chalice puts at the zip's root (it zips
    app.py and its own chalice/app.py alone, as sources)."""
    _compile(project / "chalicelib")
    python = ensure_deploy_venv() / "bin" / "python"
    subprocess.run([str(python), "-c", _COMPILE_APP, str(project / "app.py"), str(project / "vendor"),
                    f"cpython-{PYTHON_VERSION.replace('.', '')}"], check=True)


def ensure_deploy_venv(venv: Path = DEPLOY_VENV) -> Path:
    """`.venv-deploy`: Python 3.12 with Chalice and boto3 (as pinned in requirements-deploy.txt)."""
    requirements = ROOT / "requirements-deploy.txt"
    stamp = venv / ".installed"
    with _exclusive(BUILD, "deploy-venv"):
        if not (stamp.exists() and stamp.read_text() == _digest(requirements)):
            _make_deploy_venv(venv, requirements, stamp)
    return venv


def _make_deploy_venv(venv: Path, requirements: Path, stamp: Path) -> None:
    if not (venv / "bin" / "python").exists():
        subprocess.run([find_runtime_python(), "-m", "venv", str(venv)], check=True)
    install = [*UV_PIP_INSTALL, "--python", str(venv / "bin" / "python")]
    subprocess.run([*install, "pip<26.3", "-r", str(requirements)], check=True)  # Chalice packages with pip
    subprocess.run([*install, "--no-deps", SAM_TRANSLATOR], check=True, stderr=subprocess.DEVNULL)
    stamp.write_text(_digest(requirements))


def _link_or_copy(source: str, target: str) -> None:
    """A hard link to a file of the built dependencies (2,400 files: copying them took a second of each
    deploy), or a copy on another file system. Nothing writes to a staged file in place: Chalice reads them,
    and the app's byte code is written beside them by py_compile, which replaces a file rather than
    rewriting it, so the built tree is never changed through a link."""
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def stage_project(config: dict, project: Path, deployed: Path = DEPLOYED_DIR) -> Path:
    """A copy of the app (app.py, chalicelib without the local stack, the dependencies of
    requirements.txt, all with byte code for the runtime) with the stage's generated
    `.chalice/config.json`. `deployed/` is shared with `deployed` (the repository's
    `.chalice/deployed`), where Chalice reads and writes its record of what it deployed (`make deploy`
    keeps that record in the account: infra/stage_state.py)."""
    shutil.rmtree(project, ignore_errors=True)
    (project / ".chalice").mkdir(parents=True)
    shutil.copy2(ROOT / "app.py", project / "app.py")
    # No requirements.txt: the dependencies go in compiled, as vendor/ (Chalice zips it at the root).
    shutil.copytree(app_dependencies(), project / "vendor", copy_function=_link_or_copy)
    shutil.copytree(ROOT / "chalicelib", project / "chalicelib",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "local"))
    _compile_app(project)
    (project / ".chalice" / "config.json").write_text(json.dumps(config, indent=2))
    deployed.mkdir(parents=True, exist_ok=True)
    (project / ".chalice" / "deployed").symlink_to(deployed, target_is_directory=True)
    return project


def chalice(project: Path, *args: str, env: dict | None = None) -> None:
    venv = ensure_deploy_venv()
    subprocess.run([str(venv / "bin" / "chalice"), "--project-dir", str(project), *args], check=True,
                   env={**os.environ, **(env or {})})


def chalice_run(project: Path, command: str, stage: str) -> int:
    """`chalice deploy` or `chalice delete` of the staged project, as infra/chalice_run.py runs them (what a
    failed deploy made is recorded; what is gone already is not deleted again); its exit status."""
    venv = ensure_deploy_venv()
    return subprocess.run([str(venv / "bin" / "python"), str(ROOT / "infra" / "chalice_run.py"), command,
                           str(project), stage], env=dict(os.environ)).returncode


def package_app(config: dict, stage: str, build: Path = BUILD, region: str = "us-east-1") -> tuple[Package, dict]:
    """`chalice package`: the app's zip (what `chalice deploy` uploads) and its SAM template."""
    project = stage_project(config, build / "project" / stage)
    out = build / "package" / stage
    shutil.rmtree(out, ignore_errors=True)
    chalice(project, "package", "--stage", stage, str(out), env={"AWS_DEFAULT_REGION": region})
    return describe(out / "deployment.zip"), json.loads((out / "sam.json").read_text())


# --- the browser worker's container image --------------------------------------------------

BROWSER_DOCKERFILE = ROOT / "infra" / "browser" / "Dockerfile"
# What the Dockerfile COPYs: the whole of its build context, with the Dockerfile itself. chalicelib goes
# without the local stack and byte code, as in the app's zip (Dockerfile.dockerignore says the same).
BROWSER_IMAGE_FILES = ("requirements.txt", "requirements-browser.txt", "chalicelib")
# BrowserRunAttemptFunction runs on x86_64 (infra/template.yaml): built for it on any machine.
BROWSER_IMAGE_PLATFORM = "linux/amd64"


@dataclass
class ImageContext:
    path: Path
    tag: str  # a hash of everything in the context: the same inputs give the same tag, other inputs another


def browser_image_context(build: Path = BUILD) -> ImageContext:
    """The browser image's build context, staged in `build/browser-image/<tag>`: only what its image is
    built from, so that a hash of the directory names the image (an unchanged image is neither built
    nor pushed again) and Docker is not sent the virtualenvs."""
    root = build / "browser-image"
    with _exclusive(build, "browser-image"):
        staging = root / "staging"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        shutil.copy2(BROWSER_DOCKERFILE, staging / "Dockerfile")
        for name in BROWSER_IMAGE_FILES:
            if (ROOT / name).is_dir():
                shutil.copytree(ROOT / name, staging / name, ignore=_not_in_image)
            else:
                shutil.copy2(ROOT / name, staging / name)
        tag = _tree_digest(staging, extra=BROWSER_IMAGE_PLATFORM)
        context = root / tag
        if context.exists():
            shutil.rmtree(staging)
        else:
            staging.rename(context)
        for other in root.iterdir():
            if other != context:
                shutil.rmtree(other, ignore_errors=True)
    return ImageContext(context, tag)


def _not_in_image(directory: str, names: list[str]) -> set[str]:
    top = Path(directory) == ROOT / "chalicelib"
    return {name for name in names if name == "__pycache__" or name.endswith(".pyc") or (top and name == "local")}


def _tree_digest(root: Path, extra: str = "") -> str:
    """Of every file's path and bytes (not of times or owners): the same tree on any machine, the same digest."""
    digest = hashlib.sha256(extra.encode())
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()[:16]


# --- ELF checks -------------------------------------------------------------------------

# What a manylinux wheel may take from the system (PEP 599/600): everything else must be inside.
SYSTEM_LIBRARIES = {
    "libc.so.6", "libm.so.6", "libdl.so.2", "librt.so.1", "libpthread.so.0", "libgcc_s.so.1",
    "libstdc++.so.6", "libutil.so.1", "libresolv.so.2", "libnsl.so.1", "libcrypt.so.1", "libz.so.1",
    "ld-linux-x86-64.so.2", "libexpat.so.1",
}


def is_elf(path: Path) -> bool:
    with open(path, "rb") as handle:
        return handle.read(4) == b"\x7fELF"


@dataclass
class ElfNeeds:
    path: str
    glibc: tuple[int, ...]
    glibcxx: tuple[int, ...]
    libraries: list[str]


def elf_needs(path: Path) -> ElfNeeds:
    """The newest GLIBC_ and GLIBCXX_ symbol versions a shared object requires, and its NEEDED."""
    from elftools.elf.dynamic import DynamicSection
    from elftools.elf.elffile import ELFFile
    from elftools.elf.gnuversions import GNUVerNeedSection

    glibc: tuple[int, ...] = (0,)
    glibcxx: tuple[int, ...] = (0,)
    libraries: list[str] = []
    with open(path, "rb") as handle:
        elf = ELFFile(handle)
        for section in elf.iter_sections():
            if isinstance(section, GNUVerNeedSection):
                for _, auxiliaries in section.iter_versions():
                    for aux in auxiliaries:
                        name = aux.name
                        if match := re.fullmatch(r"GLIBC_([0-9.]+)", name):
                            glibc = max(glibc, tuple(map(int, match.group(1).split("."))))
                        elif match := re.fullmatch(r"GLIBCXX_([0-9.]+)", name):
                            glibcxx = max(glibcxx, tuple(map(int, match.group(1).split("."))))
            elif isinstance(section, DynamicSection):
                # DT_NEEDED tags carry `needed` (pyelftools sets it per tag kind; its stubs do not say so).
                libraries += [tag.needed for tag in section.iter_tags()  # type: ignore[attr-defined]
                              if tag.entry.d_tag == "DT_NEEDED"]
    return ElfNeeds(str(path), glibc, glibcxx, libraries)


def elf_problems(tree: Path) -> list[str]:
    """Every compiled file under `tree` that would not load on the runtime: a glibc or libstdc++
    too new, or a library that is neither bundled nor part of the system a manylinux wheel may use."""
    files = [p for p in tree.rglob("*") if p.is_file() and not p.is_symlink() and is_elf(p)]
    bundled = {p.name for p in files}
    problems = []
    for path in files:
        needs = elf_needs(path)
        relative = path.relative_to(tree)
        if needs.glibc > RUNTIME_GLIBC:
            problems.append(f"{relative}: needs GLIBC {'.'.join(map(str, needs.glibc))}, "
                            f"the runtime has {'.'.join(map(str, RUNTIME_GLIBC))}")
        if needs.glibcxx > RUNTIME_GLIBCXX:
            problems.append(f"{relative}: needs GLIBCXX {'.'.join(map(str, needs.glibcxx))}, "
                            f"the runtime has {'.'.join(map(str, RUNTIME_GLIBCXX))}")
        for library in needs.libraries:
            if library not in bundled and library not in SYSTEM_LIBRARIES:
                problems.append(f"{relative}: needs {library}, which is neither bundled nor a system library")
    return problems


def unpack(zip_path: Path, target: Path) -> Path:
    target.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(zip_path) as archive:
        archive.extractall(target)
    # zipfile drops the execute bits; shared objects load without them, scripts are not used.
    return target


def mib(size: int) -> str:
    return f"{size / 1024 / 1024:.1f} MiB"
