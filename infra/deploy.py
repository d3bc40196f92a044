"""`make deploy`, `make destroy`, `make deploy-unlock` and `make key`: the whole deployment of a stage, in order.

1. the artifacts stack (infra/artifacts.yaml: a bucket for the engine layer's zip, a repository
   for the browser worker's image); the browser image built with Docker and pushed there unless
   that repository has it already (its tag is a hash of what it is built from); the layer built
   and uploaded;
2. the infrastructure stack (infra/template.yaml): table, data bucket, queues, the engine layer,
   one role per group of functions, the browser worker (a container-image function, that image),
   and operations: each function's log group (a group a function made before the stack declared it
   is imported first: `adopt_log_groups`), alarms, their topic, the dashboard;
3. the app, with `chalice deploy`, its stage configuration generated from that stack's outputs
   (infra/functions.py says which role, layer and size each function gets);
4. the workflows stack (infra/workflows.yaml), given the ARNs of the functions Chalice deployed
   and of those the infrastructure stack defines;
5. on a stage's first deploy only, the infrastructure stack again: the data bucket's CORS rule lets the
   web app's pages upload files from their own origin, the API's, which exists only once Chalice has made
   it (`web_app_origin`). Later deploys read it from Chalice's record of the app before step 2.

Chalice's record of what it deployed is kept in the account (the artifacts bucket), and one deploy or
destroy at a time works on a stage, under a lock there (infra/stage_state.py): any checkout or CI runner
may deploy, upgrade or destroy a stage. `chalice deploy` itself runs through infra/chalice_run.py, which
records what a failed run made. A plain `chalice deploy` in the repository stops in Chalice's own
validation, before any AWS call (.chalice/config.json has no role and manages none): it would make
the functions without their roles, layers and configuration.

Before any of it, the stage's parameters (`StageOptions`: the mail sender, the model, the alarm
address, the log retention, sign-in's web app URLs, hosted domain and federation, the web app's
origin) are checked against the account: the sender's SES identity verified, the model enabled, a
federation's OIDC secret present, no user pool of the stage's name kept outside its stack by a
destroy (`check_parameters`); a deploy that would not work stops there, creating nothing.

Runs under `.venv-deploy` (Python 3.12, the Lambda runtime's), with the caller's AWS credentials,
and needs a running Docker engine when the browser image is to be built.
"""
from __future__ import annotations

import argparse
import base64
import contextlib
import copy
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, fields
from email.utils import parseaddr
from pathlib import Path
from urllib.parse import urlsplit

import yaml

from chalicelib.local.provision import Resolver, function_of_parameter, load_template
from infra import packaging, stage_state
from infra.functions import FUNCTIONS, role_output

ROOT = packaging.ROOT
INFRA = ROOT / "infra"
BASE_CONFIG = ROOT / ".chalice" / "config.json"
# Where Chalice reads and writes its record of a stage's app (the staged project links it); `make deploy`
# keeps the record in the account (infra/stage_state.py) and puts it here for Chalice.
DEPLOYED_DIR = packaging.DEPLOYED_DIR
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
            # People's tokens are verified against this pool's keys, for this client (docs/sign-in.md).
            "RECON_USER_POOL_ID": outputs["UserPoolId"],
            "RECON_USER_POOL_CLIENT_ID": outputs["UserPoolClientId"],
            # The deploy parameters MAIL_FROM, MODEL_ID and DYNAMODB_CLIENT, checked by check_parameters,
            # kept by the stack.
            "RECON_MAIL_SENDER": outputs["MailFrom"],
            "RECON_DEFAULT_MODEL": outputs["ModelId"],
            # The account pays for whichever model an agent names: a tenant's agents name only the stage's.
            "RECON_AGENT_MODELS": outputs["ModelId"],
            # A stack deployed before the parameter has no such output: its functions ran with `auto`.
            "RECON_DYNAMODB_CLIENT": outputs.get("DynamoDbClient", "auto"),
            # This release reads a run's match members carried by the match item, but an older function
            # still running during the deploy (or after a rollback) reads member items only: deployed
            # stages keep writing those until the next release (docs/upgrades.md).
            "RECON_CARRY_MATCH_MEMBERS": "false",
            # This release notes every change of a record as a block of ids beside its stream, and a run
            # reads all but those blocks from the analytics mirror; an older function still running
            # changes records without noting blocks: deployed stages mark no stream as noting them
            # until the next release (docs/upgrades.md), which sets it "true" in so many words:
            # `streams note-changes` runs only once every function of the stage says so.
            "RECON_NOTE_CHANGED_BLOCKS": "false",
            # A transaction's writes cost AWS twice a write's units: a deployed run claims record by
            # record and its exception refresh holds record by record, keeping write units a matched
            # record where they were (settings.py).
            "RECON_CLAIMS_IN_TRANSACTIONS": "false",
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


