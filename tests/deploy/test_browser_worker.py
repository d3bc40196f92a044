"""The browser worker, proven without building its image (no Docker engine runs here): its Dockerfile
and staged build context, the image's Python environment rebuilt from the Dockerfile's own commands on
this Debian 12 (the image's base) and run as Lambda would run the image (the runtime interface client
against a Runtime API, Playwright starting Debian's Chromium as an unprivileged user), the function and
the permissions of infra/template.yaml, and what `make deploy` does with the image (infra/deploy.py).

What only a real build can show (apt-get in debian:bookworm-slim, the image's size, Lambda's read-only
file system and sandbox) is not proven here."""
from __future__ import annotations

import json
import os
import queue
import re
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace

import boto3
import pytest
from moto import mock_aws

from chalicelib.local.provision import Resolver, infra_outputs, load_template, table_definitions
from infra import deploy, packaging
from infra.functions import FUNCTIONS, GROUPS, role_output
from tests.deploy.docker_double import NoDocker, PushingDocker
from tests.support.iam import allows, statements

# One worker builds the image's environment once, and runs Chromium beside the other browser tests.
pytestmark = pytest.mark.xdist_group("browser")

DOCKERFILE = packaging.BROWSER_DOCKERFILE
ROOT = packaging.ROOT
REGION = "us-east-1"
HANDLER = "chalicelib.handlers.browser.attempt_handler"
SECRETS = {"Fn::Sub": "arn:${AWS::Partition}:secretsmanager:${AWS::Region}:${AWS::AccountId}:secret:${AppName}-${Stage}/*"}


