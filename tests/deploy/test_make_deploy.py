"""`make deploy`, `make destroy` and `make deploy-unlock` run whole, as an operator or a CI runner runs
them, against moto's server (tests/deploy/moto_server.py, which names each gap of moto it fills; the
browser image is pushed by the docker double of tests/deploy/docker_double.py). Where
tests/deploy/test_deployment.py proves what one deploy makes, this proves a stage's life, each step from
a checkout of its own:

1. clone A, the current tree: the stage's first `make deploy` (the infrastructure stack updated again once
   Chalice has made the API, for the data bucket's CORS to name its origin); then data is written to its table
   and bucket;
2. clone B, a newer version (a function, a route and a queue more), fresh (no `.chalice/deployed/`):
   `make deploy` fails at its very end (API Gateway refuses the API's deployment, a fault the server
   injects), after Chalice made B's new function;
3. clone A again, its own record of the app stale: `make deploy` of the previous version over the newer,
   half-deployed one (a rollback);
4. clone B', the newer version again, fresh: the upgrade, from a second clone, the web app moved to a
   custom domain (WEB_APP_ORIGIN);
5. with the lock held by "another deploy", `make deploy` refuses; `make deploy-unlock` breaks the lock;
   without the app's record, a fresh clone refuses to deploy; a plain `chalice deploy` stops (no role);
6. clone C, fresh: `make destroy`.

Each step's outcome is read back from the server (`Account.snapshot`) and held by a test below."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import boto3
import pytest

from infra import deploy, packaging, stage_state
from infra.functions import FUNCTIONS
from tests.deploy.docker_double import install_cli
from tests.deploy.moto_server import ROOT, MotoServer

pytestmark = pytest.mark.xdist_group(name="deployment")

REGION = "us-east-1"
STAGE = f"life-{os.getpid()}"
MAIL_FROM = "agents@proof.test"
MARKER = "upgrade_marker"  # what the newer version adds: a function, a route, a queue
APP = f"recon-{STAGE}"
DATA_BUCKET = f"{APP}-data-123456789012-{REGION}"
CUSTOM_ORIGIN = "https://recon.proof.test"
# make's own prerequisites of `deploy`: the development and deploy virtualenvs and the npm packages, which a
# clone shares with this checkout (linked, below) instead of installing them again.
MAKE = ["make", "--no-print-directory", "-o", ".venv/.installed", "-o", "node_modules/.installed",
        "-o", ".venv-deploy/.installed"]


def _listed_files(root: Path) -> list[str]:
    """What a clone of the repository holds: tracked files and new ones not ignored (this tree's changes
    included), never `.chalice/deployed/`, `build/` or a virtualenv."""
    done = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=root,
                          capture_output=True, check=True)
    return [name for name in done.stdout.decode().split("\0") if name and (root / name).is_file()]


def clone(target: Path, change=None) -> Path:
    """A fresh checkout of this tree in `target`, `change(target)` applied to it. It shares this checkout's
    virtualenvs and the engine layer and app dependencies already built (what it would build itself, the
    same from the same requirements), never its record of a deployed app."""
    for name in _listed_files(ROOT):
        (target / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, target / name)
    packaging.ensure_deploy_venv()
    for venv in (".venv", ".venv-deploy"):
        (target / venv).symlink_to((ROOT / venv).resolve(), target_is_directory=True)
    (target / "build").mkdir()
    for built in (packaging.build_layer().zip_path, packaging.app_dependencies()):
        (target / "build" / built.name).symlink_to(built)
    if change:
        change(target)
    assert not (target / ".chalice" / "deployed").exists()
    return target


def newer_version(root: Path) -> None:
    """The next version: a function (in app.py and infra/functions.py), a route and a queue more."""
    app = root / "app.py"
    app.write_text(app.read_text() + f'''

@app.lambda_function(name="{MARKER}")
def {MARKER}(event, context):
    return {{"version": "newer"}}


@app.route("/{MARKER.replace("_", "-")}")
def {MARKER}_route():
    return {{"version": "newer"}}
''')
    functions = root / "infra" / "functions.py"
    text = functions.read_text()
    table_end = text.index("\n}\n", text.index("FUNCTIONS: dict[str, Function] = {"))
    functions.write_text(text[:table_end] + f'\n    "{MARKER}": Function("api", engine=False, memory_mb=128, '
                         'timeout_s=10),' + text[table_end:])
    template = root / "infra" / "template.yaml"
    template.write_text(template.read_text().replace("\nResources:\n", f'''
Resources:
  UpgradeMarkerQueue:
    Type: AWS::SQS::Queue
    Properties:
      QueueName:
        Fn::Sub: "${{AppName}}-${{Stage}}-{MARKER.replace("_", "-")}"
''', 1))


class Account:
    """moto's server, and what is deployed there read back."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.credentials = {"AWS_ACCESS_KEY_ID": "proof", "AWS_SECRET_ACCESS_KEY": "proof",
                            "AWS_DEFAULT_REGION": REGION, "AWS_REGION": REGION}
        self.server = MotoServer(tmp, self.credentials)
        self.session = boto3.session.Session(aws_access_key_id="proof", aws_secret_access_key="proof",
                                             region_name=REGION)
        self.docker_log = tmp / "docker.log"
        self.docker_bin = install_cli(tmp / "bin", self.docker_log)

    def client(self, service: str):
        return self.session.client(service, endpoint_url=self.server.endpoint)

    def env(self) -> dict[str, str]:
        inherited = {k: v for k, v in os.environ.items()
                     if not k.startswith(("AWS_", "MAKE", "MFLAGS")) and k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        return {**inherited, **self.credentials, "AWS_ENDPOINT_URL": self.server.endpoint,
                "PATH": f"{self.docker_bin}:{inherited.get('PATH', '')}"}

    def make(self, checkout: Path, *args: str) -> subprocess.CompletedProcess:
        done = subprocess.run([*MAKE, *args], cwd=checkout, env=self.env(), capture_output=True, text=True,
                              timeout=900)
        with open(self.tmp / "make.log", "a") as log:
            log.write(f"\n=== {checkout.name}: make {' '.join(args)} -> {done.returncode}\n{done.stdout}\n"
                      f"--- stderr ---\n{done.stderr}\n")
        return done

    def artifacts_bucket(self) -> str | None:
        try:
            return deploy.stack_outputs(self.client("cloudformation"), deploy.stack_names(STAGE)["artifacts"])[
                "ArtifactsBucketName"]
        except self.client("cloudformation").exceptions.ClientError:
            return None

    def read(self, bucket: str | None, key: str) -> dict | None:
        if bucket is None:
            return None
        try:
            return json.loads(self.client("s3").get_object(Bucket=bucket, Key=key)["Body"].read())
        except self.client("s3").exceptions.ClientError:
            return None

    def snapshot(self) -> dict:
        apigateway, lam, cfn = self.client("apigateway"), self.client("lambda"), self.client("cloudformation")
        apis = [a for a in apigateway.get_rest_apis()["items"] if a["name"] == APP]
        functions = sorted(f["FunctionName"] for page in lam.get_paginator("list_functions").paginate()
                           for f in page["Functions"] if f["FunctionName"] == APP or f["FunctionName"].startswith(f"{APP}-"))
        mappings = [m for m in lam.list_event_source_mappings()["EventSourceMappings"]
                    if m["FunctionArn"].rsplit(":", 1)[-1].startswith(f"{APP}-")]
        stacks = {}
        for name in deploy.stack_names(STAGE).values():
            try:
                stacks[name] = cfn.describe_stacks(StackName=name)["Stacks"][0]["StackStatus"]
            except cfn.exceptions.ClientError:
                stacks[name] = None
        bucket = self.artifacts_bucket()
        return {
            "cors": self.cors(),
            "web app origin": self.infra_parameters().get("WebAppOrigin"),
            "apis": [a["id"] for a in apis],
            "routes": {api["id"]: sorted(r["path"] for r in apigateway.get_resources(restApiId=api["id"])["items"])
                       for api in apis},
            "functions": functions,
            "mappings": sorted((m["EventSourceArn"].rsplit(":", 1)[-1], m["FunctionArn"].rsplit(":", 1)[-1], m["UUID"])
                               for m in mappings),
            "queues": sorted(url.rsplit("/", 1)[-1] for url in self.client("sqs").list_queues(
                QueueNamePrefix=APP).get("QueueUrls", [])),
            "rules": sorted(r["Name"] for r in self.client("events").list_rules(NamePrefix=APP)["Rules"]),
            "stacks": stacks,
            "bucket": bucket,
            "record": self.read(bucket, stage_state.state_key(STAGE)),
            "lock": self.read(bucket, stage_state.LOCK_KEY),
            "repositories": [r["repositoryName"] for r in self.client("ecr").describe_repositories()["repositories"]],
        }

    def cors(self) -> list[dict] | None:
        """The data bucket's CORS rules; None when it has none (or no bucket)."""
        s3 = self.client("s3")
        try:
            return s3.get_bucket_cors(Bucket=DATA_BUCKET)["CORSRules"]
        except s3.exceptions.ClientError:
            return None

    def infra_parameters(self) -> dict[str, str]:
        cfn = self.client("cloudformation")
        try:
            [stack] = cfn.describe_stacks(StackName=deploy.stack_names(STAGE)["infra"])["Stacks"]
        except cfn.exceptions.ClientError:
            return {}
        return {p["ParameterKey"]: p["ParameterValue"] for p in stack.get("Parameters", [])}

    def data(self) -> dict:
        """The stage's table and data bucket, and what the proof wrote to them."""
        outputs = {"TableName": APP, "BucketName": f"{APP}-data-123456789012-{REGION}"}
        s3, dynamodb = self.client("s3"), self.client("dynamodb")
        try:
            item = dynamodb.get_item(TableName=outputs["TableName"],
                                     Key={"pk": {"S": "proof#upgrade"}, "sk": {"S": "survives"}}).get("Item")
        except dynamodb.exceptions.ResourceNotFoundException:
            item = None
        try:
            body = s3.get_object(Bucket=outputs["BucketName"], Key="uploads/proof/survives.csv")["Body"].read()
        except s3.exceptions.ClientError:
            body = None
        return {"item": item, "object": body}

    def write_data(self) -> None:
        outputs = deploy.stack_outputs(self.client("cloudformation"), deploy.stack_names(STAGE)["infra"])
        assert (outputs["TableName"], outputs["BucketName"]) == (APP, f"{APP}-data-123456789012-{REGION}")
        self.client("dynamodb").put_item(TableName=outputs["TableName"], Item={
            "pk": {"S": "proof#upgrade"}, "sk": {"S": "survives"}, "written": {"S": "before the upgrade"}})
        self.client("s3").put_object(Bucket=outputs["BucketName"], Key="uploads/proof/survives.csv",
                                     Body=b"date,amount\n2026-11-01,100\n")

    def stop(self) -> None:
        self.server.stop()


WRITTEN = {"item": {"pk": {"S": "proof#upgrade"}, "sk": {"S": "survives"}, "written": {"S": "before the upgrade"}},
           "object": b"date,amount\n2026-11-01,100\n"}


@pytest.fixture(scope="module")
def life(tmp_path_factory):
    """Every step of the stage's life, in order: each one's `make` and the account after it."""
    tmp = tmp_path_factory.mktemp("make-deploy")
    account = Account(tmp)
    steps: dict[str, dict] = {}
    clones: list[Path] = []

    def checkout(name: str, change=None) -> Path:
        (tmp / name).mkdir()
        clones.append(clone(tmp / name, change))
        return clones[-1]

    def step(name: str, checkout_dir: Path, *args: str) -> dict:
        done = account.make(checkout_dir, *args)
        steps[name] = {"make": done, "after": account.snapshot(), "data": account.data()}
        return steps[name]

    try:
        account.client("ses").verify_domain_identity(Domain="proof.test")
        a = checkout("a")
        step("first", a, "deploy", f"STAGE={STAGE}", f"MAIL_FROM={MAIL_FROM}")
        account.write_data()
        steps["first"]["data"] = account.data()

        (account.server.faults / "CreateDeployment").touch()
        step("failed upgrade", checkout("b", newer_version), "deploy", f"STAGE={STAGE}")
        steps["failed upgrade"]["fault left"] = (account.server.faults / "CreateDeployment").exists()

        stale = json.loads((a / ".chalice" / "deployed" / f"{STAGE}.json").read_text())
        step("rollback", a, "deploy", f"STAGE={STAGE}")["stale record"] = stale

        step("upgrade", checkout("b2", newer_version), "deploy", f"STAGE={STAGE}", f"WEB_APP_ORIGIN={CUSTOM_ORIGIN}")

        # Another deploy holds the lock: this one refuses, and the lock is broken by hand.
        bucket = steps["upgrade"]["after"]["bucket"]
        other = {"stage": STAGE, "command": "make deploy", "identity": "arn:aws:sts::123456789012:assumed-role/ci/runner-7",
                 "user": "ci", "host": "runner-7", "pid": 4242,
                 "since": (datetime.now(UTC) - timedelta(minutes=10)).isoformat(timespec="seconds")}
        account.client("s3").put_object(Bucket=bucket, Key=stage_state.LOCK_KEY, Body=json.dumps(other).encode())
        step("locked", a, "deploy", f"STAGE={STAGE}")
        step("unlock", a, "deploy-unlock", f"STAGE={STAGE}")

        # The app's record lost: a fresh clone refuses to deploy (or destroy) rather than make a second API.
        c = checkout("c")
        record = account.client("s3").get_object(Bucket=bucket, Key=stage_state.state_key(STAGE))["Body"].read()
        account.client("s3").delete_object(Bucket=bucket, Key=stage_state.state_key(STAGE))
        step("no record", c, "deploy", f"STAGE={STAGE}")
        steps["no record"]["destroy"] = account.make(c, "destroy", f"STAGE={STAGE}")
        steps["no record"]["after destroy"] = account.snapshot()
        account.client("s3").put_object(Bucket=bucket, Key=stage_state.state_key(STAGE), Body=record)

        # The command ops teams know, in the checkout's own directory, for the default stage and this one.
        before = account.snapshot()
        steps["chalice deploy"] = {"before": before, "runs": [
            subprocess.run([str(c / ".venv-deploy" / "bin" / "chalice"), "deploy", *stage], cwd=c, env=account.env(),
                           capture_output=True, text=True, timeout=300)
            for stage in ([], ["--stage", STAGE])], "after": None}
        steps["chalice deploy"]["after"] = account.snapshot()

        step("destroy", c, "destroy", f"STAGE={STAGE}")
        steps["docker"] = [json.loads(line) for line in account.docker_log.read_text().splitlines()]
        yield steps
    finally:
        account.stop()
        for checkout_dir in clones:
            shutil.rmtree(checkout_dir / "build", ignore_errors=True)


def _succeeded(step: dict) -> None:
    done = step["make"]
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


EXPECTED_MAPPINGS = {("bulk", "bulk_worker"), ("investigations", "investigation_worker"),
                     ("agent-runs", "agent_worker"), ("webhook-events", "webhook_fanout"),
                     ("webhook-deliveries", "webhook_worker")}


def _mappings(snapshot: dict) -> set[tuple[str, str]]:
    pairs = [(queue.removeprefix(f"{APP}-"), function.removeprefix(f"{APP}-")) for queue, function, _ in
             snapshot["mappings"]]
    assert len(pairs) == len(set(pairs)), f"duplicate event source mappings: {pairs}"
    return set(pairs)


# --- 1. the first deploy -----------------------------------------------------------------------------

def test_the_first_deploy_makes_the_stage_and_keeps_the_apps_record_in_the_artifacts_bucket(life):
    first = life["first"]
    _succeeded(first)
    after = first["after"]
    assert len(after["apis"]) == 1
    assert _mappings(after) == EXPECTED_MAPPINGS
    assert len(after["functions"]) == len(FUNCTIONS) + 1  # the app's and the browser worker
    names = deploy.stack_names(STAGE)
    # The infrastructure stack updated once more, for the API's origin (the test below).
    assert after["stacks"] == {names["artifacts"]: "CREATE_COMPLETE", names["infra"]: "UPDATE_COMPLETE",
                               names["workflows"]: "CREATE_COMPLETE"}
    record = after["record"]
    assert record is not None and record["schema_version"] == "2.0"
    assert [r["rest_api_id"] for r in record["resources"] if r["resource_type"] == "rest_api"] == after["apis"]
    assert after["lock"] is None  # released
    assert f"deployed stage {STAGE}: https://{after['apis'][0]}.execute-api" in first["make"].stdout
    assert first["data"] == WRITTEN


def _web_app_rule(*origins: str) -> list[dict]:
    return [{"ID": "web-app-uploads", "AllowedMethods": ["PUT"], "AllowedOrigins": list(origins),
             "AllowedHeaders": ["content-type"], "MaxAgeSeconds": 3600}]


ORIGIN_SET = "the web app's origin is"  # what deploy says when it updates the stack again for the API's origin


def test_the_first_deploy_lets_only_its_apis_origin_upload_to_the_data_bucket_updating_the_stack_once_more(life):
    first = life["first"]
    _succeeded(first)
    [api] = first["after"]["apis"]
    origin = f"https://{api}.execute-api.{REGION}.amazonaws.com"
    assert first["after"]["web app origin"] == origin
    assert first["after"]["cors"] == _web_app_rule(origin)
    # The stack was made before the API, without the origin (no rule), then updated once the API existed.
    said, names = first["make"].stdout, deploy.stack_names(STAGE)
    steps = [f"stack {names['infra']}: creating", f"stack {names['workflows']}: creating",
             f"stack {names['infra']}: {ORIGIN_SET} {origin}", f"stack {names['infra']}: updating"]
    assert all(step in said for step in steps), said
    assert [said.index(step) for step in steps] == sorted(said.index(step) for step in steps)
    assert said.count(f"stack {names['infra']}: updating") == 1


# --- 2. a deploy that fails half-way ------------------------------------------------------------------

def test_a_deploy_that_fails_half_way_records_what_it_made_and_releases_the_lock(life):
    failed, first = life["failed upgrade"], life["first"]["after"]
    assert failed["make"].returncode != 0
    assert not failed["fault left"]  # the injected failure was met: API Gateway refused the API's deployment
    assert "a failure the deployment proof injected" in failed["make"].stderr
    assert f"recorded in s3://{first['bucket']}/{stage_state.state_key(STAGE)}" in failed["make"].stderr
    after = failed["after"]
    assert after["lock"] is None
    assert after["apis"] == first["apis"]
    assert _mappings(after) == EXPECTED_MAPPINGS
    assert f"{APP}-{MARKER}" in after["functions"]  # made before the failure ...
    recorded = {r["name"]: r for r in after["record"]["resources"]}
    assert recorded[MARKER]["lambda_arn"].endswith(f":{APP}-{MARKER}")  # ... and recorded, though Chalice failed
    assert recorded["rest_api"]["rest_api_id"] == first["apis"][0]
    assert failed["data"] == WRITTEN
    assert after["cors"] == life["first"]["after"]["cors"]  # the origin read from the app's record


# --- 3. the previous version over the newer -----------------------------------------------------------

def test_a_rollback_from_a_stale_checkout_removes_what_the_newer_version_added_and_keeps_the_data(life):
    rollback, first = life["rollback"], life["first"]["after"]
    _succeeded(rollback)
    # The checkout's own record predates the newer version's function: the account's was used.
    assert MARKER not in {r["name"] for r in rollback["stale record"]["resources"]}
    after = rollback["after"]
    assert after["apis"] == first["apis"]
    assert after["mappings"] == first["mappings"]  # the same mappings, none made again
    assert after["functions"] == first["functions"]  # the newer version's function deleted, none left behind
    assert f"{APP}-{MARKER.replace('_', '-')}" not in after["queues"]  # the newer template's queue too
    assert after["routes"] == first["routes"]
    assert MARKER not in {r["name"] for r in after["record"]["resources"]}
    assert after["lock"] is None
    assert rollback["data"] == WRITTEN
    # The API's origin read from the app's record before the stack's update: no second update.
    assert after["cors"] == first["cors"] and ORIGIN_SET not in rollback["make"].stdout


# --- 4. the upgrade, from a second clone --------------------------------------------------------------

def test_an_upgrade_from_a_second_clone_updates_the_one_api_and_its_mappings(life):
    upgrade, first = life["upgrade"], life["first"]["after"]
    _succeeded(upgrade)
    after = upgrade["after"]
    assert after["apis"] == first["apis"], "a second REST API"
    assert after["mappings"] == first["mappings"], "event source mappings made again"
    assert _mappings(after) == EXPECTED_MAPPINGS
    assert sorted(after["functions"]) == sorted([*first["functions"], f"{APP}-{MARKER}"])
    assert f"/{MARKER.replace('_', '-')}" in after["routes"][first["apis"][0]]
    assert f"{APP}-{MARKER.replace('_', '-')}" in after["queues"]
    assert after["lock"] is None
    assert upgrade["data"] == WRITTEN


def test_a_custom_domain_given_as_web_app_origin_joins_the_apis_origin_in_one_update(life):
    upgrade = life["upgrade"]
    _succeeded(upgrade)
    api = f"https://{upgrade['after']['apis'][0]}.execute-api.{REGION}.amazonaws.com"
    assert upgrade["after"]["web app origin"] == f"{CUSTOM_ORIGIN},{api}"
    assert upgrade["after"]["cors"] == _web_app_rule(CUSTOM_ORIGIN, api)
    assert ORIGIN_SET not in upgrade["make"].stdout


# --- 5. the lock, a lost record, a plain `chalice deploy` ---------------------------------------------

def test_a_deploy_while_another_holds_the_lock_refuses_naming_it_and_unlock_breaks_it(life):
    locked, unlocked, upgraded = life["locked"], life["unlock"], life["upgrade"]["after"]
    assert locked["make"].returncode != 0
    said = locked["make"].stderr
    assert re.search(rf"make deploy: stage {STAGE} is locked: make deploy by arn:aws:sts::123456789012:assumed-role/ci/"
                     r"runner-7 \(ci@runner-7, pid 4242\) since \S+ \(1\d min ago\)", said), said
    assert f"make deploy-unlock STAGE={STAGE}" in said
    assert locked["after"]["lock"]["host"] == "runner-7"  # left to its holder
    assert {k: v for k, v in locked["after"].items() if k != "lock"} == {
        k: v for k, v in upgraded.items() if k != "lock"}  # nothing changed
    _succeeded(unlocked)
    assert "removed the lock of make deploy by arn:aws:sts::123456789012:assumed-role/ci/runner-7" in \
        unlocked["make"].stdout
    assert unlocked["after"]["lock"] is None


def test_without_the_apps_record_a_fresh_clone_refuses_to_deploy_or_destroy(life):
    lost, upgraded = life["no record"], life["upgrade"]["after"]
    for done in (lost["make"], lost["destroy"]):
        assert done.returncode != 0
        assert re.search(rf"stage {STAGE} has its app deployed \(\d+ functions, such as {APP}\) but no record",
                         done.stderr), done.stderr
        assert f"aws s3 cp .chalice/deployed/{STAGE}.json s3://{upgraded['bucket']}/{stage_state.state_key(STAGE)}" \
            in done.stderr
    for after in (lost["after"], lost["after destroy"]):
        assert {k: v for k, v in after.items() if k != "record"} == {k: v for k, v in upgraded.items() if k != "record"}


def test_a_plain_chalice_deploy_stops_before_making_anything_for_want_of_a_role(life):
    ran = life["chalice deploy"]
    for done in ran["runs"]:
        assert done.returncode != 0
        assert "you must provide an 'iam_role_arn'" in done.stderr + done.stdout
    assert ran["after"] == ran["before"]  # nothing made


# --- 6. destroy, from a clone without the record -------------------------------------------------------

def test_destroy_from_a_fresh_clone_leaves_nothing_of_the_stage_but_its_table_and_bucket(life):
    destroyed = life["destroy"]
    _succeeded(destroyed)
    after = destroyed["after"]
    assert after["apis"] == [] and after["functions"] == [] and after["mappings"] == [] and after["rules"] == []
    assert after["queues"] == []
    assert set(after["stacks"].values()) <= {None, "DELETE_COMPLETE"}
    assert after["bucket"] is None and f"{APP}-browser" not in after["repositories"]
    assert destroyed["data"] == WRITTEN  # retained (DeletionPolicy: Retain), PURGE=1 not given
    assert f"kept table {APP} and bucket {APP}-data-123456789012-{REGION}" in destroyed["make"].stdout


def test_the_browser_image_was_built_and_pushed_once_for_the_whole_life(life):
    commands = [call[0] for call in life["docker"]]
    assert commands == ["version", "login", "build", "push"]