def deployed_function_arns(stage: str, deployed_dir: Path = DEPLOYED_DIR) -> dict[str, str]:
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


CAPABILITIES = ["CAPABILITY_IAM", "CAPABILITY_NAMED_IAM", "CAPABILITY_AUTO_EXPAND"]


def deploy_stack(cfn, name: str, template: dict, parameters: dict[str, str], log=print) -> dict[str, str]:
    """Create or update a stack and wait; its outputs."""
    body = json.dumps(template)
    arguments = {"StackName": name, "TemplateBody": body,
                 "Parameters": [{"ParameterKey": k, "ParameterValue": v} for k, v in parameters.items()],
                 "Capabilities": CAPABILITIES}
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


# --- the stage's parameters, checked before anything is created ------------------------------

@dataclass(frozen=True)
class StageOptions:
    """What `make deploy` takes besides the stage (MAIL_FROM, MODEL_ID, ALARM_EMAIL,
    LOG_RETENTION_DAYS, DYNAMODB_CLIENT, sign-in's, WEB_APP_ORIGIN). None: the value the stage was last deployed with
    (the infrastructure stack keeps it as its parameter), or for a new stage the template's default."""
    mail_from: str | None = None
    model_id: str | None = None
    alarm_email: str | None = None
    log_retention_days: int | None = None
    # How the functions send the table's requests (RECON_DYNAMODB_CLIENT: auto, wire, botocore).
    dynamodb_client: str | None = None
    # Sign-in (docs/sign-in.md): the web app's callback and logout URLs, the hosted sign-in domain's
    # prefix, and federation to a company's SAML or OIDC provider (the OIDC client's secret by the
    # name of its Secrets Manager secret, never its value).
    sign_in_callback_urls: str | None = None
    sign_in_logout_urls: str | None = None
    sign_in_domain: str | None = None
    saml_metadata_url: str | None = None
    oidc_issuer: str | None = None
    oidc_client_id: str | None = None
    oidc_client_secret: str | None = None
    # The web app's origins (a custom domain's) in place of the stage's API's: `web_app_origin`.
    web_app_origin: str | None = None


# Each option: the infrastructure stack's parameter, and the Make variable that sets it (messages name it).
OPTION_PARAMETERS = {"mail_from": ("MailFrom", "MAIL_FROM"), "model_id": ("ModelId", "MODEL_ID"),
                     "alarm_email": ("AlarmEmail", "ALARM_EMAIL"),
                     "log_retention_days": ("LogRetentionDays", "LOG_RETENTION_DAYS"),
                     "dynamodb_client": ("DynamoDbClient", "DYNAMODB_CLIENT"),
                     "sign_in_callback_urls": ("SignInCallbackUrls", "SIGN_IN_CALLBACK_URLS"),
                     "sign_in_logout_urls": ("SignInLogoutUrls", "SIGN_IN_LOGOUT_URLS"),
                     "sign_in_domain": ("SignInDomainPrefix", "SIGN_IN_DOMAIN"),
                     "saml_metadata_url": ("SamlMetadataUrl", "SAML_METADATA_URL"),
                     "oidc_issuer": ("OidcIssuer", "OIDC_ISSUER"), "oidc_client_id": ("OidcClientId", "OIDC_CLIENT_ID"),
                     "oidc_client_secret": ("OidcClientSecretName", "OIDC_CLIENT_SECRET"),
                     "web_app_origin": ("WebAppOrigin", "WEB_APP_ORIGIN")}


class DeployRefused(RuntimeError):
    """A parameter of the stage that would not work on AWS, found before anything was created."""


def stage_parameters(cfn, stage: str, options: StageOptions) -> dict[str, str]:
    """The infrastructure stack's parameters that `StageOptions` sets: each as given, else as the
    stage's last deploy left it, else the template's default."""
    previous: dict[str, str] = {}
    try:
        [stack] = cfn.describe_stacks(StackName=stack_names(stage)["infra"])["Stacks"]
        previous = {p["ParameterKey"]: p["ParameterValue"] for p in stack.get("Parameters", [])}
    except cfn.exceptions.ClientError:
        pass
    declared = load_template(INFRA / "template.yaml")["Parameters"]
    values = {}
    for field in fields(StageOptions):
        parameter, _ = OPTION_PARAMETERS[field.name]
        given = getattr(options, field.name)
        if given is not None:
            values[parameter] = str(given)
        elif parameter in previous:
            values[parameter] = previous[parameter]
        else:
            values[parameter] = str(declared[parameter].get("Default", ""))
    return values


