"""Creates the resources of `infra/template.yaml` on the embedded local AWS or on moto.

This is the one source of truth for tables, buckets and queues outside AWS: the local stack
and the test fixtures both call `provision`. It reads the same CloudFormation file that
ops deploy, resolves the intrinsic functions the template uses, and refuses resource types
it does not know, so an infra change can never be silently skipped locally.
"""
from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

TEMPLATE_PATH = Path(__file__).resolve().parents[2] / "infra" / "template.yaml"
WORKFLOWS_TEMPLATE_PATH = TEMPLATE_PATH.parent / "workflows.yaml"
LOCAL_ACCOUNT_ID = "123456789012"
# Types that do nothing locally: nothing enforces IAM or resource policies on the embedded AWS (SQS
# queue policies included), the engine runs from the development virtualenv rather than from a layer,
# and operations (log groups and their retention, alarms, their topic, the dashboard) watch AWS only:
# the local stack logs to its terminal.
NOT_NEEDED_LOCALLY = {"AWS::IAM::Role", "AWS::IAM::ManagedPolicy", "AWS::Lambda::LayerVersion", "AWS::SQS::QueuePolicy",
                      "AWS::Logs::LogGroup", "AWS::CloudWatch::Alarm", "AWS::CloudWatch::Dashboard", "AWS::SNS::Topic",
                      "AWS::SNS::Subscription"}
# Task functions of infra/workflows.yaml that are not the app's: container images the infrastructure
# stack defines (its output `<Function>FunctionArn` on AWS), by their name. The local stack runs
# their handler in-process in their place.
IMAGE_FUNCTIONS = {"browser_run_attempt": "chalicelib.handlers.browser.attempt_handler"}
# Types whose Ref is an id the service makes up (a user pool's `us-east-1_AbC`), known once made.
GENERATED_IDS = {"AWS::Cognito::UserPool", "AWS::Cognito::UserPoolClient"}
NO_VALUE = object()  # Ref AWS::NoValue: the property or list item is left out


class IdNotMadeYet(LookupError):
    """A Ref of a resource whose id is made up at its creation, before it was created."""


def load_template(path: Path = TEMPLATE_PATH) -> dict[str, Any]:
    """The template as data, a fresh copy each call (callers may change it). Parsed once per
    version of the file: a parse takes 0.1 s, and every test fixture provisions from it."""
    stat = path.stat()
    return copy.deepcopy(_parsed(path, stat.st_mtime_ns, stat.st_size))


@lru_cache(maxsize=8)
def _parsed(path: Path, mtime_ns: int, size: int) -> dict[str, Any]:
    return yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def function_of_parameter(parameter: str) -> str | None:
    """'ReconciliationRunLoadArn' -> 'reconciliation_run_load': the workflows template names
    each Task's function parameter after the app's lambda_function, in CamelCase."""
    if not parameter.endswith("Arn") or parameter.endswith("StateMachineArn"):
        return None
    return re.sub(r"(?<!^)(?=[A-Z])", "_", parameter.removesuffix("Arn")).lower()


def local_workflow_parameters(template: dict[str, Any], outputs: dict[str, str], app_name: str, stage: str,
                              region: str) -> dict[str, str]:
    """Parameters of infra/workflows.yaml on the embedded AWS: the state machine names from the
    infrastructure's outputs, and each Task's function as the in-process app names it."""
    parameters = {}
    for name in template.get("Parameters", {}):
        function = function_of_parameter(name)
        if function:
            parameters[name] = f"arn:aws:lambda:{region}:{LOCAL_ACCOUNT_ID}:function:{app_name}-{stage}-{function}"
        elif name in outputs:
            parameters[name] = outputs[name]
    return parameters