def instructions(path: Path = DOCKERFILE) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) as Docker reads them: continuation lines joined, comment lines dropped."""
    read, current = [], ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if line.startswith("#") or (not line and not current):
            continue
        if line.endswith("\\"):
            current += line[:-1] + " "
            continue
        current += line
        keyword, arguments = current.split(None, 1)
        read.append((keyword.upper(), arguments))
        current = ""
    return read


def arguments_of(keyword: str) -> list[str]:
    return [arguments for found, arguments in instructions() if found == keyword]


def environment_of_image() -> list[tuple[str, str]]:
    return [tuple(pair.split("=", 1)) for arguments in arguments_of("ENV") for pair in shlex.split(arguments)]


def pip_install_arguments() -> list[str]:
    [run] = [arguments for arguments in arguments_of("RUN") if "pip install" in arguments]
    return shlex.split(run.split("pip install", 1)[1].split("&&", 1)[0])


def pins(arguments: list[str]) -> dict[str, str]:
    return dict(argument.split("==", 1) for argument in arguments if "==" in argument)


# --- the Dockerfile ----------------------------------------------------------------------------

def test_the_image_is_slim_debian_12_with_its_chromium_fonts_and_python():
    assert arguments_of("FROM") == ["debian:bookworm-slim"]
    [apt] = [arguments for arguments in arguments_of("RUN") if "apt-get install" in arguments]
    packages = set(shlex.split(apt.split("apt-get install", 1)[1].split("&&", 1)[0])) - {"-y", "--no-install-recommends"}
    assert packages == {"chromium", "fonts-liberation", "python3", "python3-venv", "ca-certificates"}
    assert "rm -rf /var/lib/apt/lists/*" in apt  # the package lists stay out of the image


def test_the_image_installs_the_app_and_browser_requirements_the_runtime_client_and_boto3_as_development_pins_it():
    arguments = pip_install_arguments()
    assert ["-r", "requirements.txt"] == arguments[arguments.index("requirements.txt") - 1:][:2]
    assert ["-r", "requirements-browser.txt"] == arguments[arguments.index("requirements-browser.txt") - 1:][:2]
    assert "--only-binary" in arguments  # no compiler in the slim image
    development = pins((ROOT / "requirements-dev.txt").read_text().split())
    image = pins(arguments)
    assert (image["boto3"], image["botocore"]) == (development["boto3"], development["botocore"])
    assert re.fullmatch(r"[0-9]+\.[0-9]+\.[0-9]+", image["awslambdaric"])
    assert pins((ROOT / "requirements-browser.txt").read_text().split())["playwright"] == "1.65.2"


def test_the_image_runs_the_attempt_handler_through_the_runtime_interface_client():
    assert [json.loads(a) for a in arguments_of("ENTRYPOINT")] == [["python", "-m", "awslambdaric"]]
    assert [json.loads(a) for a in arguments_of("CMD")] == [[HANDLER]]
    module, function = HANDLER.rsplit(".", 1)
    # The handler's module is under chalicelib, which the image copies into its working directory.
    assert (ROOT / (module.replace(".", "/") + ".py")).is_file()
    assert arguments_of("WORKDIR") == ["/var/task"] and "chalicelib/ chalicelib/" in arguments_of("COPY")
    import importlib

    assert callable(getattr(importlib.import_module(module), function))
    from chalicelib.local.provision import IMAGE_FUNCTIONS

    assert IMAGE_FUNCTIONS["browser_run_attempt"] == HANDLER  # the local stack runs the same handler in-process


def test_the_image_drives_the_chromium_the_settings_name_and_writes_only_under_tmp():
    from chalicelib.settings import Settings

    environment = dict(environment_of_image())
    assert environment["RECON_CHROMIUM_PATH"] == "/usr/bin/chromium" == Settings().chromium_path
    assert environment["HOME"] == "/tmp"
    assert all(environment[name].startswith("/tmp/") for name in ("XDG_CONFIG_HOME", "XDG_CACHE_HOME"))
    assert environment["PATH"].startswith(environment["VIRTUAL_ENV"] + "/bin:")


def test_the_staged_context_holds_exactly_what_the_dockerfile_copies():
    context = packaging.browser_image_context()
    copied = {source.rstrip("/") for arguments in arguments_of("COPY") for source in shlex.split(arguments)[:-1]}
    assert copied == set(packaging.BROWSER_IMAGE_FILES)
    assert {p.name for p in context.path.iterdir()} == copied | {"Dockerfile"}
    assert (context.path / "Dockerfile").read_bytes() == DOCKERFILE.read_bytes()
    files = {p.relative_to(context.path).as_posix() for p in context.path.rglob("*") if p.is_file()}
    assert not any(f.startswith("chalicelib/local/") or "__pycache__" in f or f.endswith(".pyc") for f in files)
    assert "chalicelib/handlers/browser.py" in files


def _dockerignored(relative: str, rules: list[tuple[bool, re.Pattern]]) -> bool:
    """Docker's rule: the last pattern that matches the path or one of its parent directories decides."""
    parts = relative.split("/")
    excluded = False
    for negated, pattern in rules:
        if any(pattern.fullmatch("/".join(parts[:n])) for n in range(1, len(parts) + 1)):
            excluded = not negated
    return excluded


def _dockerignore_rules(path: Path) -> list[tuple[bool, re.Pattern]]:
    rules = []
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        negated, line = line.startswith("!"), line.lstrip("!")
        text = re.escape(line).replace(r"\*\*/", "(?:.*/)?").replace(r"\*", "[^/]*")
        rules.append((negated, re.compile(text)))
    return rules


def test_a_build_from_the_repositorys_root_is_sent_the_same_files_as_make_deploys():
    rules = _dockerignore_rules(DOCKERFILE.with_name("Dockerfile.dockerignore"))
    sent = set()
    for top in ROOT.iterdir():  # directories excluded whole are not walked (the virtualenvs, node_modules)
        if _dockerignored(top.name, rules) and not any(not_ and p.pattern.startswith(re.escape(top.name))
                                                       for not_, p in rules):
            continue
        candidates = [top] if top.is_file() else [p for p in top.rglob("*") if p.is_file()]
        sent |= {p.relative_to(ROOT).as_posix() for p in candidates
                 if not _dockerignored(p.relative_to(ROOT).as_posix(), rules)}
    context = packaging.browser_image_context().path
    staged = {p.relative_to(context).as_posix() for p in context.rglob("*") if p.is_file()} - {"Dockerfile"}
    assert sent == staged


