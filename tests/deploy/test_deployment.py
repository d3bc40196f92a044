"""The deployment, proven without an account: the package and the layer `make deploy` ships
are built here, checked against Lambda's limits and the runtime's glibc, deployed as the three
stacks plus the packaged app into moto's CloudFormation, and run in a clean Python 3.12 holding
only boto3, every handler with the event AWS would send it. The browser worker's image is not
built (no Docker engine here): `make deploy`'s publishing of it runs with a Docker that puts the
image's manifest into moto's ECR (tests/deploy/docker_double.py), and moto's Lambda is told to
refuse an image function whose image the repository does not hold (MOTO_LAMBDA_STUB_ECR=false).
The image itself is proven in tests/deploy/test_browser_worker.py.

moto's server is tests/deploy/moto_server.py's, which fills in what moto lacks for a deploy (each
gap named there). What moto cannot do for this proof's own way of deploying the app (CloudFormation,
from `chalice package`) is adjusted where it is met (`_moto_can_create`,
`_moto_cannot_attach_managed_policies`) and said there; tests/deploy/test_make_deploy.py runs
`make deploy` itself, `chalice deploy` included. moto's CloudFormation drops an image function's
PackageType, Architectures, EphemeralStorage and TracingConfig: those are held by cfn-lint and
test_browser_worker.py. It skips AWS::CloudWatch::Alarm and AWS::SNS::Subscription, and drops a
state machine's LoggingConfiguration: the alarms are resolved from the template with the stack's
parameters and held to what was deployed here; their wiring and the logging are held by
tests/unit/test_operations_template.py. It takes no IMPORT change set, and its Bedrock answers
(moto_server.py's) accept any model: the model check and the import of log groups are proven in
tests/unit/test_deploy_checks.py."""
from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

import boto3
import pytest

from chalicelib.local.provision import Resolver, function_of_parameter, load_template
from infra import deploy, packaging
from infra.functions import FUNCTIONS, role_output
from tests.deploy.docker_double import PushingDocker
from tests.deploy.moto_server import MotoServer
from tests.support.chalice_names import chalice_function_names
from tests.support.iam import iam_requests, permitted, resource_matches

pytestmark = pytest.mark.xdist_group(name="deployment")

REGION = "us-east-1"
# Per process: build/project/<stage> and build/package/<stage> are never shared by two test workers.
STAGE = f"proof-{os.getpid()}"
HERE = Path(__file__).resolve().parent
ACCOUNT = "123456789012"  # moto's
MAIL_FROM = "Recon agents <agents@proof.test>"


def _moto_can_create(app_template: dict) -> dict:
    """moto's CloudFormation builds an AWS::ApiGateway::RestApi only from a Name (AWS takes it
    from the Body) and cannot deploy a REST API it did not import: give the name, leave the
    Deployment and Stage out. The API's integration is checked from the Body instead."""
    template = json.loads(json.dumps(app_template))
    for resource in template["Resources"].values():
        if resource["Type"] == "AWS::ApiGateway::RestApi":
            resource["Properties"].setdefault("Name", resource["Properties"]["Body"]["info"]["title"])
    template["Resources"] = {k: r for k, r in template["Resources"].items()
                             if r["Type"] not in ("AWS::ApiGateway::Deployment", "AWS::ApiGateway::Stage")}
    template["Outputs"] = {k: o for k, o in template.get("Outputs", {}).items() if k != "EndpointURL"}
    return template


def _moto_cannot_attach_managed_policies(iam, cfn, stack: str, template: dict) -> None:
    """moto's CloudFormation makes an AWS::IAM::ManagedPolicy but attaches none to the roles whose
    ManagedPolicyArns name it: each is attached here, as AWS attaches it, so that a role's permissions
    read from IAM are all of them. (A policy that names its roles itself, `Roles`, moto attaches.)"""
    physical = {r["LogicalResourceId"]: r["PhysicalResourceId"]
                for page in cfn.get_paginator("list_stack_resources").paginate(StackName=stack)
                for r in page["StackResourceSummaries"]}
    for logical_id, resource in template["Resources"].items():
        if resource["Type"] != "AWS::IAM::Role" or logical_id not in physical:
            continue
        role = physical[logical_id]
        attached = {p["PolicyArn"] for p in iam.list_attached_role_policies(RoleName=role)["AttachedPolicies"]}
        named = [physical[reference["Ref"]] for reference in resource["Properties"].get("ManagedPolicyArns", [])]
        assert not attached & set(named), "moto attaches a role's ManagedPolicyArns now: drop this adjustment"
        for arn in named:
            iam.attach_role_policy(RoleName=role, PolicyArn=arn)


