"""`make deploy`, `make destroy` and `make key`: the whole deployment of a stage, in order.

1. the artifacts stack (infra/artifacts.yaml: a bucket for the engine layer's zip, a repository
   for the browser worker's image); the browser image built with Docker and pushed there unless
   that repository has it already (its tag is a hash of what it is built from); the layer built
   and uploaded;
2. the infrastructure stack (infra/template.yaml): table, data bucket, queues, the engine layer,
   one role per group of functions, the browser worker (a container-image function, that image);
3. the app, with `chalice deploy`, its stage configuration generated from that stack's outputs
   (infra/functions.py says which role, layer and size each function gets);
4. the workflows stack (infra/workflows.yaml), given the ARNs of the functions Chalice deployed
   and of those the infrastructure stack defines.

Runs under `.venv-deploy` (Python 3.12, the Lambda runtime's), with the caller's AWS credentials,
and needs a running Docker engine when the browser image is to be built.
"""
from __future__ import annotations

import argparse
import base64
import copy
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from chalicelib.local.provision import function_of_parameter, load_template
from infra import packaging
from infra.functions import FUNCTIONS, role_output

ROOT = packaging.ROOT
INFRA = ROOT / "infra"
BASE_CONFIG = ROOT / ".chalice" / "config.json"
APP_NAME = "recon"


def stack_names(stage: str) -> dict[str, str]:
    return {"artifacts": f"{APP_NAME}-{stage}-artifacts", "infra": f"{APP_NAME}-{stage}-infra",
            "workflows": f"{APP_NAME}-{stage}-workflows"}


# --- configuration ----------------------------------------------------------------------

def stage_config(stage: str, outputs: dict[str, str], base: dict | None = None, log_level: str = "INFO") -> dict:
    """The committed `.chalice/config.json` plus the stage, every name taken from the
    infrastructure stack's outputs: no hand edits, no naming convention to agree on."""
    config = copy.deepcopy(base if base is not None else json.loads(BASE_CONFIG.read_text()))
    layer = outputs.get("EngineLayerArn")
    functions = {}
    for name, function in FUNCTIONS.items():
        functions[name] = {
            "iam_role_arn": outputs[role_output(function.group)],
            "lambda_memory_size": function.memory_mb,
            "lambda_timeout": function.timeout_s,
            "layers": [layer] if function.engine and layer else [],
        }
    config.setdefault("stages", {})[stage] = {
        "api_gateway_stage": "api",
        "manage_iam_role": False,
        "iam_role_arn": outputs[role_output("api")],
        "xray": True,
        "environment_variables": {
            "RECON_STAGE": stage,
            "RECON_LOG_LEVEL": log_level,
            "RECON_TABLE_NAME": outputs["TableName"],
            "RECON_BUCKET_NAME": outputs["BucketName"],
            "RECON_BULK_QUEUE_NAME": outputs["BulkQueueName"],
            "RECON_INVESTIGATION_QUEUE_NAME": outputs["InvestigationQueueName"],
            "RECON_AGENT_RUN_QUEUE_NAME": outputs["AgentRunQueueName"],
            "RECON_WEBHOOK_EVENT_QUEUE_NAME": outputs["WebhookEventQueueName"],
            "RECON_WEBHOOK_DELIVERY_QUEUE_NAME": outputs["WebhookDeliveryQueueName"],
            "RECON_EVENT_BUS_NAME": outputs["EventBusName"],
            "RECON_SCHEDULE_GROUP_NAME": outputs["ScheduleGroupName"],
            "RECON_SCHEDULER_ROLE_ARN": outputs["SchedulerRoleArn"],
            "RECON_FILE_IMPORT_STATE_MACHINE": outputs["FileImportStateMachineArn"],
            "RECON_RECONCILIATION_RUN_STATE_MACHINE": outputs["ReconciliationRunStateMachineArn"],
            "RECON_BROWSER_RUN_STATE_MACHINE": outputs["BrowserRunStateMachineArn"],
            "RECON_SECRETS_PREFIX": outputs["SecretsPrefix"],
        },
        "lambda_functions": functions,
    }
    return config


def workflow_parameters(outputs: dict[str, str], function_arns: dict[str, str]) -> dict[str, str]:
    """Parameters of infra/workflows.yaml: the state machine names from the infrastructure's
    outputs, and each `<Function>Arn` from the ARN of the function that was deployed: by Chalice,
    or by the infrastructure stack (a container image), whose output is `<Function>FunctionArn`."""
    template = load_template(INFRA / "workflows.yaml")
    parameters = {}
    for name in template["Parameters"]:
        function = function_of_parameter(name)
        if function is None:
            parameters[name] = outputs[name]
        elif function in function_arns:
            parameters[name] = function_arns[function]
        elif (output := name.removesuffix("Arn") + "FunctionArn") in outputs:
            parameters[name] = outputs[output]
        else:
            raise RuntimeError(f"the workflows need function {function}, which was not deployed")
    return parameters