def check_parameters(client, region: str, parameters: dict[str, str], log=print, *, stage: str) -> None:
    """Refuse (DeployRefused) a stage parameter the template or the account would not take: each
    against the template's pattern or allowed values, the sender against SES (a verified identity)
    and the model against Bedrock (it exists here and this account may call it); and a stage whose
    user pool a destroy kept outside its stack. Reads only; `client(service)` makes the clients (a
    boto3 session's `client`)."""
    check_against_template(parameters)
    check_sign_in(client, parameters)
    check_user_pool(client, stage)
    check_mail_sender(client("ses"), parameters["MailFrom"], region)
    check_model(client("bedrock"), parameters["ModelId"], region)
    note_ses_sandbox(client("sesv2"), region, log)


def check_against_template(parameters: dict[str, str]) -> None:
    declared = load_template(INFRA / "template.yaml")["Parameters"]
    variables = dict(OPTION_PARAMETERS.values())
    for parameter, value in parameters.items():
        spec, variable = declared[parameter], variables.get(parameter, parameter)
        allowed = [str(v) for v in spec.get("AllowedValues", [])]
        if allowed and value not in allowed:
            raise DeployRefused(f"{variable}={value} is not one of {', '.join(allowed)}")
        if "AllowedPattern" in spec and not re.fullmatch(spec["AllowedPattern"], value):
            raise DeployRefused(f"{variable}={value!r} is not valid: {spec.get('Description', '').strip()}")


def check_sign_in(client, parameters: dict[str, str]) -> None:
    """Federation signs people in at the hosted domain and back to the web app: a provider needs both.
    An OIDC provider needs its client id and the secret holding its client secret, which must exist
    (CloudFormation reads it when it makes the provider)."""
    federated = [variable for parameter, variable in (("SamlMetadataUrl", "SAML_METADATA_URL"),
                                                      ("OidcIssuer", "OIDC_ISSUER")) if parameters.get(parameter)]
    if federated and not (parameters.get("SignInDomainPrefix") and parameters.get("SignInCallbackUrls")):
        raise DeployRefused(f"{' and '.join(federated)} need SIGN_IN_DOMAIN and SIGN_IN_CALLBACK_URLS: people "
                            "sign in at their company's provider through the hosted domain, back to the web app")
    if not parameters.get("OidcIssuer"):
        return
    if not parameters.get("OidcClientId") or not parameters.get("OidcClientSecretName"):
        raise DeployRefused("OIDC_ISSUER needs OIDC_CLIENT_ID and OIDC_CLIENT_SECRET (the name of the Secrets "
                            "Manager secret holding the client secret)")
    secretsmanager = client("secretsmanager")
    try:
        secretsmanager.describe_secret(SecretId=parameters["OidcClientSecretName"])
    except secretsmanager.exceptions.ResourceNotFoundException:
        raise DeployRefused(f"OIDC_CLIENT_SECRET={parameters['OidcClientSecretName']}: no such secret in Secrets "
                            "Manager here; create it with the OIDC client's secret as its value") from None


def check_user_pool(client, stage: str) -> None:
    """`make destroy` without PURGE=1 keeps the stage's user pool (DeletionPolicy: Retain), with its
    people. Pool names are not unique: a stack made anew would make a second pool of the same name
    beside it, and sign in none of the people the kept one holds (every user's `sub` would change).
    So a pool named like the stage's that its infrastructure stack does not hold is refused."""
    name = f"{APP_NAME}-{stage}"
    cognito = client("cognito-idp")
    pools = [pool["Id"] for page in cognito.get_paginator("list_user_pools").paginate(MaxResults=60)
             for pool in page["UserPools"] if pool["Name"] == name]
    stack = stack_names(stage)["infra"]
    held = (_existing_outputs(client("cloudformation"), stack) or {}).get("UserPoolId")
    outside = [pool for pool in pools if pool != held]
    if outside:
        raise DeployRefused(
            f"user pool {name} ({', '.join(outside)}) exists outside the stack {stack}: a `make destroy` without "
            f"PURGE=1 kept it, with its people, and a deploy would make a second pool beside it. Import it into "
            f"the stack first (docs/upgrades.md, 'Deploying a destroyed stage again'), or delete it when its "
            f"people may go: aws cognito-idp delete-user-pool --user-pool-id {outside[0]}")


def check_mail_sender(ses, mail_from: str, region: str) -> None:
    """SES sends only from a verified identity: the sender's address, or its domain."""
    if not mail_from:
        raise DeployRefused(
            "MAIL_FROM is not set: agents send their mail from it, and SES sends only from an identity verified "
            f"in this account and region ({region}). Verify an address (aws ses verify-email-identity "
            "--email-address agents@example.com, then open the link SES mails to it) or its domain, then "
            "make deploy STAGE=... MAIL_FROM=agents@example.com (later deploys keep it)")
    _, address = parseaddr(mail_from)
    domain = address.rpartition("@")[2]
    answer = ses.get_identity_verification_attributes(Identities=[address, domain])["VerificationAttributes"]
    statuses = {identity: attributes["VerificationStatus"] for identity, attributes in answer.items()}
    if "Success" in statuses.values():
        return
    known = "; ".join(f"{identity} is {status}" for identity, status in statuses.items()) or \
        "SES knows neither as an identity"
    raise DeployRefused(
        f"MAIL_FROM={mail_from}: SES sends only from a verified identity, and neither {address} nor {domain} is "
        f"verified in {region} ({known}). Verify the address (aws ses verify-email-identity --email-address "
        f"{address}, then open the link SES mails to it) or its domain (aws sesv2 create-email-identity "
        f"--email-identity {domain}, then publish the DKIM records it answers), or pass another MAIL_FROM")