class Deployment:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.env = {"AWS_ACCESS_KEY_ID": "proof", "AWS_SECRET_ACCESS_KEY": "proof", "AWS_DEFAULT_REGION": REGION,
                    "AWS_REGION": REGION}
        self.server = MotoServer(tmp, self.env)
        self.endpoint = self.server.endpoint
        self.session = boto3.session.Session(aws_access_key_id="proof", aws_secret_access_key="proof",
                                             region_name=REGION)

    def client(self, service: str):
        return self.session.client(service, endpoint_url=self.endpoint)

    def deploy(self) -> None:
        cfn, s3, lam = self.client("cloudformation"), self.client("s3"), self.client("lambda")
        names = deploy.stack_names(STAGE)
        def quiet(_: str) -> None:
            pass

        self.artifacts = deploy.deploy_stack(cfn, names["artifacts"],
                                             load_template(deploy.INFRA / "artifacts.yaml"), {"Stage": STAGE}, quiet)
        self.docker = PushingDocker(self.client("ecr"))
        self.image = deploy.publish_browser_image(self.client("ecr"), self.artifacts["BrowserImageRepositoryName"],
                                                  self.artifacts["BrowserImageRepositoryUri"], self.docker, quiet)
        self.layer = packaging.build_layer()
        bucket = self.artifacts["ArtifactsBucketName"]
        layer_key = deploy.upload_layer(s3, bucket, self.layer)
        # The stage's parameters, checked as `make deploy` checks them (the model: tests/unit/test_deploy_checks.py).
        self.client("ses").verify_domain_identity(Domain="proof.test")
        options = deploy.StageOptions(mail_from=MAIL_FROM, alarm_email="ops@proof.test")
        stage_parameters = deploy.stage_parameters(cfn, STAGE, options)
        deploy.check_against_template(stage_parameters)
        deploy.check_mail_sender(self.client("ses"), stage_parameters["MailFrom"], REGION)
        infra = load_template(deploy.INFRA / "template.yaml")
        self.infra_parameters = {"Stage": STAGE, "EngineLayerBucket": bucket, "EngineLayerKey": layer_key,
                                 "BrowserImageUri": self.image, **stage_parameters}
        assert deploy.adopt_log_groups(cfn, self.client("logs"), names["infra"], infra, self.infra_parameters, REGION,
                                       quiet) == []  # a new stage: no function has logged yet
        self.outputs = deploy.deploy_stack(cfn, names["infra"], infra, self.infra_parameters, quiet)
        _moto_cannot_attach_managed_policies(self.client("iam"), cfn, names["infra"], infra)

        self.config = deploy.stage_config(STAGE, self.outputs)
        self.app, sam = packaging.package_app(self.config, STAGE, region=REGION)
        s3.upload_file(str(self.app.zip_path), bucket, "app/deployment.zip")
        self.app_template = deploy.translate_packaged_app(sam, f"s3://{bucket}/app/deployment.zip", REGION)
        deploy.deploy_stack(cfn, f"recon-{STAGE}-app", _moto_can_create(self.app_template), {}, quiet)
        resources = cfn.list_stack_resources(StackName=f"recon-{STAGE}-app")["StackResourceSummaries"]
        self.functions = {}
        for resource in resources:
            if resource["ResourceType"] == "AWS::Lambda::Function":
                configuration = lam.get_function(FunctionName=resource["PhysicalResourceId"])["Configuration"]
                name = configuration["Handler"].removeprefix("app.")
                self.functions["api_handler" if name == "app" else name] = configuration
        # Every function `make deploy` makes, by the name it gets there: `chalice deploy` names the app's (as its
        # application graph for this stage's configuration says; moto's CloudFormation, given `chalice package`'s
        # template, names them after the stack), the infrastructure stack the browser worker.
        self.deployed_names = {**chalice_function_names(STAGE, self.config), "browser_run_attempt": lam.get_function(
            FunctionName=self.outputs["BrowserRunAttemptFunctionArn"])["Configuration"]["FunctionName"]}
        self.roles = {**{name: c["Role"] for name, c in self.functions.items()},
                      "browser_run_attempt": lam.get_function(
                          FunctionName=self.outputs["BrowserRunAttemptFunctionArn"])["Configuration"]["Role"]}
        arns = {name: c["FunctionArn"] for name, c in self.functions.items()}
        workflows = deploy.inline_state_machines(load_template(deploy.INFRA / "workflows.yaml"))
        deploy.deploy_stack(cfn, names["workflows"], workflows, deploy.workflow_parameters(self.outputs, arns), quiet)

    def close(self) -> None:
        self.server.stop()
        for built in ("project", "package"):
            shutil.rmtree(packaging.BUILD / built / STAGE, ignore_errors=True)


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    deployed = Deployment(tmp_path_factory.mktemp("deployment"))
    try:
        deployed.deploy()
        yield deployed
    finally:
        deployed.close()


@pytest.fixture(scope="module")
def unpacked(deployment):
    """The app's zip and the layer's, unpacked apart as Lambda does (/var/task and /opt)."""
    root = deployment.tmp / "unpacked"
    return {"app": packaging.unpack(deployment.app.zip_path, root / "task"),
            "layer": packaging.unpack(deployment.layer.zip_path, root / "opt")}


# --- sizes and binaries -------------------------------------------------------------------

def test_the_apps_zip_is_small_enough_for_chalice_deploy_to_upload(deployment):
    assert deployment.app.zipped_bytes < packaging.MAX_DIRECT_UPLOAD_ZIP


def test_every_function_with_its_layers_fits_lambdas_unzipped_limit(deployment):
    for name, function in FUNCTIONS.items():
        size = deployment.app.unzipped_bytes + (deployment.layer.unzipped_bytes if function.engine else 0)
        assert size < packaging.MAX_UNZIPPED, f"{name}: {packaging.mib(size)}"