def deployed_function_arns(stage: str, deployed_dir: Path = ROOT / ".chalice" / "deployed") -> dict[str, str]:
    """What `chalice deploy` recorded: {lambda_function name: its ARN}."""
    state = json.loads((deployed_dir / f"{stage}.json").read_text())
    prefix = f"{APP_NAME}-{stage}-"
    return {r["name"].removeprefix(prefix): r["lambda_arn"] for r in state["resources"]
            if r.get("resource_type") == "lambda_function"}


# --- templates ---------------------------------------------------------------------------

def inline_state_machines(template: dict, base: Path = INFRA) -> dict:
    """Replace each `DefinitionS3Location` (a local ASL file) by the definition itself, so the
    template deploys without a packaging bucket: a DefinitionString whose `${...}` are the
    DefinitionSubstitutions, filled in by Fn::Sub."""
    template = copy.deepcopy(template)
    for resource in template["Resources"].values():
        props = resource.get("Properties", {})
        if (resource["Type"] == "AWS::StepFunctions::StateMachine"
                and isinstance(props.get("DefinitionS3Location"), str)):
            text = json.dumps(json.loads((base / props.pop("DefinitionS3Location")).read_text()), indent=1)
            props["DefinitionString"] = {"Fn::Sub": [text, props.pop("DefinitionSubstitutions", {})]}
        resource.pop("Metadata", None)
    return template


def sam_to_cloudformation(sam: dict, code_uri: str) -> dict:
    """The packaged app's SAM template as plain CloudFormation (aws-sam-translator), its
    functions' code at `code_uri` (s3://bucket/key)."""
    from samtranslator.public.translator import ManagedPolicyLoader
    from samtranslator.translator.transform import transform

    sam = copy.deepcopy(sam)
    for resource in sam["Resources"].values():
        if resource["Type"] == "AWS::Serverless::Function":
            resource["Properties"]["CodeUri"] = code_uri

    class NoManagedPolicies(ManagedPolicyLoader):
        def load(self):
            return {}

    return transform(sam, {}, NoManagedPolicies(None))


def translate_packaged_app(sam: dict, code_uri: str, region: str) -> dict:
    """sam_to_cloudformation, run in `.venv-deploy` (where aws-sam-translator lives)."""
    venv = packaging.ensure_deploy_venv()
    script = ("import json, sys; from infra.deploy import sam_to_cloudformation; "
              "print(json.dumps(sam_to_cloudformation(json.load(sys.stdin), sys.argv[1])))")
    done = subprocess.run([str(venv / "bin" / "python"), "-c", script, code_uri], input=json.dumps(sam),
                          capture_output=True, text=True, cwd=ROOT, check=False,
                          env={**os.environ, "AWS_DEFAULT_REGION": region, "PYTHONPATH": str(ROOT)})
    if done.returncode != 0:
        raise RuntimeError(f"aws-sam-translator failed: {done.stderr[-2000:]}")
    return json.loads(done.stdout)


# --- AWS ---------------------------------------------------------------------------------

def _session():
    import boto3

    return boto3.session.Session()


def deploy_stack(cfn, name: str, template: dict, parameters: dict[str, str], log=print) -> dict[str, str]:
    """Create or update a stack and wait; its outputs."""
    body = json.dumps(template)
    arguments = {"StackName": name, "TemplateBody": body,
                 "Parameters": [{"ParameterKey": k, "ParameterValue": v} for k, v in parameters.items()],
                 "Capabilities": ["CAPABILITY_IAM", "CAPABILITY_NAMED_IAM", "CAPABILITY_AUTO_EXPAND"]}
    try:
        cfn.describe_stacks(StackName=name)
        exists = True
    except cfn.exceptions.ClientError:
        exists = False
    if exists:
        try:
            cfn.update_stack(**arguments)
            log(f"stack {name}: updating")
            cfn.get_waiter("stack_update_complete").wait(StackName=name, WaiterConfig={"Delay": 5, "MaxAttempts": 720})
        except cfn.exceptions.ClientError as error:
            if "No updates are to be performed" not in str(error):
                raise
            log(f"stack {name}: up to date")
    else:
        cfn.create_stack(**arguments)
        log(f"stack {name}: creating")
        cfn.get_waiter("stack_create_complete").wait(StackName=name, WaiterConfig={"Delay": 5, "MaxAttempts": 720})
    return stack_outputs(cfn, name)


