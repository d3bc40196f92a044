"""Reading what a role of the infrastructure template may do (its inline and managed policies), and whether
it allows the AWS calls its functions make."""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from email.utils import parseaddr
from urllib.parse import unquote

from moto.iam.access_control import IAMPolicy, PermissionResult


def resource_matches(pattern: str, arn: str) -> bool:
    """Whether a policy's Resource `pattern` covers `arn`, as IAM matches them: `*` stands for any run of
    characters (`:` and `/` included), `?` for any one, everything else for itself."""
    regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.fullmatch(regex, arn) is not None


def statements(resources: dict, role: str) -> list[dict]:
    """Every statement a role is given, inline or by its managed policies."""
    props = resources[role]["Properties"]
    documents = [p["PolicyDocument"] for p in props.get("Policies", [])]
    documents += [resources[ref["Ref"]]["Properties"]["PolicyDocument"] for ref in props.get("ManagedPolicyArns", [])]
    return [statement for document in documents for statement in document["Statement"]]


def allows(statements: list[dict], action: str, resource: object) -> bool:
    def listed(value, item):
        return item in value if isinstance(value, list) else value == item
    return any(s["Effect"] == "Allow" and listed(s["Action"], action) and listed(s["Resource"], resource)
               for s in statements)


# --- the AWS calls a handler made, as the IAM requests AWS authorises -------------------------------

@dataclass(frozen=True)
class IamRequest:
    """One authorisation AWS makes for a call: an action on a resource, with the context keys the call sets."""
    action: str
    resource: str
    context: tuple[tuple[str, str], ...] = ()


# Operations IAM authorises under another action's name (the rest are `<prefix>:<Operation>`).
_ACTION_OF = {
    ("s3", "HeadObject"): "s3:GetObject",
    ("s3", "ListObjectsV2"): "s3:ListBucket",
    ("s3", "ListObjects"): "s3:ListBucket",
    ("s3", "HeadBucket"): "s3:ListBucket",
    ("s3", "CreateMultipartUpload"): "s3:PutObject",
    ("s3", "UploadPart"): "s3:PutObject",
    ("s3", "CompleteMultipartUpload"): "s3:PutObject",
    ("s3", "DeleteObjects"): "s3:DeleteObject",
    ("s3", "CopyObject"): "s3:PutObject",  # and s3:GetObject on its source
    ("sqs", "SendMessageBatch"): "sqs:SendMessage",
    ("sqs", "DeleteMessageBatch"): "sqs:DeleteMessage",
    ("sqs", "ChangeMessageVisibilityBatch"): "sqs:ChangeMessageVisibility",
    ("bedrock", "Converse"): "bedrock:InvokeModel",
    ("bedrock", "ConverseStream"): "bedrock:InvokeModelWithResponseStream",
}
_TRANSACT_ACTIONS = {"Put": "dynamodb:PutItem", "Update": "dynamodb:UpdateItem", "Delete": "dynamodb:DeleteItem",
                     "ConditionCheck": "dynamodb:ConditionCheckItem", "Get": "dynamodb:GetItem"}
# Actions whose resource is `*`: task tokens and listings name none.
_UNSCOPED = {"states:SendTaskSuccess", "states:SendTaskFailure", "states:SendTaskHeartbeat",
             "states:ListStateMachines", "scheduler:ListSchedules", "sts:GetCallerIdentity"}
_INFERENCE_PROFILE_REGIONS = ("us.", "eu.", "apac.", "us-gov.", "global.")


class UnmappedCall(ValueError):
    """A call this module does not know how to name as IAM requests: map it here."""


def iam_requests(call: dict, region: str, account: str) -> list[IamRequest]:
    """The IAM requests AWS authorises for one call tests/deploy/lambda_runner.py recorded: the action
    (`<signing name>:<Operation>`, or its IAM name where they differ) on each resource the call reaches."""
    service, operation, params = call["service"], call["operation"], call["params"]
    action = _ACTION_OF.get((service, operation), f"{service}:{operation}")
    if action in _UNSCOPED:
        return [IamRequest(action, "*")]
    prefix = f"arn:aws:{service}:{region}:{account}"
    if service == "dynamodb":
        if "TransactItems" in params:
            return [IamRequest(_TRANSACT_ACTIONS[kind], f"{prefix}:table/{table}")
                    for kind, table in params["TransactItems"]]
        tables = params.get("RequestItems") or [params["TableName"]]
        index = f"/index/{params['IndexName']}" if "IndexName" in params else ""
        return [IamRequest(action, f"{prefix}:table/{table}{index}") for table in tables]
    if service == "s3":
        bucket = f"arn:aws:s3:::{params['Bucket']}"
        if action == "s3:ListBucket":
            return [IamRequest(action, bucket)]
        keys = params["Delete"] if operation == "DeleteObjects" else [params["Key"]]
        requests = [IamRequest(action, f"{bucket}/{key}") for key in keys]
        if operation == "CopyObject":
            requests.append(IamRequest("s3:GetObject", f"arn:aws:s3:::{unquote(params['CopySource'].lstrip('/'))}"))
        return requests
    if service == "sqs":
        name = params["QueueName"] if "QueueName" in params else params["QueueUrl"].rstrip("/").rsplit("/", 1)[-1]
        return [IamRequest(action, f"{prefix}:{name}")]
    if service == "states":
        return [IamRequest(action, params.get("stateMachineArn") or params["executionArn"])]
    if service == "events":
        buses = {entry.get("EventBusName", "default") for entry in params["Entries"]}
        return [IamRequest(action, bus if bus.startswith("arn:") else f"{prefix}:event-bus/{bus}") for bus in sorted(buses)]
    if service == "secretsmanager":
        secret = params.get("SecretId") or params["Name"]
        # A secret's ARN ends in a dash and six random characters after its name.
        return [IamRequest(action, secret if secret.startswith("arn:") else f"{prefix}:secret:{secret}-AbCdEf")]
    if service == "scheduler":
        schedule = IamRequest(action, f"{prefix}:schedule/{params.get('GroupName', 'default')}/{params['Name']}")
        if operation in ("CreateSchedule", "UpdateSchedule"):  # handing the Scheduler a role is passing it
            return [schedule, IamRequest("iam:PassRole", params["Target"]["RoleArn"],
                                         (("iam:PassedToService", "scheduler.amazonaws.com"),))]
        return [schedule]
    if service == "ses":
        sender = parseaddr(params.get("Source") or params["FromEmailAddress"])[1]
        return [IamRequest(action, f"{prefix}:identity/{sender.rsplit('@', 1)[-1]}")]
    if service == "bedrock":
        model = params["modelId"]
        if model.startswith("arn:"):
            return [IamRequest(action, model)]
        if model.startswith(_INFERENCE_PROFILE_REGIONS):
            return [IamRequest(action, f"{prefix}:inference-profile/{model}")]
        return [IamRequest(action, f"arn:aws:bedrock:{region}::foundation-model/{model}")]
    if service == "cognito-idp":
        return [IamRequest(action, f"{prefix}:userpool/{params['UserPoolId']}")]
    raise UnmappedCall(f"{service}:{operation} {params}")


def permitted(documents: list[dict], request: IamRequest) -> bool:
    """Whether a role's policy documents allow a request, by moto's evaluator (moto.iam.access_control,
    the one its server enforces IAM with): an explicit Deny in any document wins, else any Allow."""
    results = [IAMPolicy(json.dumps(document)).is_action_permitted(
        request.action, request.resource, incoming_condition_values=dict(request.context))
        for document in documents]
    return PermissionResult.DENIED not in results and PermissionResult.PERMITTED in results