def test_the_app_zip_holds_no_engine_and_no_local_stack(deployment):
    top = {path.split("/", 1)[0] for path in deployment.app.files}
    assert not top & {"polars", "numpy", "rapidfuzz", "_polars_runtime_32", "boto3", "botocore", "playwright", "greenlet"}
    assert not any(path.startswith("chalicelib/local/") for path in deployment.app.files)


def test_no_compiled_file_of_the_app_or_the_layer_needs_more_than_the_runtimes_glibc(unpacked):
    problems = packaging.elf_problems(unpacked["app"]) + packaging.elf_problems(unpacked["layer"])
    assert problems == []


def test_every_module_of_the_app_and_the_layer_ships_byte_code_the_runtime_uses_unchecked(unpacked):
    """Lambda's code directories are read-only: a module without usable byte code is compiled on
    every cold start, and a timestamp-checked .pyc reads as stale once the zip has rounded its
    source's time to 2 seconds. Chalice's own two modules, which Chalice zips as sources, included."""
    tag = f"cpython-{packaging.PYTHON_VERSION.replace('.', '')}"
    unchecked_hash = (1).to_bytes(4, "little")  # the .pyc's flags: hash-based, source not checked
    lacking = []
    for tree in (unpacked["app"], unpacked["layer"] / "python"):
        for source in tree.rglob("*.py"):
            cached = source.parent / "__pycache__" / f"{source.stem}.{tag}.pyc"
            if not cached.exists() or cached.read_bytes()[4:8] != unchecked_hash:
                lacking.append(str(source.relative_to(tree)))
    assert not lacking, f"{len(lacking)} modules, such as {lacking[:10]}"


def test_staging_the_app_links_the_built_dependencies_and_writes_nothing_into_them(deployment):
    """The staged project's vendor/ links the files of the dependencies built once for all deploys; the
    byte code written beside them (app.py's, Chalice's own modules') stays in the project, and the built
    tree stays as it was built, for the next deploy."""
    built, vendor = packaging.app_dependencies(), packaging.BUILD / "project" / STAGE / "vendor"
    tag = f"cpython-{packaging.PYTHON_VERSION.replace('.', '')}"
    written = [Path("__pycache__") / f"app.{tag}.pyc", Path("chalice") / "__pycache__" / f"app.{tag}.pyc"]
    assert all((vendor / name).is_file() for name in written)
    assert not any((built / name).exists() for name in written) and not (built / "chalice").exists()
    some = sorted(built.rglob("*.py"))[0]
    assert (vendor / some.relative_to(built)).stat().st_ino == some.stat().st_ino


def test_the_glibc_check_catches_a_library_built_for_a_newer_system(tmp_path):
    """The check itself can fail: this machine's own libc needs newer symbols than 2.34 offers
    (Debian 12 has glibc 2.36), and a shared object that asks for them is refused."""
    newest = packaging.elf_needs(Path("/lib/x86_64-linux-gnu/libstdc++.so.6"))
    assert newest.glibc > (2, 17)
    shutil.copy("/lib/x86_64-linux-gnu/libstdc++.so.6", tmp_path / "libstdc++.so.6")
    compiled = subprocess.run(["gcc", "-shared", "-fPIC", "-x", "c", "-", "-o", str(tmp_path / "new.so")],
                              input="#include <sys/random.h>\nint f(void){char b[4];return getrandom(b,4,0)+(int)arc4random();}\n",
                              text=True, capture_output=True)
    if compiled.returncode != 0:
        pytest.skip(f"no C compiler to build the probe: {compiled.stderr[:200]}")
    problems = packaging.elf_problems(tmp_path)
    assert any("new.so: needs GLIBC 2.36" in p for p in problems), problems


# --- every reference resolves -------------------------------------------------------------

def _task_function(state: dict) -> str:
    """The function a Task state runs: its Resource, or for a Lambda service integration (a task that
    waits for its token) its FunctionName."""
    if state["Resource"].startswith("arn:aws:states:::lambda:invoke"):
        return state["Parameters"]["FunctionName"]
    return state["Resource"]


def test_every_task_of_every_state_machine_names_a_deployed_function(deployment):
    sfn, lam = deployment.client("stepfunctions"), deployment.client("lambda")
    machines = sfn.list_state_machines()["stateMachines"]
    workflows = load_template(deploy.INFRA / "workflows.yaml")
    assert {m["name"] for m in machines} == {
        deployment.outputs[r["Properties"]["StateMachineName"]["Ref"]] for r in workflows["Resources"].values()
        if r["Type"] == "AWS::StepFunctions::StateMachine"}
    for machine in machines:
        definition = json.loads(sfn.describe_state_machine(stateMachineArn=machine["stateMachineArn"])["definition"])
        tasks = [_task_function(s) for s in definition["States"].values() if s["Type"] == "Task"]
        assert tasks
        for task in tasks:
            assert task.startswith("arn:aws:lambda:"), task
            lam.get_function(FunctionName=task)  # raises if there is no such function


def test_the_app_starts_the_state_machines_the_workflows_stack_made(deployment):
    sfn = deployment.client("stepfunctions")
    made = {m["stateMachineArn"] for m in sfn.list_state_machines()["stateMachines"]}
    variables = deployment.config["stages"][STAGE]["environment_variables"]
    assert {variables["RECON_FILE_IMPORT_STATE_MACHINE"], variables["RECON_RECONCILIATION_RUN_STATE_MACHINE"],
            variables["RECON_BROWSER_RUN_STATE_MACHINE"]} == made