def check_model(bedrock, model_id: str, region: str) -> None:
    """The model is a foundation model Bedrock runs on demand here, or an inference profile, and this
    account may call it (for a profile, the model it routes to in this region)."""
    error = None
    try:
        model = bedrock.get_foundation_model(modelIdentifier=model_id)["modelDetails"]
    except bedrock.exceptions.ClientError as refused:
        if _code(refused) not in ("ValidationException", "ResourceNotFoundException"):
            raise DeployRefused(f"MODEL_ID={model_id}: Bedrock did not describe it in {region} ({_said(refused)}): "
                                "the deploying identity needs bedrock:GetFoundationModel") from None
        model, error = None, refused
    if model is not None:
        if "ON_DEMAND" not in model.get("inferenceTypesSupported", []):
            raise DeployRefused(
                f"MODEL_ID={model_id} is not served on demand in {region}, only through an inference profile: pass "
                f"the profile's id (aws bedrock list-inference-profiles --query "
                f"\"inferenceProfileSummaries[].inferenceProfileId\"; for example us.{model_id})")
        _check_access(bedrock, model_id, model_id, region)
        return
    try:
        profile = bedrock.get_inference_profile(inferenceProfileIdentifier=model_id)
    except bedrock.exceptions.ClientError as refused:
        raise DeployRefused(
            f"MODEL_ID={model_id}: Bedrock has no such model or inference profile in {region} "
            f"({_said(error) if error else ''}; {_said(refused)}). The model ids: aws bedrock list-foundation-models "
            "--by-output-modality TEXT --query \"modelSummaries[].modelId\"; the inference profiles: aws bedrock "
            "list-inference-profiles --query \"inferenceProfileSummaries[].inferenceProfileId\"") from None
    if profile.get("status") != "ACTIVE":
        raise DeployRefused(f"MODEL_ID={model_id}: the inference profile is {profile.get('status')}, not ACTIVE")
    arns = [m["modelArn"] for m in profile.get("models", [])]
    here = [arn for arn in arns if f":{region}::" in arn] or arns
    if not here:
        raise DeployRefused(f"MODEL_ID={model_id}: the inference profile names no model")
    _check_access(bedrock, here[0].rsplit("/", 1)[-1], model_id, region)


def _check_access(bedrock, foundation_model: str, model_id: str, region: str) -> None:
    try:
        availability = bedrock.get_foundation_model_availability(modelId=foundation_model)
    except bedrock.exceptions.ClientError as refused:
        raise DeployRefused(f"MODEL_ID={model_id}: could not read whether {foundation_model} is enabled in {region} "
                            f"({_said(refused)}): the deploying identity needs "
                            "bedrock:GetFoundationModelAvailability") from None
    problems = []
    if availability.get("regionAvailability") != "AVAILABLE":
        problems.append(f"it is not offered in {region}")
    if availability.get("authorizationStatus") != "AUTHORIZED":
        problems.append("this account is not authorized to use it")
    if availability.get("entitlementAvailability") != "AVAILABLE":
        agreement = availability.get("agreementAvailability", {})
        problems.append(f"this account has no access to it (its agreement: {agreement.get('status', 'none')}"
                        + (f", {agreement['errorMessage']}" if agreement.get("errorMessage") else "") + ")")
    if problems:
        shown = model_id if foundation_model == model_id else f"{model_id} ({foundation_model})"
        raise DeployRefused(
            f"MODEL_ID={shown} is not enabled in {region}: {'; '.join(problems)}. Enable it in the Bedrock "
            "console (Model access, or the model's page in the Model catalog, whose offer an identity allowed "
            "aws-marketplace:Subscribe accepts), or pass another MODEL_ID")


def note_ses_sandbox(sesv2, region: str, log=print) -> None:
    """Say so when SES is in its sandbox here: mail then reaches verified addresses only."""
    try:
        production = sesv2.get_account().get("ProductionAccessEnabled")
    except sesv2.exceptions.ClientError:
        return  # advice only: the deploy does not depend on it
    if production is False:
        log(f"note: SES is in its sandbox in {region}: agents' mail reaches only verified addresses (at most 200 "
            "messages a day) until AWS grants production access (README, 'Mail and models')")


def _code(error) -> str:
    return str(error.response.get("Error", {}).get("Code", ""))