def test_the_images_tag_is_a_hash_of_the_contexts_files_and_nothing_else(tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    for tree in (one, two):
        (tree / "chalicelib").mkdir(parents=True)
        (tree / "chalicelib" / "a.py").write_text("x = 1\n")
    os.utime(two / "chalicelib" / "a.py", (0, 0))
    assert packaging._tree_digest(one) == packaging._tree_digest(two)
    (two / "chalicelib" / "a.py").write_text("x = 2\n")
    assert packaging._tree_digest(one) != packaging._tree_digest(two)
    assert packaging.browser_image_context().tag == packaging.browser_image_context().tag


@pytest.mark.skipif(not shutil.which("apt-cache") or not Path("/etc/debian_version").read_text().startswith("12"),
                    reason="needs Debian 12's package lists (the image's base)")
def test_every_package_the_image_installs_is_in_debian_12():
    [apt] = [arguments for arguments in arguments_of("RUN") if "apt-get install" in arguments]
    packages = [p for p in shlex.split(apt.split("apt-get install", 1)[1].split("&&", 1)[0]) if not p.startswith("-")]
    shown = subprocess.run(["apt-cache", "show", "--no-all-versions", *packages], capture_output=True, text=True)
    assert shown.returncode == 0, shown.stderr
    assert {line.split(": ", 1)[1] for line in shown.stdout.splitlines() if line.startswith("Package: ")} == set(packages)


# --- the image's environment, rebuilt here ---------------------------------------------------------

def _debian_12_with_python_3_11_and_chromium() -> str | None:
    if not Path("/etc/debian_version").exists() or not Path("/etc/debian_version").read_text().startswith("12"):
        return "the image's environment is rebuilt only on Debian 12, the image's base"
    probe = subprocess.run(["/usr/bin/python3", "-c", "import sys, venv; print(sys.version_info[:2])"],
                           capture_output=True, text=True)
    if probe.stdout.strip() != "(3, 11)":
        return "Debian's python3 (3.11) with its venv module is needed (apt-get install python3-venv)"
    if not os.access("/usr/bin/chromium", os.X_OK):
        return "Debian's chromium is needed (apt-get install chromium)"
    return None


@pytest.fixture(scope="module")
def image():
    """/opt/venv, /var/task and /tmp of the image, made here by the Dockerfile's own commands: Debian's
    python3 -m venv, then its pip install line as it is written, in a copy of the staged context;
    and the image's environment variables, its paths mapped to those directories."""
    missing = _debian_12_with_python_3_11_and_chromium()
    if missing:
        pytest.skip(missing)
    root = Path(tempfile.mkdtemp(prefix="recon-browser-image-"))
    root.chmod(0o755)  # the unprivileged user below reads it, as Lambda's user reads the image
    try:
        paths = {"/opt/venv": root / "venv", "/var/task": root / "task", "/tmp": root / "tmp"}
        shutil.copytree(packaging.browser_image_context().path, paths["/var/task"])
        paths["/tmp"].mkdir()
        paths["/tmp"].chmod(0o1777)
        subprocess.run(["/usr/bin/python3", "-m", "venv", str(paths["/opt/venv"])], check=True)
        arguments = [a for a in pip_install_arguments() if a != "--no-cache-dir"]  # this machine's cache is welcome
        subprocess.run([str(paths["/opt/venv"] / "bin" / "pip"), "install", "--quiet", *arguments],
                       cwd=paths["/var/task"], check=True)
        mapped = re.compile(r"(?<![^:=\s])(/opt/venv|/var/task|/tmp)(?=/|:|$)")
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}
        for name, value in environment_of_image():
            value = mapped.sub(lambda m: str(paths[m.group(1)]), value)
            env[name] = value.replace("$PATH", env.get("PATH", ""))
        yield SimpleNamespace(root=root, task=paths["/var/task"], tmp=paths["/tmp"], env=env,
                              python=str(paths["/opt/venv"] / "bin" / "python"))
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_in_the_images_environment_every_requirement_installs_from_wheels_and_the_worker_imports_without_the_engine(image):
    checked = subprocess.run([image.python, "-m", "pip", "check"], capture_output=True, text=True, env=image.env)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    script = ("import importlib, json, sys; m = importlib.import_module('chalicelib.handlers.browser'); "
              "assert callable(m.attempt_handler); import playwright.sync_api, awslambdaric, boto3; "
              "print(json.dumps([n for n in ('polars', 'numpy', 'rapidfuzz', 'chalice', 'moto') if n in sys.modules]))")
    done = subprocess.run(["python", "-c", script], capture_output=True, text=True, env=image.env, cwd=image.task)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout) == []