def test_the_browser_worker_runs_the_image_deploy_pushed_to_the_artifacts_repository_in_the_browser_role(deployment):
    lam, ecr = deployment.client("lambda"), deployment.client("ecr")
    function = lam.get_function(FunctionName=deployment.outputs["BrowserRunAttemptFunctionArn"])
    repository, tag = deployment.image.rsplit(":", 1)
    assert function["Code"]["ImageUri"] == deployment.image
    assert repository == deployment.artifacts["BrowserImageRepositoryUri"]
    assert tag == packaging.browser_image_context().tag  # the hash of what the image is built from
    [pushed] = ecr.describe_images(repositoryName=deployment.artifacts["BrowserImageRepositoryName"])["imageDetails"]
    assert pushed["imageTags"] == [tag]
    assert [call[0] for call in deployment.docker.calls] == ["check", "login", "build", "push"]
    configuration = function["Configuration"]
    assert configuration["Role"] == deployment.outputs["BrowserRoleArn"]
    assert (configuration["Timeout"], configuration["MemorySize"]) == (900, 2048)
    assert configuration["FunctionName"] == f"recon-{STAGE}-browser_run_attempt"


def test_the_browser_worker_is_given_the_apps_values_and_the_stage_secrets_prefix(deployment):
    """Its variables, as deployed, hold what the Chalice functions are configured with."""
    variables = deployment.client("lambda").get_function(
        FunctionName=deployment.outputs["BrowserRunAttemptFunctionArn"])["Configuration"]["Environment"]["Variables"]
    app = {**deployment.config["environment_variables"], **deployment.config["stages"][STAGE]["environment_variables"]}
    assert {name: app.get(name) for name in variables} == variables
    assert variables["RECON_SECRETS_PREFIX"] == deployment.outputs["SecretsPrefix"] == f"recon-{STAGE}"


def test_every_event_source_mapping_joins_a_deployed_queue_to_a_deployed_function(deployment):
    lam, sqs = deployment.client("lambda"), deployment.client("sqs")
    mappings = lam.list_event_source_mappings()["EventSourceMappings"]
    queues = {sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
              for url in sqs.list_queues()["QueueUrls"]}
    consumers = {}
    for mapping in mappings:
        assert mapping["EventSourceArn"] in queues
        configuration = lam.get_function(FunctionName=mapping["FunctionArn"])["Configuration"]
        consumers[mapping["EventSourceArn"].rsplit(":", 1)[-1]] = configuration["Handler"]
    assert consumers == {deployment.outputs["BulkQueueName"]: "app.bulk_worker",
                         deployment.outputs["InvestigationQueueName"]: "app.investigation_worker",
                         deployment.outputs["AgentRunQueueName"]: "app.agent_worker",
                         deployment.outputs["WebhookEventQueueName"]: "app.webhook_fanout",
                         deployment.outputs["WebhookDeliveryQueueName"]: "app.webhook_worker"}


def test_agents_schedules_go_to_a_deployed_group_with_a_deployed_role_and_queue(deployment):
    """What the app is told to make agents' schedules with exists: the group, the role the
    Scheduler assumes (which may send to the queue), and the queue, which dead-letters on the
    delivery the worker fails a run on."""
    variables = deployment.config["stages"][STAGE]["environment_variables"]
    scheduler, iam, sqs = deployment.client("scheduler"), deployment.client("iam"), deployment.client("sqs")
    scheduler.get_schedule_group(Name=variables["RECON_SCHEDULE_GROUP_NAME"])
    role = variables["RECON_SCHEDULER_ROLE_ARN"]
    trust = iam.get_role(RoleName=role.rsplit("/", 1)[-1])["Role"]["AssumeRolePolicyDocument"]
    assert [s["Principal"] for s in trust["Statement"]] == [{"Service": "scheduler.amazonaws.com"}]
    url = sqs.get_queue_url(QueueName=variables["RECON_AGENT_RUN_QUEUE_NAME"])["QueueUrl"]
    attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert json.loads(attributes["RedrivePolicy"])["maxReceiveCount"] == 3  # settings.agent_run_max_receives
    assert int(attributes["VisibilityTimeout"]) == 6 * FUNCTIONS["agent_worker"].timeout_s


def test_every_eventbridge_rule_targets_a_deployed_function_and_s3_only_wakes_it_for_uploads_and_drops(deployment):
    events, lam = deployment.client("events"), deployment.client("lambda")
    rules = events.list_rules()["Rules"]
    assert len(rules) == 2
    for rule in rules:
        targets = events.list_targets_by_rule(Rule=rule["Name"])["Targets"]
        assert targets
        for target in targets:
            lam.get_function(FunctionName=target["Arn"])
        if rule.get("EventPattern"):
            pattern = json.loads(rule["EventPattern"])
            assert pattern["detail"]["bucket"]["name"] == [deployment.outputs["BucketName"]]
            assert pattern["detail"]["object"]["key"] == [{"prefix": "uploads/"}, {"prefix": "drops/"}]