def _said(error) -> str:
    details = error.response.get("Error", {})
    return f"{details.get('Code', 'Error')}: {details.get('Message', '')}".strip()


# --- the web app's origin: the pages that may upload to the data bucket -----------------------------

# An API Gateway API's own origin, as Chalice records its URL (`https://<api id>.execute-api.<region>.<suffix>/api/`).
EXECUTE_API_ORIGIN = re.compile(r"https://[a-z0-9]+\.execute-api\.[a-z0-9-]+\.amazonaws\.com(\.cn)?")


def rest_api_url(stage: str, deployed_dir: Path = DEPLOYED_DIR) -> str | None:
    """The stage's API URL from Chalice's record of its app; None without a record or an API in it."""
    record = deployed_dir / f"{stage}.json"
    if not record.exists():
        return None
    resources = json.loads(record.read_text()).get("resources", [])
    return next((r["rest_api_url"] for r in resources if r.get("resource_type") == "rest_api"), None)


def api_origin(stage: str, deployed_dir: Path = DEPLOYED_DIR) -> str | None:
    """The origin (scheme and host) of the stage's API, where the web app is served: None before Chalice
    has made the API."""
    url = rest_api_url(stage, deployed_dir)
    if not url:
        return None
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def web_app_origin(configured: str, api: str | None) -> str:
    """The stack's WebAppOrigin: the operator's origins (WEB_APP_ORIGIN, given now or kept from the last deploy)
    but any API Gateway API's, plus the stage's own API, which serves the page; empty before Chalice made it."""
    custom = [origin for origin in configured.split(",") if origin and not EXECUTE_API_ORIGIN.fullmatch(origin)]
    return ",".join(custom + ([api] if api else []))


# --- log groups made before the stack declared them -------------------------------------------

def adopt_log_groups(cfn, logs, stack: str, template: dict, parameters: dict[str, str], region: str,
                     log=print) -> list[str]:
    """Import into `stack` each log group its template declares that exists already outside it, and
    return their names. Lambda makes a function's group when the function first logs: a stage deployed
    before its template declared the groups has them, and CloudFormation refuses to create a group
    that exists (the update would roll back). An IMPORT change set takes them as they are, their events
    kept; the update that follows gives them the template's retention. Nothing else changes meanwhile:
    the import's template is the stack's own plus those groups, its parameters their previous values."""
    resolver = Resolver(template, parameters, region)
    declared = {logical_id: resolver.resolve(resource["Properties"]["LogGroupName"])
                for logical_id, resource in template["Resources"].items()
                if resource["Type"] == "AWS::Logs::LogGroup" and resolver.condition(resource.get("Condition"))}
    try:
        cfn.describe_stacks(StackName=stack)
        exists = True
    except cfn.exceptions.ClientError:
        exists = False
    in_stack = set()
    if exists:
        for page in cfn.get_paginator("list_stack_resources").paginate(StackName=stack):
            in_stack |= {r["LogicalResourceId"] for r in page["StackResourceSummaries"]}
    adopt = {logical_id: name for logical_id, name in declared.items()
             if logical_id not in in_stack and _log_group_exists(logs, name)}
    if not adopt:
        return []
    if exists:
        body = cfn.get_template(StackName=stack, TemplateStage="Original")["TemplateBody"]
        current = json.loads(json.dumps(body)) if isinstance(body, dict) else _parse_template(body)
        previous = [{"ParameterKey": name, "UsePreviousValue": True} for name in current.get("Parameters", {})]
    else:
        current, previous = {"AWSTemplateFormatVersion": "2010-09-09", "Resources": {}}, []
    for logical_id, name in adopt.items():
        current["Resources"][logical_id] = {"Type": "AWS::Logs::LogGroup", "DeletionPolicy": "Delete",
                                            "UpdateReplacePolicy": "Delete", "Properties": {"LogGroupName": name}}
    change_set = f"adopt-log-groups-{int(time.time())}"
    cfn.create_change_set(
        StackName=stack, ChangeSetName=change_set, ChangeSetType="IMPORT", TemplateBody=json.dumps(current),
        Parameters=previous, Capabilities=CAPABILITIES,
        ResourcesToImport=[{"ResourceType": "AWS::Logs::LogGroup", "LogicalResourceId": logical_id,
                            "ResourceIdentifier": {"LogGroupName": name}} for logical_id, name in adopt.items()])
    cfn.get_waiter("change_set_create_complete").wait(StackName=stack, ChangeSetName=change_set,
                                                      WaiterConfig={"Delay": 5, "MaxAttempts": 120})
    cfn.execute_change_set(StackName=stack, ChangeSetName=change_set)
    cfn.get_waiter("stack_import_complete").wait(StackName=stack, WaiterConfig={"Delay": 5, "MaxAttempts": 720})
    log(f"stack {stack}: imported {len(adopt)} log groups made before it declared them ({', '.join(adopt.values())})")
    return sorted(adopt.values())