class RuntimeApi(ThreadingHTTPServer):
    """Lambda's Runtime API, what awslambdaric uses of it: one invocation, then none (the next request
    waits until the server closes); the answers are queued."""

    daemon_threads = True

    def __init__(self, event: dict) -> None:
        self.event, self.served, self.answers, self.closing = event, False, queue.Queue(), threading.Event()
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format, *args):
                pass

            def do_GET(self):
                if self.path != "/2018-06-01/runtime/invocation/next":
                    return self.reply(404, b"{}")
                if api.served:
                    api.closing.wait(60)
                    return self.reply(500, b"{}")
                api.served = True
                self.reply(200, json.dumps(api.event).encode(), {
                    "Lambda-Runtime-Aws-Request-Id": "proof-request",
                    "Lambda-Runtime-Deadline-Ms": str(int(time.time() * 1000) + 900_000),
                    "Lambda-Runtime-Invoked-Function-Arn":
                        f"arn:aws:lambda:{REGION}:123456789012:function:recon-proof-browser_run_attempt",
                    "Lambda-Runtime-Trace-Id": "Root=1-5759e988-bd862e3fe1be46a994272793;Sampled=0"})

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                kind = self.path.rsplit("/", 1)[-1]  # response, error, or init/error's error
                api.answers.put(("init_error" if "/init/" in self.path else kind, body.decode()))
                self.reply(202, b'{"status": "OK"}')

            def reply(self, status, body, headers=None):
                self.send_response(status)
                for name, value in {"Content-Type": "application/json", **(headers or {})}.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        super().__init__(("127.0.0.1", 0), Handler)

    def close(self) -> None:
        self.closing.set()
        self.shutdown()
        self.server_close()


@pytest.fixture
def moto_server(tmp_path):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    credentials = {"AWS_ACCESS_KEY_ID": "proof", "AWS_SECRET_ACCESS_KEY": "proof", "AWS_DEFAULT_REGION": REGION,
                   "AWS_REGION": REGION}
    server = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, **credentials})
    try:
        deadline = time.time() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if time.time() > deadline:
                    raise
                time.sleep(0.2)
        yield SimpleNamespace(endpoint=f"http://127.0.0.1:{port}", credentials=credentials)
    finally:
        server.terminate()
        server.wait(10)


def function_environment(stage: str) -> dict[str, str]:
    """BrowserRunAttemptFunction's environment variables as infra/template.yaml gives them for a stage."""
    template = load_template(deploy.INFRA / "template.yaml")
    resolver = Resolver(template, {"Stage": stage, "DataBucketName": f"recon-{stage}-data",
                                   "BrowserImageUri": "123456789012.dkr.ecr.us-east-1.amazonaws.com/recon-x:t"}, REGION)
    properties = template["Resources"]["BrowserRunAttemptFunction"]["Properties"]
    return resolver.resolve(properties["Environment"]["Variables"])