class Resolver:
    """Resolves Ref, Fn::Sub and Fn::GetAtt against parameters and resources' physical names."""

    def __init__(self, template: dict[str, Any], parameters: dict[str, str], region: str) -> None:
        self.template = template
        self.pseudo = {"AWS::Region": region, "AWS::AccountId": LOCAL_ACCOUNT_ID, "AWS::Partition": "aws",
                       "AWS::StackName": f"{parameters.get('AppName', 'recon')}-{parameters.get('Stage', 'local')}"}
        defaults = {k: v.get("Default") for k, v in template.get("Parameters", {}).items()}
        self.parameters = {**{k: v for k, v in defaults.items() if v is not None}, **parameters}
        missing = [k for k in template.get("Parameters", {}) if k not in self.parameters]
        if missing:
            raise ValueError(f"template parameters without a value: {', '.join(missing)}")
        self.physical_ids: dict[str, str] = {}  # GENERATED_IDS resources' ids, as they are made

    def condition(self, name: str | None) -> bool:
        """Whether a condition of the template holds (None: the resource has no condition)."""
        return name is None or bool(self.resolve(self.template["Conditions"][name]))

    def resolve(self, value: Any) -> Any:
        if isinstance(value, list):
            return [v for v in (self.resolve(v) for v in value) if v is not NO_VALUE]
        if not isinstance(value, dict):
            return value
        if set(value) == {"Ref"}:
            return self._ref(value["Ref"])
        if set(value) == {"Fn::Sub"}:
            return self._sub(value["Fn::Sub"])
        if set(value) == {"Fn::GetAtt"}:
            return self._get_att(*value["Fn::GetAtt"])
        if set(value) == {"Fn::If"}:
            condition, if_true, if_false = value["Fn::If"]
            return self.resolve(if_true if self.condition(condition) else if_false)
        if set(value) == {"Fn::Equals"}:
            left, right = self.resolve(value["Fn::Equals"])
            return left == right
        if set(value) == {"Fn::Not"}:
            return not self.resolve(value["Fn::Not"][0])
        if set(value) == {"Fn::Split"}:
            separator, text = value["Fn::Split"]
            return str(self.resolve(text)).split(separator)
        return {k: v for k, v in ((k, self.resolve(v)) for k, v in value.items()) if v is not NO_VALUE}

    def _ref(self, name: str) -> Any:
        if name == "AWS::NoValue":
            return NO_VALUE
        if name in self.physical_ids:
            return self.physical_ids[name]
        if name in self.parameters:
            return str(self.parameters[name])
        if name in self.pseudo:
            return self.pseudo[name]
        if self.template["Resources"][name]["Type"] in GENERATED_IDS:
            raise IdNotMadeYet(f"{name}: its id is the one AWS gives it, and it is not made yet")
        if self.template["Resources"][name]["Type"] == "AWS::SNS::Topic":  # Ref of a topic is its ARN
            return f"arn:aws:sns:{self.pseudo['AWS::Region']}:{LOCAL_ACCOUNT_ID}:{self.physical_name(name)}"
        return self.physical_name(name)

    def _sub(self, spec: Any) -> str:
        text, variables = (spec, {}) if isinstance(spec, str) else (spec[0], self.resolve(spec[1]))

        def replace(match: re.Match) -> str:
            name = match.group(1)
            if name in variables:
                return str(variables[name])
            if "." in name:
                return str(self._get_att(*name.split(".", 1)))
            return self._ref(name)

        return re.sub(r"\$\{([^}]+)\}", replace, text)

    def _get_att(self, logical_id: str, attribute: str) -> str:
        resource = self.template["Resources"][logical_id]
        name = self.physical_name(logical_id)
        kind = resource["Type"]
        region, account = self.pseudo["AWS::Region"], LOCAL_ACCOUNT_ID
        if kind == "AWS::SQS::Queue":
            return {"Arn": f"arn:aws:sqs:{region}:{account}:{name}", "QueueName": name,
                    "QueueUrl": name}[attribute]
        if kind == "AWS::StepFunctions::StateMachine":
            return {"Arn": f"arn:aws:states:{region}:{account}:stateMachine:{name}", "Name": name}[attribute]
        if kind == "AWS::Events::EventBus" and attribute in ("Arn", "Name"):
            return {"Arn": f"arn:aws:events:{region}:{account}:event-bus/{name}", "Name": name}[attribute]
        if kind == "AWS::Events::Rule" and attribute == "Arn":
            bus = self.resolve(resource["Properties"]["EventBusName"])
            return f"arn:aws:events:{region}:{account}:rule/{bus}/{name}"
        if attribute == "Arn":
            service = {"AWS::DynamoDB::Table": "dynamodb", "AWS::IAM::Role": "iam",
                       "AWS::S3::Bucket": "s3"}.get(kind, "unknown")
            return f"arn:aws:{service}:{region}:{account}:{name}"
        raise ValueError(f"Fn::GetAtt {logical_id}.{attribute} is not supported locally")

    def physical_name(self, logical_id: str) -> str:
        props = self.template["Resources"][logical_id].get("Properties", {})
        for field in ("TableName", "BucketName", "QueueName", "Name", "StateMachineName", "RoleName", "LogGroupName",
                      "TopicName", "DashboardName", "ProviderName"):
            if field in props:
                return self.resolve(props[field])
        return f"{self.pseudo['AWS::StackName']}-{logical_id}"