def _log_group_exists(logs, name: str) -> bool:
    for page in logs.get_paginator("describe_log_groups").paginate(logGroupNamePrefix=name):
        if any(group["logGroupName"] == name for group in page["logGroups"]):
            return True
    return False


def _parse_template(body: str) -> dict:
    try:
        return json.loads(body)
    except ValueError:
        return yaml.safe_load(body)


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


class ChaliceFailed(RuntimeError):
    """`chalice deploy` or `chalice delete` failed (it said why); what it made is recorded in the account."""


def _identity(session) -> str:
    """Who deploys, for the stage's lock: the caller's ARN (a user, or a role's session: a CI runner's)."""
    try:
        return session.client("sts").get_caller_identity()["Arn"]
    except Exception:  # the lock names the user and host anyway
        return "an unknown identity"


def _existing_outputs(cfn, name: str) -> dict[str, str] | None:
    try:
        return stack_outputs(cfn, name)
    except cfn.exceptions.ClientError:
        return None


def _stack_status(cfn, name: str) -> str:
    return cfn.describe_stacks(StackName=name)["Stacks"][0]["StackStatus"]


def app_functions(lam, stage: str) -> list[str]:
    """The functions of the stage's app (Chalice's: `recon-<stage>` and `recon-<stage>-<name>`) that exist."""
    return sorted(app_function_environments(lam, stage), key=lambda name: (name != f"{APP_NAME}-{stage}", name))


def app_function_environments(lam, stage: str) -> dict[str, dict[str, str]]:
    """The environment variables of each function of the stage's app that exists, by name."""
    names = {f"{APP_NAME}-{stage}" if name == "api_handler" else f"{APP_NAME}-{stage}-{name}" for name in FUNCTIONS}
    return {f["FunctionName"]: f.get("Environment", {}).get("Variables", {})
            for page in lam.get_paginator("list_functions").paginate()
            for f in page["Functions"] if f["FunctionName"] in names}


def fetch_app_record(session, bucket: str, stage: str, log=print, deployed_dir: Path = DEPLOYED_DIR) -> str:
    """Chalice's record of the stage's app from the account (stage_state.fetch) into `deployed_dir`; refuses
    (DeployRefused) to go on without one when the app exists: Chalice would make a second API, or delete nothing."""
    source = stage_state.fetch(session.client("s3"), bucket, stage, deployed_dir, log)
    if source == "none":
        functions = app_functions(session.client("lambda"), stage)
        if functions:
            raise DeployRefused(stage_state.lost_record_message(stage, bucket, functions))
    return source


def run_chalice(session, bucket: str, stage: str, project: Path, command: str,
                deployed_dir: Path = DEPLOYED_DIR) -> None:
    """`chalice deploy` or `chalice delete`; its record (in `deployed_dir`) goes back to the account however it
    ends."""
    try:
        status = packaging.chalice_run(project, command, stage)
    finally:
        stage_state.store(session.client("s3"), bucket, stage, deployed_dir)
    if status != 0:
        again = "deploy" if command == "deploy" else "destroy"
        raise ChaliceFailed(f"chalice {command} failed (above); what it made is recorded in "
                            f"s3://{bucket}/{stage_state.state_key(stage)}: run make {again} STAGE={stage} again "
                            "once the cause is fixed")