def test_the_runtime_interface_client_hands_an_invocation_to_the_attempt_handler_and_returns_its_answer(image,
                                                                                                       moto_server):
    """The image's ENTRYPOINT and CMD as Lambda runs them (from its working directory, with its environment
    and the function's): the handler loads, reads the stage's settings, asks the stage's table for the run,
    and its answer goes back to the Runtime API. The run does not exist: the answer is that it is gone."""
    stage = "image"
    template = load_template(deploy.INFRA / "template.yaml")
    resolver = Resolver(template, {"Stage": stage, "DataBucketName": f"recon-{stage}-data"}, REGION)
    dynamodb = boto3.client("dynamodb", endpoint_url=moto_server.endpoint, **{
        "aws_access_key_id": "proof", "aws_secret_access_key": "proof", "region_name": REGION})
    for definition in table_definitions(template, resolver):
        dynamodb.create_table(**definition)
    api = RuntimeApi({"environment": "acme", "agent_id": "agt_proof", "run_id": 7})
    threading.Thread(target=api.serve_forever, daemon=True).start()
    command = [*json.loads(arguments_of("ENTRYPOINT")[0]), *json.loads(arguments_of("CMD")[0])]
    env = {**image.env, **function_environment(stage), **moto_server.credentials,
           "AWS_ENDPOINT_URL": moto_server.endpoint, "AWS_LAMBDA_RUNTIME_API": f"127.0.0.1:{api.server_address[1]}",
           "AWS_LAMBDA_FUNCTION_NAME": f"recon-{stage}-browser_run_attempt", "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "2048",
           "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST", "POWERTOOLS_TRACE_DISABLED": "true"}
    worker = subprocess.Popen(command, cwd=image.task, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True)
    try:
        kind, body = api.answers.get(timeout=120)
    finally:
        worker.kill()
        output = worker.communicate(timeout=10)[0]
        api.close()
    assert (kind, json.loads(body)) == ("response", {"status": "gone"}), output[-3000:]


SMOKE = """
import json, os
from playwright.sync_api import sync_playwright
from chalicelib.adapters.browser_portal import CHROMIUM_ARGS
with sync_playwright() as playwright:
    browser = playwright.chromium.launch(executable_path=os.environ["RECON_CHROMIUM_PATH"], headless=True,
                                         args=CHROMIUM_ARGS)
    page = browser.new_page()
    page.set_content('<p id="t" style="font-family: Arial">Statement ready</p>')
    width = page.evaluate("document.getElementById('t').getBoundingClientRect().width")
    print(json.dumps({"text": page.text_content("#t"), "width": width, "version": browser.version}))
    browser.close()
"""