def state_machine_definition(template: dict[str, Any], resolver: Resolver,
                             logical_id: str) -> tuple[dict[str, Any], dict[str, str]]:
    """The ASL of a state machine, read from its file next to the template, and its substitutions."""
    props = template["Resources"][logical_id]["Properties"]
    definition = json.loads((WORKFLOWS_TEMPLATE_PATH.parent / props["DefinitionS3Location"]).read_text())
    return definition, resolver.resolve(props.get("DefinitionSubstitutions", {}))


def substitute(definition: dict[str, Any], substitutions: dict[str, str]) -> str:
    text = json.dumps(definition)
    for name, value in substitutions.items():
        text = text.replace("${" + name + "}", value)
    return text


def table_definitions(template: dict[str, Any], resolver: Resolver) -> list[dict[str, Any]]:
    """CreateTable arguments of every table in the template."""
    tables = []
    for resource in template["Resources"].values():
        if resource["Type"] != "AWS::DynamoDB::Table":
            continue
        props = resolver.resolve(resource["Properties"])
        definition = {
            "TableName": props["TableName"], "KeySchema": props["KeySchema"],
            "AttributeDefinitions": props["AttributeDefinitions"],
            "BillingMode": props.get("BillingMode", "PAY_PER_REQUEST"),
        }
        if props.get("GlobalSecondaryIndexes"):
            definition["GlobalSecondaryIndexes"] = props["GlobalSecondaryIndexes"]
        tables.append(definition)
    return tables


def _schema_of(definition: dict[str, Any]) -> str:
    """A canonical text of the parts of a table that DynamoDB cannot change in place locally."""
    indexes = sorted(
        (i["IndexName"], json.dumps(i["KeySchema"], sort_keys=True), i["Projection"]["ProjectionType"],
         sorted(i["Projection"].get("NonKeyAttributes", [])))
        for i in definition.get("GlobalSecondaryIndexes", [])
    )
    attributes = sorted((a["AttributeName"], a["AttributeType"]) for a in definition["AttributeDefinitions"])
    return json.dumps([definition["KeySchema"], attributes, indexes], sort_keys=True)


def ensure_table(dynamodb, definition: dict[str, Any], log: Callable[[str], None] = print) -> None:
    """Create the table, or rebuild it (keeping its items) when its schema differs from the template.

    dynalite silently ignores a GSI added to an existing table, so comparing is the only way
    to avoid running on a stale schema.
    """
    name = definition["TableName"]
    try:
        current = dynamodb.describe_table(TableName=name)["Table"]
    except dynamodb.exceptions.ResourceNotFoundException:
        dynamodb.create_table(**definition)
        dynamodb.get_waiter("table_exists").wait(TableName=name, WaiterConfig={"Delay": 0.2, "MaxAttempts": 100})
        return
    if _schema_of(current) == _schema_of(definition):
        return
    log(f"table {name}: schema differs from infra/template.yaml; rebuilding it with its items")
    items = []
    for page in dynamodb.get_paginator("scan").paginate(TableName=name):
        items.extend(page["Items"])
    dynamodb.delete_table(TableName=name)
    dynamodb.get_waiter("table_not_exists").wait(TableName=name, WaiterConfig={"Delay": 0.2, "MaxAttempts": 100})
    dynamodb.create_table(**definition)
    dynamodb.get_waiter("table_exists").wait(TableName=name, WaiterConfig={"Delay": 0.2, "MaxAttempts": 100})
    for start in range(0, len(items), 25):
        pending = [{"PutRequest": {"Item": i}} for i in items[start:start + 25]]
        while pending:
            response = dynamodb.batch_write_item(RequestItems={name: pending})
            pending = response.get("UnprocessedItems", {}).get(name, [])
    log(f"table {name}: rebuilt with {len(items)} items")


def infra_outputs(parameters: dict[str, str], region: str) -> dict[str, str]:
    """The outputs infra/template.yaml has on the embedded AWS, computed without creating anything."""
    template = load_template()
    return _outputs(template, Resolver(template, parameters, region))


def workflows_resolver(parameters: dict[str, str], region: str) -> tuple[dict[str, Any], Resolver]:
    """infra/workflows.yaml with the local values of its parameters."""
    template = load_template(WORKFLOWS_TEMPLATE_PATH)
    infra = Resolver(load_template(), parameters, region)
    values = local_workflow_parameters(template, infra_outputs(parameters, region),
                                       infra.parameters["AppName"], infra.parameters["Stage"], region)
    return template, Resolver(template, values, region)