def deploy(stage: str, log=print, docker: Docker | None = None, options: StageOptions | None = None, *,
           session=None, check: Callable[..., None] = check_parameters,
           put_stack: Callable[..., dict[str, str]] = deploy_stack,
           deployed_dir: Path = DEPLOYED_DIR) -> dict[str, str]:
    """The whole deployment of `stage` (the module's docstring), with the caller's AWS credentials unless given
    a boto3 `session`: `check` refuses the stage's parameters (check_parameters), `put_stack` creates or
    updates each stack (deploy_stack), Chalice's record of the app is kept in `deployed_dir`. The session is a
    seam for tests: `chalice deploy` runs in a subprocess with the environment's credentials, so a session of
    another account or region would put the stacks and the app apart."""
    session = session or _session()
    cfn, s3 = session.client("cloudformation"), session.client("s3")
    names = stack_names(stage)
    parameters = stage_parameters(cfn, stage, options or StageOptions())
    check(session.client, session.region_name, parameters, log, stage=stage)

    # The lock and the app's record live in the artifacts bucket: a new stage's is made first, unlocked
    # (two first deploys at once: CloudFormation creates the stack for one, and refuses the other).
    artifacts_template = load_template(INFRA / "artifacts.yaml")
    artifacts_parameters = {"Stage": stage, "AppName": APP_NAME}
    artifacts = _existing_outputs(cfn, names["artifacts"])
    if not artifacts or "ArtifactsBucketName" not in artifacts:
        being_created = stage_state.StageLocked(
            f"stage {stage} is being created by another deploy (its stack {names['artifacts']} is under way): run "
            "make deploy again once that one has ended")
        if artifacts is not None and _stack_status(cfn, names["artifacts"]).endswith("_IN_PROGRESS"):
            raise being_created
        try:
            artifacts = put_stack(cfn, names["artifacts"], artifacts_template, artifacts_parameters, log)
        except cfn.exceptions.AlreadyExistsException:
            raise being_created from None
    bucket = artifacts["ArtifactsBucketName"]
    held = stage_state.holder(stage, "make deploy", _identity(session))
    with stage_state.locked(s3, bucket, held, log):
        fetch_app_record(session, bucket, stage, log, deployed_dir)
        artifacts = put_stack(cfn, names["artifacts"], artifacts_template, artifacts_parameters, log)
        image = publish_browser_image(session.client("ecr"), artifacts["BrowserImageRepositoryName"],
                                      artifacts["BrowserImageRepositoryUri"], docker or Docker(), log)
        layer = packaging.build_layer()
        log(f"engine layer: {packaging.mib(layer.zipped_bytes)} zipped, {packaging.mib(layer.unzipped_bytes)} unzipped")
        layer_key = upload_layer(s3, bucket, layer)

        infra = load_template(INFRA / "template.yaml")
        infra_parameters = {"Stage": stage, "AppName": APP_NAME, "EngineLayerBucket": bucket,
                            "EngineLayerKey": layer_key, "BrowserImageUri": image, **parameters,
                            "WebAppOrigin": web_app_origin(parameters["WebAppOrigin"],
                                                           api_origin(stage, deployed_dir))}
        adopt_log_groups(cfn, session.client("logs"), names["infra"], infra, infra_parameters, session.region_name,
                         log)
        outputs = put_stack(cfn, names["infra"], infra, infra_parameters, log)

        config = stage_config(stage, outputs)
        project = packaging.stage_project(config, packaging.BUILD / "project" / stage, deployed_dir)
        run_chalice(session, bucket, stage, project, "deploy", deployed_dir)

        workflows = inline_state_machines(load_template(INFRA / "workflows.yaml"))
        arns = deployed_function_arns(stage, deployed_dir)
        put_stack(cfn, names["workflows"], workflows, workflow_parameters(outputs, arns), log)

        # A new stage's API exists now: the data bucket's CORS rule is given its origin (later deploys
        # read it from the app's record before the first update, so they need no second one).
        origin = web_app_origin(parameters["WebAppOrigin"], api_origin(stage, deployed_dir))
        if origin != infra_parameters["WebAppOrigin"]:
            log(f"stack {names['infra']}: the web app's origin is {origin}: its pages may upload to the data bucket")
            outputs = put_stack(cfn, names["infra"], infra, {**infra_parameters, "WebAppOrigin": origin}, log)
    url = rest_api_url(stage, deployed_dir)
    log(f"deployed stage {stage}: {url}v1/health" if url else f"deployed stage {stage}")
    return outputs


def destroy(stage: str, purge_data: bool = False, log=print, *, session=None,
            deployed_dir: Path = DEPLOYED_DIR) -> None:
    """Delete the workflows, the app and the infrastructure, then the artifacts (the browser image's
    repository goes with its images: EmptyOnDelete; the bucket with the app's record and the lock); the
    table, the data bucket and the user pool are retained (DeletionPolicy) unless `purge_data`. Under the stage's lock,
    with the app's record from the account (kept in `deployed_dir`): from any checkout."""
    session = session or _session()
    cfn = session.client("cloudformation")
    names = stack_names(stage)
    retained = _existing_outputs(cfn, names["infra"]) or {}
    artifacts = _existing_outputs(cfn, names["artifacts"]) or {}
    bucket = artifacts.get("ArtifactsBucketName")
    lock = (stage_state.locked(session.client("s3"), bucket, stage_state.holder(stage, "make destroy",
                                                                                 _identity(session)), log)
            if bucket else contextlib.nullcontext())
    with lock:
        if bucket:
            fetch_app_record(session, bucket, stage, log, deployed_dir)
        elif app_functions(session.client("lambda"), stage) and not (deployed_dir / f"{stage}.json").exists():
            raise DeployRefused(f"stage {stage} has its app deployed but no artifacts stack ({names['artifacts']}), "
                                "where its record would be, and this checkout has none "
                                f"(.chalice/deployed/{stage}.json)")
        _delete_stack(cfn, names["workflows"], log)
        if (deployed_dir / f"{stage}.json").exists():
            project = packaging.BUILD / "project" / stage
            if not project.exists():
                # The stack's outputs, or placeholders for those it lacks (none, or made before an output was added).
                packaging.stage_project(stage_config(stage, {**_placeholder_outputs(), **retained}), project,
                                        deployed_dir)
            if bucket:
                run_chalice(session, bucket, stage, project, "delete", deployed_dir)
            elif packaging.chalice_run(project, "delete", stage) != 0:
                raise ChaliceFailed(f"chalice delete failed (above): run make destroy STAGE={stage} again")
        _delete_stack(cfn, names["infra"], log)
        if bucket:
            _empty_bucket(session.resource("s3").Bucket(bucket))
        _delete_stack(cfn, names["artifacts"], log)
    if purge_data and retained:
        _empty_bucket(session.resource("s3").Bucket(retained["BucketName"]))
        session.client("s3").delete_bucket(Bucket=retained["BucketName"])
        session.client("dynamodb").delete_table(TableName=retained["TableName"])
        log(f"deleted table {retained['TableName']} and bucket {retained['BucketName']}")
        if retained.get("UserPoolId"):  # retained with the table, whose users it signs in
            session.client("cognito-idp").delete_user_pool(UserPoolId=retained["UserPoolId"])
            log(f"deleted user pool {retained['UserPoolId']}")
    elif retained:
        pool = f" and user pool {retained['UserPoolId']}" if retained.get("UserPoolId") else ""
        log(f"kept table {retained['TableName']} and bucket {retained['BucketName']}{pool} (PURGE=1 deletes them)")