def test_every_permission_names_a_deployed_function_and_a_deployed_source(deployment):
    lam, events = deployment.client("lambda"), deployment.client("events")
    rules = {r["Arn"] for r in events.list_rules()["Rules"]}
    permissions = [r for r in deployment.app_template["Resources"].values() if r["Type"] == "AWS::Lambda::Permission"]
    assert len(permissions) == 3  # the API, and the two EventBridge rules
    for configuration in deployment.functions.values():
        try:
            policy = json.loads(lam.get_policy(FunctionName=configuration["FunctionName"])["Policy"])
        except lam.exceptions.ResourceNotFoundException:
            continue
        for statement in policy["Statement"]:
            assert statement["Resource"] == configuration["FunctionArn"]
            source = statement.get("Condition", {}).get("ArnLike", {}).get("AWS:SourceArn")
            if statement["Principal"]["Service"] == "events.amazonaws.com":
                assert source in rules, source


def test_the_apis_integration_calls_the_api_function(deployment):
    [api] = [r for r in deployment.app_template["Resources"].values() if r["Type"] == "AWS::ApiGateway::RestApi"]
    uris = {json.dumps(method["x-amazon-apigateway-integration"]["uri"])
            for path in api["Properties"]["Body"]["paths"].values() for method in path.values()
            if isinstance(method, dict) and "x-amazon-apigateway-integration" in method}
    assert uris and all("APIHandler.Arn" in uri for uri in uris), uris


def test_every_function_has_its_groups_role_its_layers_and_the_runtime(deployment, lambda_layers):
    assert set(deployment.functions) == set(FUNCTIONS)
    for name, configuration in deployment.functions.items():
        function = FUNCTIONS[name]
        assert configuration["Runtime"] == packaging.RUNTIME
        assert configuration["Role"] == deployment.outputs[role_output(function.group)], name
        assert lambda_layers[name] == ([deployment.outputs["EngineLayerArn"]] if function.engine else []), name
        assert (configuration["MemorySize"], configuration["Timeout"]) == (function.memory_mb, function.timeout_s)


@pytest.fixture(scope="module")
def lambda_layers(deployment):
    """Each function's layers as the template gives them to CloudFormation (moto's CloudFormation
    drops a function's Layers; AWS attaches them)."""
    layers = {}
    for resource in deployment.app_template["Resources"].values():
        if resource["Type"] == "AWS::Lambda::Function":
            name = resource["Properties"]["Handler"].removeprefix("app.")
            layers["api_handler" if name == "app" else name] = resource["Properties"].get("Layers", [])
    return layers


# --- logs, alarms, the dashboard -------------------------------------------------------------

def _role_documents(iam, role_arn: str) -> list[dict]:
    """Every policy document of a deployed role, managed and inline, as IAM holds them."""
    role = role_arn.rsplit("/", 1)[-1]
    documents = []
    for attached in iam.list_attached_role_policies(RoleName=role)["AttachedPolicies"]:
        version = iam.get_policy(PolicyArn=attached["PolicyArn"])["Policy"]["DefaultVersionId"]
        documents.append(iam.get_policy_version(PolicyArn=attached["PolicyArn"], VersionId=version)["PolicyVersion"]["Document"])
    for name in iam.list_role_policies(RoleName=role)["PolicyNames"]:
        documents.append(iam.get_role_policy(RoleName=role, PolicyName=name)["PolicyDocument"])
    return [_policy_document(d) for d in documents]


def _role_statements(iam, role_arn: str) -> list[dict]:
    """Every statement of a deployed role's policies."""
    return [s for d in _role_documents(iam, role_arn) for s in _listed(d["Statement"])]


def _policy_document(document) -> dict:
    """boto3 decodes the URL-encoded JSON IAM answers. moto's CloudFormation keeps a role's inline
    policy as the text of the Python dict it was given (repr, not JSON): read as a Python literal."""
    if not isinstance(document, str):
        return document
    text = unquote(document)
    try:
        return json.loads(text)
    except ValueError:
        return ast.literal_eval(text)


def _listed(value) -> list:
    return value if isinstance(value, list) else [value]


def _may_write_logs_to(statements: list[dict], arn: str) -> bool:
    needed = {"logs:CreateLogStream", "logs:PutLogEvents"}
    allowed = set()
    for statement in statements:
        if statement["Effect"] == "Allow" and any(resource_matches(r, arn) for r in _listed(statement["Resource"])):
            allowed |= set(_listed(statement["Action"]))
    return needed <= allowed


def test_every_deployed_function_may_write_its_own_log_group_the_api_function_included(deployment):
    """Chalice names the API's function `recon-<stage>`, which the old `recon-<stage>-*` missed: it wrote
    no logs and so no metrics. Each function's role, as IAM holds it, must cover its own group's streams."""
    iam = deployment.client("iam")
    assert deployment.deployed_names["api_handler"] == f"recon-{STAGE}"
    assert set(deployment.deployed_names) == set(deployment.roles) == set(FUNCTIONS) | {"browser_run_attempt"}
    for name, function_name in deployment.deployed_names.items():
        group = f"arn:aws:logs:{REGION}:{ACCOUNT}:log-group:/aws/lambda/{function_name}:*"
        assert _may_write_logs_to(_role_statements(iam, deployment.roles[name]), group), (name, group)
    # The check can fail: another stage's groups are not this stage's.
    api_role = _role_statements(iam, deployment.roles["api_handler"])
    assert not _may_write_logs_to(api_role, f"arn:aws:logs:{REGION}:{ACCOUNT}:log-group:/aws/lambda/recon-{STAGE}x:*")
    assert not _may_write_logs_to(api_role, f"arn:aws:logs:{REGION}:{ACCOUNT}:log-group:/aws/lambda/other-{STAGE}:*")