def provision(clients, parameters: dict[str, str], region: str, template: dict[str, Any] | None = None,
              log: Callable[[str], None] = print) -> dict[str, str]:
    """Create every resource of the infrastructure and of the workflows (idempotent), or of the
    one `template` given, and return the infrastructure's (or that template's) outputs."""
    if template is not None:
        return _provision_template(clients, template, Resolver(template, parameters, region), log)
    infra = load_template()
    outputs = _provision_template(clients, infra, Resolver(infra, parameters, region), log)
    _provision_template(clients, *workflows_resolver(parameters, region), log)
    return outputs


def _outputs(template: dict[str, Any], resolver: Resolver) -> dict[str, str]:
    """The template's outputs, but those of a false condition or naming the ARN of something not
    made locally (a role)."""
    def local_only(value: Any) -> bool:
        return isinstance(value, dict) and "Fn::GetAtt" in value and value["Fn::GetAtt"][1] == "Arn" and \
            template["Resources"][value["Fn::GetAtt"][0]]["Type"] in NOT_NEEDED_LOCALLY

    outputs = {}
    for name, output in template.get("Outputs", {}).items():
        if not resolver.condition(output.get("Condition")) or local_only(output["Value"]):
            continue
        try:
            outputs[name] = resolver.resolve(output["Value"])
        except IdNotMadeYet:  # infra_outputs, which makes nothing: that id is unknown
            continue
    return outputs


def _provision_template(clients, template: dict[str, Any], resolver: Resolver,
                        log: Callable[[str], None]) -> dict[str, str]:
    for definition in table_definitions(template, resolver):
        ensure_table(clients.dynamodb, definition, log)
    for logical_id, resource in template["Resources"].items():
        kind = resource["Type"]
        if kind == "AWS::DynamoDB::Table" or kind in NOT_NEEDED_LOCALLY or \
                not resolver.condition(resource.get("Condition")):
            continue
        if kind == "AWS::StepFunctions::StateMachine":
            _create_state_machine(clients, template, resolver, logical_id)
            continue
        if kind in _IDENTIFIED_CREATORS:
            props = resolver.resolve(resource.get("Properties", {}))
            resolver.physical_ids[logical_id] = _IDENTIFIED_CREATORS[kind](clients, props, resolver)
            continue
        create = _CREATORS.get(kind)
        if create is None:
            raise ValueError(f"{logical_id}: resource type {kind} is not supported by the local provisioner")
        create(clients, resolver.resolve(resource.get("Properties", {})), resolver)
    return _outputs(template, resolver)


def _create_bucket(clients, props: dict[str, Any], resolver: Resolver) -> None:
    s3 = clients.s3
    try:
        s3.head_bucket(Bucket=props["BucketName"])
    except s3.exceptions.ClientError:
        s3.create_bucket(Bucket=props["BucketName"])
    if props.get("NotificationConfiguration", {}).get("EventBridgeConfiguration"):
        try:
            s3.put_bucket_notification_configuration(
                Bucket=props["BucketName"], NotificationConfiguration={"EventBridgeConfiguration": {}}
            )
        except s3.exceptions.ClientError as error:
            # The local stack's S3 (s3rver) delivers no events and says so; its runtime polls the
            # bucket instead (LocalRuntime.watch_bucket). Any other refusal is an error.
            if error.response["Error"]["Code"] != "NotImplemented":
                raise


def _create_queue(clients, props: dict[str, Any], resolver: Resolver) -> None:
    attributes: dict[str, str] = {}
    for field in ("VisibilityTimeout", "MessageRetentionPeriod", "DelaySeconds", "ReceiveMessageWaitTimeSeconds"):
        if field in props:
            attributes[field] = str(props[field])
    if "RedrivePolicy" in props:
        attributes["RedrivePolicy"] = json.dumps(props["RedrivePolicy"])
    clients.sqs.create_queue(QueueName=props["QueueName"], Attributes=attributes)


def _create_event_bus(clients, props: dict[str, Any], resolver: Resolver) -> None:
    events = clients.client("events")
    try:
        events.create_event_bus(Name=props["Name"])
    except events.exceptions.ResourceAlreadyExistsException:
        pass


def _create_rule(clients, props: dict[str, Any], resolver: Resolver) -> None:
    """An EventBridge rule and its targets: moto's bus sends matching events on to its SQS targets,
    through the journaled SQS backend, as AWS does."""
    events = clients.client("events")
    events.put_rule(Name=props["Name"], EventBusName=props["EventBusName"],
                    EventPattern=json.dumps(props["EventPattern"]), State=props.get("State", "ENABLED"))
    events.put_targets(Rule=props["Name"], EventBusName=props["EventBusName"],
                       Targets=[{"Id": t["Id"], "Arn": t["Arn"]} for t in props.get("Targets", [])])