def unlock(stage: str, log=print, *, session=None) -> int:
    """`make deploy-unlock`: break the stage's lock (a deploy or destroy that was killed left it)."""
    session = session or _session()
    artifacts = _existing_outputs(session.client("cloudformation"), stack_names(stage)["artifacts"]) or {}
    if "ArtifactsBucketName" not in artifacts:
        log(f"stage {stage} has no artifacts stack: nothing is locked")
        return 0
    held = stage_state.break_lock(session.client("s3"), artifacts["ArtifactsBucketName"])
    log(f"stage {stage}: removed the lock of {stage_state.describe(held)}" if held else f"stage {stage} was not locked")
    return 0


def _placeholder_outputs() -> dict[str, str]:
    names = ["TableName", "BucketName", "BulkQueueName", "InvestigationQueueName", "AgentRunQueueName",
             "WebhookEventQueueName", "WebhookDeliveryQueueName", "EventBusName", "ScheduleGroupName",
             "SchedulerRoleArn", "FileImportStateMachineArn", "ReconciliationRunStateMachineArn",
             "BrowserRunStateMachineArn", "SecretsPrefix", "MailFrom", "ModelId", "UserPoolId",
             "UserPoolClientId"] + \
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


def create_key(stage: str, environment: str, *, session=None) -> int:
    """A first API key, with the operator's command line pointed at the stage's table."""
    outputs = stack_outputs((session or _session()).client("cloudformation"), stack_names(stage)["infra"])
    python = ROOT / ".venv" / "bin" / "python"
    env = {**os.environ, "RECON_TABLE_NAME": outputs["TableName"], "RECON_STAGE": stage,
           "RECON_DATA_DIR": str(ROOT / "build" / "no-local-stack")}
    return subprocess.run([str(python if python.exists() else sys.executable), "-m", "chalicelib.cli", "keys", "create",
                           "--environment", environment], cwd=ROOT, env=env).returncode


def main(argv: list[str] | None = None, *, session=None) -> int:
    """`python -m infra.deploy`; each command with the caller's AWS credentials unless given a boto3 `session`."""
    parser = argparse.ArgumentParser(prog="python -m infra.deploy")
    commands = parser.add_subparsers(dest="command", required=True)
    for name in ("deploy", "destroy", "unlock", "key"):
        command = commands.add_parser(name)
        command.add_argument("--stage", required=True)
        if name == "destroy":
            command.add_argument("--purge-data", action="store_true")
        if name == "key":
            command.add_argument("--environment", required=True)
        if name == "deploy":  # StageOptions; each omitted keeps the stage's last value
            command.add_argument("--mail-from")
            command.add_argument("--model-id")
            command.add_argument("--alarm-email")
            command.add_argument("--log-retention-days", type=int)
            command.add_argument("--dynamodb-client")
            for option in ("sign-in-callback-urls", "sign-in-logout-urls", "sign-in-domain", "saml-metadata-url",
                           "oidc-issuer", "oidc-client-id", "oidc-client-secret", "web-app-origin"):
                command.add_argument(f"--{option}")
    args = parser.parse_args(argv)
    try:
        if args.command == "deploy":
            options = StageOptions(**{field.name: getattr(args, field.name) for field in fields(StageOptions)})
            deploy(args.stage, options=options, session=session)
        elif args.command == "destroy":
            destroy(args.stage, args.purge_data, session=session)
        elif args.command == "unlock":
            return unlock(args.stage, session=session)
        else:
            return create_key(args.stage, args.environment, session=session)
    except (DockerUnavailable, DeployRefused, stage_state.StageLocked, ChaliceFailed) as error:
        print(f"make {args.command}: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