def stack_outputs(cfn, name: str) -> dict[str, str]:
    [stack] = cfn.describe_stacks(StackName=name)["Stacks"]
    return {o["OutputKey"]: o["OutputValue"] for o in stack.get("Outputs", [])}


def upload_layer(s3, bucket: str, layer: packaging.Package) -> str:
    key = f"layers/{layer.zip_path.name}"
    try:
        s3.head_object(Bucket=bucket, Key=key)
    except s3.exceptions.ClientError:
        s3.upload_file(str(layer.zip_path), bucket, key)
    return key


# --- the browser worker's image -------------------------------------------------------------

NO_DOCKER = "the browser worker is a container image: make deploy needs a running Docker engine"


class DockerUnavailable(RuntimeError):
    """No docker command, or no Docker engine answering it."""


class Docker:
    """The docker command line, as `make deploy` uses it to build and push the browser image."""

    def __init__(self, executable: str = "docker") -> None:
        self.executable = executable

    def check(self) -> None:
        path = shutil.which(self.executable)
        if path is None:
            raise DockerUnavailable(f"{NO_DOCKER} ({self.executable} is not installed)")
        done = subprocess.run([path, "version", "--format", "{{.Server.Version}}"], capture_output=True, text=True)
        if done.returncode != 0 or not done.stdout.strip():
            answer = (done.stderr.strip().splitlines() or ["no answer"])[-1]
            raise DockerUnavailable(f"{NO_DOCKER} (no engine answers {self.executable}: {answer})")

    def login(self, registry: str, username: str, password: str) -> None:
        self._run("login", "--username", username, "--password-stdin", registry, input=password)

    def build(self, context: Path, image: str) -> None:
        # Lambda takes a single-platform image manifest, not the index BuildKit makes to attach its
        # provenance attestations: none are made (an environment variable the classic builder ignores).
        self._run("build", "--platform", packaging.BROWSER_IMAGE_PLATFORM, "--tag", image, str(context),
                  env={"BUILDX_NO_DEFAULT_ATTESTATIONS": "1"})

    def push(self, image: str) -> None:
        self._run("push", image)

    def _run(self, *args: str, input: str | None = None, env: dict[str, str] | None = None) -> None:
        subprocess.run([self.executable, *args], input=input, text=True, check=True, env={**os.environ, **(env or {})})


def publish_browser_image(ecr, repository_name: str, repository_uri: str, docker: Docker, log=print) -> str:
    """The browser image's URI in the artifacts stack's repository, `<repository URI>:<tag>`: built and
    pushed when the repository has no image of that tag, the hash of the image's build context."""
    context = packaging.browser_image_context()
    image = f"{repository_uri}:{context.tag}"
    try:
        ecr.describe_images(repositoryName=repository_name, imageIds=[{"imageTag": context.tag}])
        log(f"browser image {context.tag}: already pushed")
        return image
    except ecr.exceptions.ImageNotFoundException:
        pass
    docker.check()
    [authorization] = ecr.get_authorization_token()["authorizationData"]
    username, password = base64.b64decode(authorization["authorizationToken"]).decode().split(":", 1)
    docker.login(authorization["proxyEndpoint"], username, password)
    docker.build(context.path, image)
    docker.push(image)
    log(f"browser image {context.tag}: built and pushed")
    return image


def deploy(stage: str, log=print, docker: Docker | None = None) -> dict[str, str]:
    session = _session()
    cfn, s3 = session.client("cloudformation"), session.client("s3")
    names = stack_names(stage)

    artifacts = deploy_stack(cfn, names["artifacts"], load_template(INFRA / "artifacts.yaml"),
                             {"Stage": stage, "AppName": APP_NAME}, log)
    image = publish_browser_image(session.client("ecr"), artifacts["BrowserImageRepositoryName"],
                                  artifacts["BrowserImageRepositoryUri"], docker or Docker(), log)
    layer = packaging.build_layer()
    log(f"engine layer: {packaging.mib(layer.zipped_bytes)} zipped, {packaging.mib(layer.unzipped_bytes)} unzipped")
    layer_key = upload_layer(s3, artifacts["ArtifactsBucketName"], layer)

    outputs = deploy_stack(cfn, names["infra"], load_template(INFRA / "template.yaml"),
                           {"Stage": stage, "AppName": APP_NAME, "EngineLayerBucket": artifacts["ArtifactsBucketName"],
                            "EngineLayerKey": layer_key, "BrowserImageUri": image}, log)

    config = stage_config(stage, outputs)
    project = packaging.stage_project(config, packaging.BUILD / "project" / stage)
    packaging.chalice(project, "deploy", "--stage", stage)

    workflows = inline_state_machines(load_template(INFRA / "workflows.yaml"))
    deploy_stack(cfn, names["workflows"], workflows, workflow_parameters(outputs, deployed_function_arns(stage)), log)
    api = json.loads((ROOT / ".chalice" / "deployed" / f"{stage}.json").read_text())
    url = next((r["rest_api_url"] for r in api["resources"] if r.get("resource_type") == "rest_api"), None)
    log(f"deployed stage {stage}: {url}v1/health" if url else f"deployed stage {stage}")
    return outputs