def test_playwright_from_the_image_starts_debians_chromium_as_an_unprivileged_user_with_only_tmp_to_write(image):
    """Lambda runs an image as an unprivileged user whose only writable directory is /tmp: so here (`nobody`,
    HOME and TMPDIR in the image's /tmp, the code and packages not writable), with the worker's launch arguments."""
    command = ["python", "-c", SMOKE]
    if os.getuid() == 0:
        command = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", *command]
    done = subprocess.run(command, capture_output=True, text=True, env={**image.env, "TMPDIR": str(image.tmp)},
                          cwd=image.task, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    shown = json.loads(done.stdout.splitlines()[-1])
    assert shown["text"] == "Statement ready" and shown["width"] > 0  # rendered in a font the image has
    assert re.fullmatch(r"[0-9]+(\.[0-9]+){3}", shown["version"])


# --- infra/template.yaml: the function and the permissions -------------------------------------------



def _state_machine(name: str) -> dict:
    return {"Fn::Sub": f"arn:${{AWS::Partition}}:states:${{AWS::Region}}:${{AWS::AccountId}}:stateMachine:"
                       f"${{AppName}}-${{Stage}}-{name}"}


def test_the_artifacts_template_with_its_image_repository_passes_cfn_lint():
    from cfnlint.api import lint_file

    assert [str(m) for m in lint_file(deploy.INFRA / "artifacts.yaml")] == []


def test_the_browser_worker_is_a_fifteen_minute_image_function_with_room_for_chromium():
    resources = load_template(deploy.INFRA / "template.yaml")["Resources"]
    function = resources["BrowserRunAttemptFunction"]
    props = function["Properties"]
    assert (props["PackageType"], props["Code"]) == ("Image", {"ImageUri": {"Ref": "BrowserImageUri"}})
    assert "Handler" not in props and "Runtime" not in props  # the image's ENTRYPOINT and CMD say them
    assert props["Architectures"] == [packaging.BROWSER_IMAGE_PLATFORM.split("/")[1].replace("amd64", "x86_64")]
    assert props["Timeout"] == 900 and props["MemorySize"] >= 2048 and props["EphemeralStorage"]["Size"] >= 1024
    assert props["Role"] == {"Fn::GetAtt": ["BrowserRole", "Arn"]}
    assert props["FunctionName"] == {"Fn::Sub": "${AppName}-${Stage}-browser_run_attempt"}  # its logs' group is allowed


def test_the_browser_worker_exists_only_when_its_image_is_given_so_the_local_stack_runs_its_handler_in_process():
    template = load_template(deploy.INFRA / "template.yaml")
    condition = template["Resources"]["BrowserRunAttemptFunction"]["Condition"]
    assert template["Outputs"]["BrowserRunAttemptFunctionArn"]["Condition"] == condition
    assert not Resolver(template, {}, REGION).condition(condition)
    image = "123456789012.dkr.ecr.us-east-1.amazonaws.com/recon-prod-browser:0123456789abcdef"
    assert Resolver(template, {"BrowserImageUri": image}, REGION).condition(condition)
    assert re.fullmatch(template["Parameters"]["BrowserImageUri"]["AllowedPattern"], image)
    assert "BrowserRunAttemptFunctionArn" not in infra_outputs({"DataBucketName": "b"}, REGION)


def test_the_browser_workers_settings_are_the_apps_for_the_same_stage():
    """Every variable the image function is given has the value the Chalice functions get (infra/deploy.py
    stage_config), and the settings the worker needs are all there."""
    outputs = {**{role_output(g): f"<{g}>" for g in GROUPS}, "SchedulerRoleArn": "<scheduler>",  # roles: not local
               "UserPoolId": "<pool>", "UserPoolClientId": "<client>",  # ids given by Cognito once made
               **infra_outputs({"Stage": "prod", "DataBucketName": "recon-prod-data"}, REGION)}
    config = deploy.stage_config("prod", outputs)
    app = {**config["environment_variables"], **config["stages"]["prod"]["environment_variables"]}
    worker = function_environment("prod")
    assert {name: app.get(name) for name in worker} == worker
    assert {"RECON_TABLE_NAME", "RECON_BUCKET_NAME", "RECON_FILE_IMPORT_STATE_MACHINE", "RECON_BROWSER_RUN_STATE_MACHINE",
            "RECON_SECRETS_PREFIX", "RECON_STAGE"} <= set(worker)


def test_the_new_settings_reach_the_fields_that_read_them(monkeypatch):
    from chalicelib.settings import Settings

    monkeypatch.setenv("RECON_BROWSER_RUN_STATE_MACHINE", "arn:aws:states:us-east-1:1:stateMachine:recon-p-browser-run")
    monkeypatch.setenv("RECON_SECRETS_PREFIX", "recon-p")
    monkeypatch.setenv("RECON_CHROMIUM_PATH", "/usr/bin/chromium")
    settings = Settings()
    assert (settings.browser_run_state_machine, settings.secrets_prefix, settings.chromium_path) == (
        "arn:aws:states:us-east-1:1:stateMachine:recon-p-browser-run", "recon-p", "/usr/bin/chromium")


def test_the_browser_runs_functions_keep_their_stages_agent_secrets_import_downloads_and_resume_paused_runs():
    resources = load_template(deploy.INFRA / "template.yaml")["Resources"]
    browser = statements(resources, "BrowserRole")
    for action in ("GetSecretValue", "PutSecretValue", "CreateSecret", "DeleteSecret", "DescribeSecret"):
        assert allows(browser, f"secretsmanager:{action}", SECRETS), action
    assert allows(browser, "states:StartExecution", _state_machine("file-import"))
    assert allows(browser, "states:SendTaskSuccess", "*")  # task tokens have no ARN
    for action in ("dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:Query"):
        assert allows(browser, action, {"Fn::GetAtt": ["Table", "Arn"]}), action
    # An attempt's download goes where uploads go, a failed step's screenshot among the agent's files;
    # nothing else of the bucket (no run files, no mirror), and nothing read back.
    assert allows(browser, "s3:PutObject", {"Fn::Sub": "${DataBucket.Arn}/uploads/*"})
    assert allows(browser, "s3:PutObject", {"Fn::Sub": "${DataBucket.Arn}/agents/*"})
    assert not any(a.startswith("s3:") and a != "s3:PutObject" for s in browser for a in _listed(s["Action"]))
    assert not allows(browser, "s3:PutObject", {"Fn::Sub": "${DataBucket.Arn}/*"})
    assert allows(browser, "events:PutEvents", {"Fn::GetAtt": ["EventBus", "Arn"]})  # a run's end is an event
    assert any("logs:PutLogEvents" in s["Action"] for s in browser)
    assert {f.group for name, f in FUNCTIONS.items() if name.startswith("browser_run_")} == {"browser"}


def _listed(value) -> list:
    return value if isinstance(value, list) else [value]


def test_the_api_resumes_paused_runs_and_deletes_agents_secrets_and_the_agent_worker_starts_browser_runs():
    resources = load_template(deploy.INFRA / "template.yaml")["Resources"]
    api = statements(resources, "ApiRole")
    assert allows(api, "states:SendTaskSuccess", "*")
    assert allows(api, "secretsmanager:DeleteSecret", SECRETS) and allows(api, "secretsmanager:DescribeSecret", SECRETS)
    assert not allows(api, "secretsmanager:GetSecretValue", SECRETS)  # the API never reads a portal login
    assert allows(statements(resources, "AgentsRole"), "states:StartExecution", _state_machine("browser-run"))
    for role in ("IngestionRole", "RunsRole", "InvestigationsRole", "SweeperRole", "AgentsRole"):
        assert not any("secretsmanager:" in str(s["Action"]) for s in statements(resources, role)), role


def test_the_browser_image_repository_scans_keeps_a_few_images_and_empties_itself_on_delete():
    repository = load_template(deploy.INFRA / "artifacts.yaml")["Resources"]["BrowserImageRepository"]["Properties"]
    assert repository["ImageScanningConfiguration"] == {"ScanOnPush": True}
    assert repository["EmptyOnDelete"] is True  # `make destroy` deletes the artifacts stack with its images
    assert repository["ImageTagMutability"] == "IMMUTABLE"  # a tag is a content hash: never two images
    [rule] = json.loads(repository["LifecyclePolicy"]["LifecyclePolicyText"])["rules"]
    assert rule["selection"]["countType"] == "imageCountMoreThan" and 2 <= rule["selection"]["countNumber"] <= 10
    with mock_aws():  # ECR's own check of the policy's text
        ecr = boto3.client("ecr", region_name=REGION)
        ecr.create_repository(repositoryName="policy-check")
        ecr.put_lifecycle_policy(repositoryName="policy-check",
                                 lifecyclePolicyText=repository["LifecyclePolicy"]["LifecyclePolicyText"])


# --- infra/deploy.py: the image and its ARN ----------------------------------------------------------

def test_the_workflows_take_the_browser_attempt_from_the_infrastructure_stack_and_the_rest_from_chalice():
    parameters = load_template(deploy.INFRA / "workflows.yaml")["Parameters"]
    outputs = {name: f"<{name}>" for name in parameters if not name.endswith("Arn")}
    outputs["BrowserRunAttemptFunctionArn"] = "arn:aws:lambda:us-east-1:123456789012:function:recon-p-browser_run_attempt"
    from chalicelib.local.provision import function_of_parameter

    chalice = {function_of_parameter(name): f"arn:{name}" for name in parameters
               if function_of_parameter(name) and function_of_parameter(name) in FUNCTIONS}
    given = deploy.workflow_parameters(outputs, chalice)
    assert given["BrowserRunAttemptArn"] == outputs["BrowserRunAttemptFunctionArn"]
    assert given["BrowserRunStateMachineName"] == "<BrowserRunStateMachineName>"
    assert given["BrowserRunPauseArn"] == "arn:BrowserRunPauseArn"
    del outputs["BrowserRunAttemptFunctionArn"]
    with pytest.raises(RuntimeError, match="browser_run_attempt"):
        deploy.workflow_parameters(outputs, chalice)


@pytest.fixture
def ecr():
    with mock_aws():
        client = boto3.client("ecr", region_name=REGION)
        repository = client.create_repository(repositoryName="recon-proof-browser")["repository"]
        yield SimpleNamespace(client=client, name=repository["repositoryName"], uri=repository["repositoryUri"])


def test_deploy_builds_and_pushes_the_image_once_then_finds_it_by_its_content_hash(ecr):
    docker = PushingDocker(ecr.client)
    image = deploy.publish_browser_image(ecr.client, ecr.name, ecr.uri, docker, log=lambda _: None)
    context = packaging.browser_image_context()
    assert image == f"{ecr.uri}:{context.tag}"
    assert [call[0] for call in docker.calls] == ["check", "login", "build", "push"]
    assert docker.calls[1][1:] == (f"https://{ecr.uri.split('/')[0]}", "AWS")  # the registry's token
    assert docker.calls[2][1:] == (context.path, image) and docker.calls[3][1:] == (image,)
    assert deploy.publish_browser_image(ecr.client, ecr.name, ecr.uri, NoDocker(), log=lambda _: None) == image


def test_without_docker_deploy_says_the_browser_worker_needs_a_running_engine(ecr):
    with pytest.raises(deploy.DockerUnavailable) as raised:
        deploy.publish_browser_image(ecr.client, ecr.name, ecr.uri, deploy.Docker("no-such-docker"), log=lambda _: None)
    assert str(raised.value).startswith(deploy.NO_DOCKER) and "not installed" in str(raised.value)


@pytest.mark.skipif(not shutil.which("docker"), reason="no docker command on this machine")
def test_a_docker_command_without_an_engine_is_refused_with_the_same_words():
    if subprocess.run(["docker", "version", "--format", "{{.Server.Version}}"], capture_output=True).returncode == 0:
        pytest.skip("a Docker engine answers on this machine")
    with pytest.raises(deploy.DockerUnavailable, match="make deploy needs a running Docker engine .no engine answers"):
        deploy.Docker().check()


def test_the_browser_image_is_built_for_lambdas_platform_without_an_attestation_index(tmp_path):
    """What `docker build` is run with, by a docker that only writes its arguments and environment down."""
    fake = tmp_path / "docker"
    fake.write_text(f"#!/bin/sh\necho \"$@ $BUILDX_NO_DEFAULT_ATTESTATIONS\" >> {tmp_path / 'calls'}\n")
    fake.chmod(0o755)
    deploy.Docker(str(fake)).build(tmp_path, "repo:tag")
    assert (tmp_path / "calls").read_text().split() == ["build", "--platform", "linux/amd64", "--tag", "repo:tag",
                                                        str(tmp_path), "1"]