def test_every_deployed_function_has_its_log_group_in_the_stack_with_the_retention_given(deployment):
    logs, cfn = deployment.client("logs"), deployment.client("cloudformation")
    groups = {g["logGroupName"]: g for page in logs.get_paginator("describe_log_groups").paginate(
        logGroupNamePrefix=f"/aws/lambda/recon-{STAGE}") for g in page["logGroups"]}
    in_stack = {r["PhysicalResourceId"] for page in cfn.get_paginator("list_stack_resources").paginate(
        StackName=deploy.stack_names(STAGE)["infra"]) for r in page["StackResourceSummaries"]
        if r["ResourceType"] == "AWS::Logs::LogGroup"}
    retention = int(deployment.infra_parameters["LogRetentionDays"])
    assert retention == 30  # the default
    for name, function_name in deployment.deployed_names.items():
        group = f"/aws/lambda/{function_name}"
        assert group in in_stack, name
        assert groups[group].get("retentionInDays") == retention, name
    assert deployment.outputs["StateMachineLogGroupName"] in in_stack
    assert logs.describe_log_groups(logGroupNamePrefix=deployment.outputs["StateMachineLogGroupName"])[
        "logGroups"][0]["retentionInDays"] == retention


@pytest.fixture(scope="module")
def alarms(deployment):
    """The infrastructure stack's alarms (moto's CloudFormation makes none), as the stack's parameters resolve them."""
    template = load_template(deploy.INFRA / "template.yaml")
    resolver = Resolver(template, deployment.infra_parameters, REGION)
    return [resolver.resolve(r["Properties"]) for r in template["Resources"].values()
            if r["Type"] == "AWS::CloudWatch::Alarm" and resolver.condition(r.get("Condition"))]


def test_every_alarm_watches_something_deployed_and_everything_deployed_is_watched(deployment, alarms):
    sqs, sfn, apigateway = deployment.client("sqs"), deployment.client("stepfunctions"), deployment.client("apigateway")
    watched: dict[tuple[str, str], set[str]] = {}
    for alarm in alarms:
        for dimension in alarm["Dimensions"]:
            watched.setdefault((alarm["MetricName"], dimension["Name"]), set()).add(dimension["Value"])
    functions = set(deployment.deployed_names.values())
    assert watched[("Errors", "FunctionName")] == watched[("Throttles", "FunctionName")] == functions
    queues = {url.rsplit("/", 1)[-1] for url in sqs.list_queues()["QueueUrls"]}
    dead_letter = {q for q in queues if q.endswith("-dlq")}
    assert len(dead_letter) == 5
    assert watched[("ApproximateNumberOfMessagesVisible", "QueueName")] == dead_letter
    assert watched[("ApproximateAgeOfOldestMessage", "QueueName")] == queues - dead_letter
    machines = {m["stateMachineArn"] for m in sfn.list_state_machines()["stateMachines"]}
    assert watched[("ExecutionsFailed", "StateMachineArn")] == machines
    # The REST API as the packaged app names it (app.py: after the stage), in the stage Chalice deploys.
    [api] = [a["name"] for a in apigateway.get_rest_apis()["items"]]
    assert watched[("5XXError", "ApiName")] == {api} == {f"recon-{STAGE}"}
    assert watched[("5XXError", "Stage")] == {deployment.config["stages"][STAGE]["api_gateway_stage"]}


def test_the_dashboard_is_deployed_and_shows_every_deployed_function(deployment):
    cloudwatch = deployment.client("cloudwatch")
    body = json.loads(cloudwatch.get_dashboard(DashboardName=deployment.outputs["DashboardName"])["DashboardBody"])
    shown = {m[3] for w in body["widgets"] for m in w["properties"].get("metrics", [])}
    assert set(deployment.deployed_names.values()) <= shown


def test_the_functions_mail_from_and_call_the_model_the_deploy_was_given(deployment):
    for name, configuration in deployment.functions.items():
        variables = configuration["Environment"]["Variables"]
        assert (variables["RECON_MAIL_SENDER"], variables["RECON_DEFAULT_MODEL"], variables["RECON_AGENT_MODELS"]) == (
            MAIL_FROM, "amazon.nova-pro-v1:0", "amazon.nova-pro-v1:0"), name


# --- sign-in: the user pool, and how the API verifies its tokens -------------------------------

def test_the_stages_user_pool_and_client_are_deployed_as_the_template_says(deployment):
    cognito = deployment.client("cognito-idp")
    pool = cognito.describe_user_pool(UserPoolId=deployment.outputs["UserPoolId"])["UserPool"]
    assert pool["Name"] == f"recon-{STAGE}" and pool["UsernameAttributes"] == ["email"]
    assert pool["AdminCreateUserConfig"]["AllowAdminCreateUserOnly"] is True
    assert "reconciliation service" in pool["AdminCreateUserConfig"]["InviteMessageTemplate"]["EmailSubject"]
    client = cognito.describe_user_pool_client(UserPoolId=pool["Id"],
                                               ClientId=deployment.outputs["UserPoolClientId"])["UserPoolClient"]
    assert "ClientSecret" not in client and "ALLOW_USER_SRP_AUTH" in client["ExplicitAuthFlows"]
    assert client["SupportedIdentityProviders"] == ["COGNITO"]  # no federation given to this stage