def _create_schedule_group(clients, props: dict[str, Any], resolver: Resolver) -> None:
    scheduler = clients.client("scheduler")
    try:
        scheduler.create_schedule_group(Name=props["Name"])
    except scheduler.exceptions.ConflictException:
        pass


def _create_state_machine(clients, template: dict[str, Any], resolver: Resolver, logical_id: str) -> None:
    """Registered on the embedded AWS so the resource exists as on AWS; the local driver runs it."""
    sfn = clients.client("stepfunctions")
    name = resolver.physical_name(logical_id)
    definition, substitutions = state_machine_definition(template, resolver, logical_id)
    role = f"arn:aws:iam::{LOCAL_ACCOUNT_ID}:role/{name}-role"
    existing = {m["name"]: m["stateMachineArn"] for m in sfn.list_state_machines()["stateMachines"]}
    if name in existing:
        sfn.update_state_machine(stateMachineArn=existing[name], definition=substitute(definition, substitutions))
    else:
        sfn.create_state_machine(name=name, definition=substitute(definition, substitutions), roleArn=role)


def _create_user_pool(clients, props: dict[str, Any], resolver: Resolver) -> str:
    """The pool of that name, made if missing (the embedded AWS keeps pools in memory: at each start);
    its id."""
    cognito = clients.client("cognito-idp")
    name = props["UserPoolName"]
    for page in cognito.get_paginator("list_user_pools").paginate(MaxResults=60):
        found = next((p["Id"] for p in page["UserPools"] if p["Name"] == name), None)
        if found:
            return str(found)
    fields = ("Policies", "AutoVerifiedAttributes", "UsernameAttributes", "UsernameConfiguration",
              "AdminCreateUserConfig", "AccountRecoverySetting", "MfaConfiguration", "UserPoolAddOns")
    return str(cognito.create_user_pool(PoolName=name, **{f: props[f] for f in fields if f in props})
               ["UserPool"]["Id"])


def _create_user_pool_client(clients, props: dict[str, Any], resolver: Resolver) -> str:
    cognito = clients.client("cognito-idp")
    pool, name = props["UserPoolId"], props["ClientName"]
    for page in cognito.get_paginator("list_user_pool_clients").paginate(UserPoolId=pool, MaxResults=60):
        found = next((c["ClientId"] for c in page["UserPoolClients"] if c["ClientName"] == name), None)
        if found:
            return str(found)
    fields = ("GenerateSecret", "ExplicitAuthFlows", "PreventUserExistenceErrors", "EnableTokenRevocation",
              "AccessTokenValidity", "IdTokenValidity", "RefreshTokenValidity", "TokenValidityUnits",
              "SupportedIdentityProviders", "AllowedOAuthFlowsUserPoolClient", "AllowedOAuthFlows",
              "AllowedOAuthScopes", "CallbackURLs", "LogoutURLs", "ReadAttributes")
    return str(cognito.create_user_pool_client(UserPoolId=pool, ClientName=name,
                                               **{f: props[f] for f in fields if f in props})
               ["UserPoolClient"]["ClientId"])


def _create_user_pool_domain(clients, props: dict[str, Any], resolver: Resolver) -> None:
    cognito = clients.client("cognito-idp")
    if not cognito.describe_user_pool_domain(Domain=props["Domain"]).get("DomainDescription"):
        cognito.create_user_pool_domain(Domain=props["Domain"], UserPoolId=props["UserPoolId"])


def _create_identity_provider(clients, props: dict[str, Any], resolver: Resolver) -> None:
    cognito = clients.client("cognito-idp")
    try:
        cognito.create_identity_provider(**{f: props[f] for f in ("UserPoolId", "ProviderName", "ProviderType",
                                                                  "ProviderDetails", "AttributeMapping") if f in props})
    except cognito.exceptions.DuplicateProviderException:
        pass


_IDENTIFIED_CREATORS: dict[str, Callable[[Any, dict[str, Any], Resolver], str]] = {
    "AWS::Cognito::UserPool": _create_user_pool,
    "AWS::Cognito::UserPoolClient": _create_user_pool_client,
}

_CREATORS: dict[str, Callable[[Any, dict[str, Any], Resolver], None]] = {
    "AWS::Cognito::UserPoolDomain": _create_user_pool_domain,
    "AWS::Cognito::UserPoolIdentityProvider": _create_identity_provider,
    "AWS::S3::Bucket": _create_bucket,
    "AWS::SQS::Queue": _create_queue,
    "AWS::Scheduler::ScheduleGroup": _create_schedule_group,
    "AWS::Events::EventBus": _create_event_bus,
    "AWS::Events::Rule": _create_rule,
}