def destroy(stage: str, purge_data: bool = False, log=print) -> None:
    """Delete the workflows, the app and the infrastructure, then the artifacts (the browser image's
    repository goes with its images: EmptyOnDelete); the table and the data bucket are retained
    (DeletionPolicy) unless `purge_data`."""
    session = _session()
    cfn = session.client("cloudformation")
    names = stack_names(stage)
    retained = {}
    try:
        retained = stack_outputs(cfn, names["infra"])
    except cfn.exceptions.ClientError:
        pass
    _delete_stack(cfn, names["workflows"], log)
    project = ROOT / "build" / "project" / stage
    if (ROOT / ".chalice" / "deployed" / f"{stage}.json").exists():
        if not project.exists():
            # The stack's outputs, or placeholders for those it lacks (none, or made before an output was added).
            packaging.stage_project(stage_config(stage, {**_placeholder_outputs(), **retained}), project)
        packaging.chalice(project, "delete", "--stage", stage)
    _delete_stack(cfn, names["infra"], log)
    artifacts = {}
    try:
        artifacts = stack_outputs(cfn, names["artifacts"])
    except cfn.exceptions.ClientError:
        pass
    if artifacts:
        _empty_bucket(session.resource("s3").Bucket(artifacts["ArtifactsBucketName"]))
    _delete_stack(cfn, names["artifacts"], log)
    if purge_data and retained:
        _empty_bucket(session.resource("s3").Bucket(retained["BucketName"]))
        session.client("s3").delete_bucket(Bucket=retained["BucketName"])
        session.client("dynamodb").delete_table(TableName=retained["TableName"])
        log(f"deleted table {retained['TableName']} and bucket {retained['BucketName']}")
    elif retained:
        log(f"kept table {retained['TableName']} and bucket {retained['BucketName']} (PURGE=1 deletes them)")


def _placeholder_outputs() -> dict[str, str]:
    names = ["TableName", "BucketName", "BulkQueueName", "InvestigationQueueName", "AgentRunQueueName",
             "WebhookEventQueueName", "WebhookDeliveryQueueName", "EventBusName", "ScheduleGroupName",
             "SchedulerRoleArn", "FileImportStateMachineArn",
             "ReconciliationRunStateMachineArn", "BrowserRunStateMachineArn", "SecretsPrefix"] + \
        [role_output(g) for g in {f.group for f in FUNCTIONS.values()}]
    return {name: "-" for name in names}


def _delete_stack(cfn, name: str, log) -> None:
    try:
        cfn.describe_stacks(StackName=name)
    except cfn.exceptions.ClientError:
        return
    cfn.delete_stack(StackName=name)
    cfn.get_waiter("stack_delete_complete").wait(StackName=name, WaiterConfig={"Delay": 5, "MaxAttempts": 720})
    log(f"stack {name}: deleted")


def _empty_bucket(bucket) -> None:
    bucket.object_versions.delete()
    bucket.objects.delete()


def create_key(stage: str, environment: str) -> int:
    """A first API key, with the operator's command line pointed at the stage's table."""
    outputs = stack_outputs(_session().client("cloudformation"), stack_names(stage)["infra"])
    python = ROOT / ".venv" / "bin" / "python"
    env = {**os.environ, "RECON_TABLE_NAME": outputs["TableName"], "RECON_STAGE": stage,
           "RECON_DATA_DIR": str(ROOT / "build" / "no-local-stack")}
    return subprocess.run([str(python if python.exists() else sys.executable), "-m", "chalicelib.cli", "keys", "create",
                           "--environment", environment], cwd=ROOT, env=env).returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m infra.deploy")
    commands = parser.add_subparsers(dest="command", required=True)
    for name in ("deploy", "destroy", "key"):
        command = commands.add_parser(name)
        command.add_argument("--stage", required=True)
        if name == "destroy":
            command.add_argument("--purge-data", action="store_true")
        if name == "key":
            command.add_argument("--environment", required=True)
    args = parser.parse_args(argv)
    if args.command == "deploy":
        try:
            deploy(args.stage)
        except DockerUnavailable as error:
            print(f"make deploy: {error}", file=sys.stderr)
            return 1
    elif args.command == "destroy":
        destroy(args.stage, args.purge_data)
    else:
        return create_key(args.stage, args.environment)
    return 0


if __name__ == "__main__":
    sys.exit(main())