def test_every_function_is_given_the_pool_and_client_the_api_verifies_tokens_for(deployment):
    for name, configuration in deployment.functions.items():
        variables = configuration["Environment"]["Variables"]
        assert (variables["RECON_USER_POOL_ID"], variables["RECON_USER_POOL_CLIENT_ID"]) == (
            deployment.outputs["UserPoolId"], deployment.outputs["UserPoolClientId"]), name


@pytest.fixture(scope="module")
def identity_run(deployment, unpacked, lambda_boto3) -> tuple[dict, list[dict]]:
    setup, calls = deployment.tmp / "identity-setup.json", deployment.tmp / "identity-calls.jsonl"
    setup.write_text(json.dumps({"paths": [str(unpacked["app"]), str(lambda_boto3)], "calls": str(calls)}))
    stage = deployment.config["stages"][STAGE]
    env = {"PATH": os.environ.get("PATH", ""), "LANG": "C.UTF-8", **deployment.env,
           **deployment.config["environment_variables"], **stage["environment_variables"],
           "AWS_ENDPOINT_URL": deployment.endpoint, "AWS_LAMBDA_FUNCTION_NAME": "recon-proof"}
    done = subprocess.run([packaging.find_runtime_python(), "-I", "-S", str(HERE / "identity_runner.py"), str(setup)],
                          capture_output=True, text=True, env=env, cwd=deployment.tmp, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1]), [json.loads(line) for line in calls.read_text().splitlines()]


def test_the_packaged_api_verifies_the_pools_tokens_against_the_keys_it_publishes(deployment, unpacked, identity_run):
    """On AWS the keys are fetched from the pool's issuer (https); here from moto's endpoint, which
    serves them at the same path under the pool's id. The signature, issuer and audience are checked
    by joserfc and cryptography from the app's zip, as Lambda imports them."""
    seen, _ = identity_run
    pool = deployment.outputs["UserPoolId"]
    assert (seen["pool_id"], seen["client_id"]) == (pool, deployment.outputs["UserPoolClientId"])
    assert seen["verified_subject"] == seen["sub"] == seen["resent"]
    assert seen["verified_email"] == "proof.person@proof.test"  # email_verified read from the token
    assert seen["tampered"] == "invalid token: its signature does not verify"
    assert seen["keys_on_aws"] == f"https://cognito-idp.{REGION}.amazonaws.com/{pool}/.well-known/jwks.json"
    assert seen["keys_here"] == f"{deployment.endpoint}/{pool}/.well-known/jwks.json"
    for module in ("joserfc", "cryptography"):
        assert seen[module].startswith(str(unpacked["app"])), seen[module]


def test_the_api_role_allows_exactly_the_admin_calls_on_its_own_pool(deployment, identity_run, role_documents):
    _, calls = identity_run
    assert {c["operation"] for c in calls} == {"AdminCreateUser", "AdminGetUser", "ListUsers", "AdminDisableUser",
                                                "AdminUserGlobalSignOut", "AdminEnableUser"}
    assert _refusals(deployment, calls, role_documents.__getitem__) == []
    operations = len({c["operation"] for c in calls})  # each refused once, however often it was called
    other_pool = [{**call, "params": {"UserPoolId": f"{REGION}_AnotherPool"}} for call in calls]
    assert len(_refusals(deployment, other_pool, role_documents.__getitem__)) == operations
    for function, role in deployment.roles.items():
        if _group(function) != "api":
            assert len(_refusals(deployment, calls, lambda _, held=role_documents[role]: held)) == operations, function


# --- the package runs -----------------------------------------------------------------------

@pytest.fixture(scope="module")
def lambda_boto3(deployment):
    """boto3 as the Lambda runtime provides it, and nothing else."""
    return packaging.runtime_boto3()


@dataclass
class PackagedRun:
    done: subprocess.CompletedProcess
    steps: list[dict]
    invoked: list[str]
    calls: list[dict]  # every AWS call a handler made (lambda_runner.py)


def _run_packaged(deployment, unpacked, lambda_boto3, with_engine: bool) -> PackagedRun:
    workflows = load_template(deploy.INFRA / "workflows.yaml")
    machines = {}
    for logical_id, output in (("FileImportStateMachine", "FileImportStateMachineName"),
                               ("ReconciliationRunStateMachine", "ReconciliationRunStateMachineName")):
        props = workflows["Resources"][logical_id]["Properties"]
        machines[deployment.outputs[output]] = {
            "definition": json.loads((deploy.INFRA / props["DefinitionS3Location"]).read_text()),
            "functions": {var: function_of_parameter(ref["Ref"]) for var, ref in props["DefinitionSubstitutions"].items()},
        }
    paths = [str(unpacked["app"])] + ([str(unpacked["layer"] / "python")] if with_engine else []) + [str(lambda_boto3)]
    setup = deployment.tmp / f"setup-{with_engine}.json"
    calls = deployment.tmp / f"calls-{with_engine}.jsonl"
    setup.write_text(json.dumps({"paths": paths, "machines": machines, "with_engine": with_engine, "calls": str(calls)}))
    stage = deployment.config["stages"][STAGE]
    env = {"PATH": os.environ.get("PATH", ""), "LANG": "C.UTF-8", **deployment.env,
           **deployment.config["environment_variables"], **stage["environment_variables"],
           "AWS_ENDPOINT_URL": deployment.endpoint, "AWS_LAMBDA_FUNCTION_NAME": "recon-proof"}
    done = subprocess.run([packaging.find_runtime_python(), "-I", "-S", str(HERE / "lambda_runner.py"), str(setup)],
                          capture_output=True, text=True, env=env, cwd=deployment.tmp, timeout=600)
    (deployment.tmp / f"runner-{with_engine}.log").write_text(done.stdout + "\n--- stderr ---\n" + done.stderr)
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith('{"step"') or line.startswith('{"invoked"')]
    steps = [line for line in lines if "step" in line]
    invoked = next((line["invoked"] for line in lines if "invoked" in line), [])
    return PackagedRun(done, steps, invoked, [json.loads(line) for line in calls.read_text().splitlines()])


@pytest.fixture(scope="module")
def run_with_engine(deployment, unpacked, lambda_boto3) -> PackagedRun:
    return _run_packaged(deployment, unpacked, lambda_boto3, with_engine=True)


@pytest.fixture(scope="module")
def run_without_engine(deployment, unpacked, lambda_boto3) -> PackagedRun:
    return _run_packaged(deployment, unpacked, lambda_boto3, with_engine=False)


def test_the_packaged_app_runs_every_handler_in_a_clean_interpreter(run_with_engine):
    run = run_with_engine
    failed = [s for s in run.steps if not s["ok"]]
    assert run.steps and not failed, failed or run.done.stderr[-3000:]
    assert set(run.invoked) == set(FUNCTIONS) | {"browser_run_attempt"}, set(FUNCTIONS) - set(run.invoked)


def test_the_functions_without_the_engine_layer_run_without_it(run_without_engine):
    run = run_without_engine
    assert run.steps and all(s["ok"] for s in run.steps), run.steps or run.done.stderr[-3000:]
    assert set(run.invoked) == {name for name, f in FUNCTIONS.items() if not f.engine}


# --- each function's role allows what it calls ----------------------------------------------------

def _group(function: str) -> str:
    """A function's group: the browser worker (an image function of the infrastructure stack, not one of the
    app's) is in the browser runs' role."""
    return "browser" if function == "browser_run_attempt" else FUNCTIONS[function].group


def _refusals(deployment, calls: list[dict], documents_of) -> list[str]:
    """Each recorded call some IAM request of which its function's role does not allow: the function,
    its role, the call and the action on the resource that is missing."""
    refused = []
    for call in calls:
        role = deployment.roles[call["function"]]
        for request in iam_requests(call, REGION, ACCOUNT):
            if not permitted(documents_of(role), request):
                refused.append(f"{call['function']} (role {role.rsplit('/', 1)[-1]}, {_group(call['function'])}): "
                               f"{call['service']}:{call['operation']}{' (presigned)' if call['presigned'] else ''} "
                               f"needs {request.action} on {request.resource}")
    return sorted(set(refused))


@pytest.fixture(scope="module")
def role_documents(deployment):
    iam = deployment.client("iam")
    return {role: _role_documents(iam, role) for role in set(deployment.roles.values())}


def test_every_aws_call_of_every_handler_is_allowed_by_its_functions_role(deployment, run_with_engine,
                                                                         run_without_engine, role_documents):
    """The proof's handlers, each judged by its own role's policies as the deployed IAM holds them: every
    call they made (and every URL they presigned for a client to use) is an action on a resource that the
    role allows. What the proof does not reach is allowed in infra/template.yaml by reading the code,
    and says so there."""
    calls = run_with_engine.calls + run_without_engine.calls
    assert {call["function"] for call in calls} == set(FUNCTIONS) | {"browser_run_attempt"}  # every handler reached AWS
    (deployment.tmp / "iam-requests.txt").write_text("\n".join(sorted({
        f"{_group(c['function'])} {c['function']} {r.action} {r.resource}"
        for c in calls for r in iam_requests(c, REGION, ACCOUNT)})))
    assert _refusals(deployment, calls, role_documents.__getitem__) == []


def test_the_permission_check_refuses_a_call_once_its_permission_is_taken_from_the_role(
        deployment, run_with_engine, role_documents):
    """The check can fail: the API's role without the statement that allows its first call."""
    [first, *_] = [c for c in run_with_engine.calls if c["function"] == "api_handler"]
    request = iam_requests(first, REGION, ACCOUNT)[0]
    api_role = deployment.roles["api_handler"]

    def without_that_statement(document: dict) -> dict:
        return {**document, "Statement": [s for s in _listed(document["Statement"]) if not permitted(
            [{"Version": "2012-10-17", "Statement": [s]}], request)]}

    lacking = {**role_documents, api_role: [without_that_statement(d) for d in role_documents[api_role]]}
    refused = _refusals(deployment, run_with_engine.calls, lacking.__getitem__)
    assert any(line.startswith("api_handler ") and f"needs {request.action} on {request.resource}" in line
               for line in refused), refused
    assert all(line.startswith("api_handler ") for line in refused), refused  # the other roles are untouched
