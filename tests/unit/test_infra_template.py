import re
from pathlib import Path

import pytest
from cfnlint.api import lint_file

from chalicelib.local.provision import (
    TEMPLATE_PATH,
    WORKFLOWS_TEMPLATE_PATH,
    Resolver,
    function_of_parameter,
    load_template,
    provision,
    table_definitions,
)
from tests.support.iam import allows, statements


@pytest.mark.parametrize("path", [TEMPLATE_PATH, WORKFLOWS_TEMPLATE_PATH], ids=["infra", "workflows"])
def test_the_templates_pass_cfn_lint(path):
    matches = lint_file(Path(path))
    assert [str(m) for m in matches] == []


def test_the_data_bucket_is_named_by_stage_account_and_region_unless_a_name_is_given():
    template = load_template()
    unnamed = Resolver(template, {"Stage": "prod"}, "eu-west-1")
    named = Resolver(template, {"Stage": "prod", "DataBucketName": "my-bucket"}, "eu-west-1")
    assert unnamed.physical_name("DataBucket") == "recon-prod-data-123456789012-eu-west-1"
    assert named.physical_name("DataBucket") == "my-bucket"


def _cors_rules(template: dict, **parameters: str) -> list[dict] | None:
    props = Resolver(template, {"Stage": "prod", **parameters}, "eu-west-1").resolve(
        template["Resources"]["DataBucket"]["Properties"])
    return props["CorsConfiguration"]["CorsRules"] if "CorsConfiguration" in props else None


def test_browsers_may_put_uploads_to_the_data_bucket_only_from_the_web_apps_own_origin():
    # The web app's imports page PUTs a file to its presigned upload URL from the stage's API origin
    # (https://<api id>.execute-api.<region>.amazonaws.com), which Chalice deploys after this stack:
    # `make deploy` passes it as WebAppOrigin once known; no other API Gateway API of the region.
    template = load_template()
    api = "https://a1b2c3d4e5.execute-api.eu-west-1.amazonaws.com"
    [rule] = _cors_rules(template, WebAppOrigin=api)
    assert rule["AllowedMethods"] == ["PUT"] and rule["AllowedHeaders"] == ["content-type"]
    assert rule["AllowedOrigins"] == [api]
    custom = "https://recon.acme.test,https://recon-backup.acme.test:8443"
    [rule] = _cors_rules(template, WebAppOrigin=custom)
    assert rule["AllowedOrigins"] == ["https://recon.acme.test", "https://recon-backup.acme.test:8443"]


def test_before_the_web_apps_origin_is_known_no_browser_origin_may_use_the_data_bucket():
    template = load_template()
    assert template["Parameters"]["WebAppOrigin"]["Default"] == ""
    assert _cors_rules(template) is None  # no CORS rule at all: a browser's preflight is refused


def _allowed_origins(value) -> list:
    """Every CORS rule's AllowedOrigins anywhere in `value` (every bucket, either branch of a condition)."""
    if isinstance(value, list):
        return [found for item in value for found in _allowed_origins(item)]
    if not isinstance(value, dict):
        return []
    here = [value["AllowedOrigins"]] if "AllowedOrigins" in value else []
    return here + [found for item in value.values() for found in _allowed_origins(item)]


def test_every_cors_rule_of_the_template_takes_its_origins_from_the_parameter_never_a_wildcard():
    template = load_template()
    assert _allowed_origins(template["Resources"]) == [{"Fn::Split": [",", {"Ref": "WebAppOrigin"}]}]


@pytest.mark.parametrize("origin", [
    "https://a1b2c3d4e5.execute-api.eu-west-1.amazonaws.com", "https://recon.acme.test",
    "https://recon.acme.test:8443,https://a1b2c3d4e5.execute-api.eu-west-1.amazonaws.com"])
def test_the_web_apps_origin_takes_https_origins(origin):
    assert re.fullmatch(load_template()["Parameters"]["WebAppOrigin"]["AllowedPattern"], origin)


@pytest.mark.parametrize("origin", [
    "*", "https://*.execute-api.eu-west-1.amazonaws.com", "http://recon.acme.test", "https://recon.acme.test/",
    "https://recon.acme.test/app", "https://recon.acme.test, https://other.acme.test", "recon.acme.test"])
def test_the_web_apps_origin_refuses_a_wildcard_a_path_or_plain_http(origin):
    assert not re.fullmatch(load_template()["Parameters"]["WebAppOrigin"]["AllowedPattern"], origin)


def test_the_engine_layer_exists_only_when_its_zip_is_given():
    template = load_template()
    condition = template["Resources"]["EngineLayer"]["Condition"]
    assert not Resolver(template, {}, "us-east-1").condition(condition)
    assert Resolver(template, {"EngineLayerKey": "layers/engine-abc.zip"}, "us-east-1").condition(condition)


def test_the_browser_function_of_the_stack_sends_the_tables_requests_as_the_stage_says():
    """Chalice's functions take `RECON_DYNAMODB_CLIENT` from `stage_config`; the browser worker, a
    function of the infrastructure stack, from the same parameter."""
    template = load_template()
    variables = template["Resources"]["BrowserRunAttemptFunction"]["Properties"]["Environment"]["Variables"]
    assert variables["RECON_DYNAMODB_CLIENT"] == {"Ref": "DynamoDbClient"}
    assert template["Parameters"]["DynamoDbClient"]["AllowedValues"] == ["auto", "wire", "botocore"]


def test_workflow_parameters_name_the_apps_functions():
    from app import app

    parameters = load_template(WORKFLOWS_TEMPLATE_PATH)["Parameters"]
    functions = [function_of_parameter(name) for name in parameters if function_of_parameter(name)]
    # But the browser worker: a container image of the infrastructure stack, not one of the app's.
    assert len(functions) == 16 and [f for f in functions if f not in app.handler_map] == ["browser_run_attempt"]


def test_the_resolver_expands_refs_subs_and_queue_arns():
    template = load_template()
    resolver = Resolver(template, {"Stage": "qa", "DataBucketName": "b-qa"}, "eu-west-1")
    assert resolver.resolve({"Fn::Sub": "${AppName}-${Stage}"}) == "recon-qa"
    assert resolver.resolve({"Ref": "DataBucket"}) == "b-qa"
    assert resolver.resolve({"Fn::GetAtt": ["BulkDeadLetterQueue", "Arn"]}).endswith(":recon-qa-bulk-dlq")
    assert resolver.resolve({"Fn::Sub": "${AWS::Region}"}) == "eu-west-1"


def test_the_table_definition_comes_from_the_template():
    template = load_template()
    [table] = table_definitions(template, Resolver(template, {"DataBucketName": "b"}, "us-east-1"))
    assert table["TableName"] == "recon-dev"
    assert [i["IndexName"] for i in table["GlobalSecondaryIndexes"]] == ["gsi1", "gsi2", "gsi3", "gsi4", "gsi5"]


def test_a_parameter_without_value_is_refused():
    with pytest.raises(ValueError, match="FileImportPrepareArn"):
        Resolver(load_template(WORKFLOWS_TEMPLATE_PATH), {}, "us-east-1")


def test_an_unknown_resource_type_is_never_skipped_silently():
    template = load_template()
    template["Resources"] = {"Stream": {"Type": "AWS::Kinesis::Stream", "Properties": {}}}

    class NoClients:
        dynamodb = None

    with pytest.raises(ValueError, match="AWS::Kinesis::Stream"):
        provision(NoClients(), {"DataBucketName": "b"}, "us-east-1", template=template, log=lambda _: None)


def test_the_worker_fails_a_job_on_the_very_delivery_the_queue_would_dead_letter():
    from chalicelib.settings import Settings

    queue = load_template()["Resources"]["BulkQueue"]["Properties"]
    assert queue["RedrivePolicy"]["maxReceiveCount"] == Settings().bulk_max_receives


def test_the_function_table_names_exactly_the_apps_functions():
    from app import app
    from infra.functions import FUNCTIONS

    chalice_functions = {"api_handler"} | {f.name for f in app.pure_lambda_functions} | \
        {source.name for source in app.event_sources}
    assert set(FUNCTIONS) == chalice_functions


def test_each_queue_waits_six_times_its_consumers_timeout_before_redelivery():
    from infra.functions import FUNCTIONS

    resources = load_template()["Resources"]
    assert resources["BulkQueue"]["Properties"]["VisibilityTimeout"] >= 6 * FUNCTIONS["bulk_worker"].timeout_s
    assert resources["InvestigationQueue"]["Properties"]["VisibilityTimeout"] >= \
        6 * FUNCTIONS["investigation_worker"].timeout_s
    assert resources["AgentRunQueue"]["Properties"]["VisibilityTimeout"] >= 6 * FUNCTIONS["agent_worker"].timeout_s


def test_the_agent_worker_fails_a_run_on_the_very_delivery_the_queue_would_dead_letter():
    from chalicelib.settings import Settings

    queue = load_template()["Resources"]["AgentRunQueue"]["Properties"]
    assert queue["RedrivePolicy"]["maxReceiveCount"] == Settings().agent_run_max_receives
    assert queue["RedrivePolicy"]["deadLetterTargetArn"] == {"Fn::GetAtt": ["AgentRunDeadLetterQueue", "Arn"]}




def test_agents_schedules_send_to_the_agent_run_queue_and_the_api_and_agents_may_manage_them():
    resources = load_template()["Resources"]
    queue = {"Fn::GetAtt": ["AgentRunQueue", "Arn"]}
    scheduler = statements(resources, "SchedulerRole")
    assert allows(scheduler, "sqs:SendMessage", queue)
    assert not any("lambda:InvokeFunction" in str(s["Action"]) for s in scheduler)  # no schedule invokes a function
    group = {"Fn::Sub": "arn:${AWS::Partition}:scheduler:${AWS::Region}:${AWS::AccountId}:schedule/${ScheduleGroup}/*"}
    for role in ("ApiRole", "AgentsRole"):
        granted = statements(resources, role)
        for action in ("scheduler:CreateSchedule", "scheduler:UpdateSchedule", "scheduler:DeleteSchedule",
                       "scheduler:GetSchedule"):
            assert allows(granted, action, group), (role, action)
        [passing] = [s for s in granted if s["Action"] == "iam:PassRole"]
        assert passing["Resource"] == {"Fn::GetAtt": ["SchedulerRole", "Arn"]}
        assert passing["Condition"] == {"StringEquals": {"iam:PassedToService": "scheduler.amazonaws.com"}}
        assert allows(granted, "sqs:SendMessage", queue), role  # queues runs of agents
        assert allows(granted, "sqs:GetQueueAttributes", queue), role  # the schedule's target ARN
    agents = statements(resources, "AgentsRole")
    for action in ("sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:ChangeMessageVisibility"):
        assert allows(agents, action, queue), action
    assert any("ses:SendRawEmail" in s["Action"] for s in agents)
    assert any("bedrock:InvokeModel" in s["Action"] for s in agents)  # Converse is authorised as InvokeModel
    for role in ("ApiRole", "IngestionRole", "RunsRole", "InvestigationsRole", "SweeperRole"):
        granted = statements(resources, role)
        assert not any("bedrock:" in str(s["Action"]) or "ses:" in str(s["Action"]) for s in granted), role


def test_the_stage_configuration_takes_every_name_from_the_stacks_outputs(monkeypatch):
    from infra.deploy import stage_config
    from infra.functions import FUNCTIONS

    outputs = {name: f"<{name}>" for name in (
        "TableName", "BucketName", "BulkQueueName", "InvestigationQueueName", "AgentRunQueueName", "ScheduleGroupName",
        "SchedulerRoleArn", "FileImportStateMachineArn", "ReconciliationRunStateMachineArn", "EngineLayerArn",
        "ApiRoleArn", "IngestionRoleArn", "RunsRoleArn", "InvestigationsRoleArn", "SweeperRoleArn", "AgentsRoleArn",
        "BrowserRoleArn", "BrowserRunStateMachineArn", "SecretsPrefix", "EventBusName", "WebhooksRoleArn",
        "WebhookEventQueueName", "WebhookDeliveryQueueName", "MailFrom", "ModelId", "UserPoolId",
        "UserPoolClientId")}
    outputs["DynamoDbClient"] = "botocore"  # a value the setting takes (one of three)
    stage = stage_config("prod", outputs)["stages"]["prod"]
    assert set(stage["environment_variables"].values()) - {"prod", "INFO", "false"} == {
        "<TableName>", "<BucketName>", "<BulkQueueName>", "<InvestigationQueueName>", "<AgentRunQueueName>",
        "<ScheduleGroupName>", "<SchedulerRoleArn>", "<FileImportStateMachineArn>",
        "<ReconciliationRunStateMachineArn>", "<BrowserRunStateMachineArn>", "<SecretsPrefix>", "<EventBusName>",
        "<WebhookEventQueueName>", "<WebhookDeliveryQueueName>", "<MailFrom>", "<ModelId>", "botocore",
        "<UserPoolId>", "<UserPoolClientId>"}
    # Each name reaches the setting that reads it.
    from chalicelib.settings import Settings

    for name, value in stage["environment_variables"].items():
        monkeypatch.setenv(name, value)
    given = Settings()
    assert (given.agent_run_queue_name, given.schedule_group_name, given.scheduler_role_arn, given.event_bus_name) == (
        "<AgentRunQueueName>", "<ScheduleGroupName>", "<SchedulerRoleArn>", "<EventBusName>")
    assert (given.webhook_event_queue_name, given.webhook_delivery_queue_name) == (
        "<WebhookEventQueueName>", "<WebhookDeliveryQueueName>")
    assert (given.mail_sender, given.default_model) == ("<MailFrom>", "<ModelId>")  # the deploy's parameters
    assert given.dynamodb_client == "botocore" and not given.dynamodb_wire
    # Until every function reads the members a match carries, a deployed stage writes member items.
    assert not given.carry_match_members and Settings.model_fields["carry_match_members"].default is True
    # Until no function changes records without noting their blocks, a deployed stage marks no stream as noting them.
    assert not given.note_changed_blocks and Settings.model_fields["note_changed_blocks"].default is True
    # A transaction's writes cost AWS twice: a deployed stage claims record by record (the local stack in transactions).
    assert not given.claims_in_transactions and Settings.model_fields["claims_in_transactions"].default is True
    assert (given.user_pool_id, given.user_pool_client_id) == ("<UserPoolId>", "<UserPoolClientId>")
    assert stage["lambda_functions"]["webhook_worker"]["iam_role_arn"] == "<WebhooksRoleArn>"
    assert stage["lambda_functions"]["webhook_worker"]["layers"] == []
    assert stage["lambda_functions"]["agent_worker"]["iam_role_arn"] == "<AgentsRoleArn>"
    assert stage["lambda_functions"]["agent_worker"]["layers"] == ["<EngineLayerArn>"]
    assert stage["manage_iam_role"] is False
    assert stage["lambda_functions"]["s3_object_created"]["layers"] == []
    assert stage["lambda_functions"]["reconciliation_run_match"]["layers"] == ["<EngineLayerArn>"]
    assert stage["lambda_functions"]["reconciliation_run_match"]["iam_role_arn"] == "<RunsRoleArn>"
    assert set(stage["lambda_functions"]) == set(FUNCTIONS)


def test_the_webhook_queues_have_dead_letter_queues_and_their_consumers_may_read_them():
    from infra.functions import FUNCTIONS

    resources = load_template()["Resources"]
    for queue, consumer in (("WebhookEventQueue", "webhook_fanout"), ("WebhookDeliveryQueue", "webhook_worker")):
        props = resources[queue]["Properties"]
        assert props["VisibilityTimeout"] >= 6 * FUNCTIONS[consumer].timeout_s
        assert props["RedrivePolicy"]["deadLetterTargetArn"]["Fn::GetAtt"][0] == queue.replace("Queue", "DeadLetterQueue")
        assert FUNCTIONS[consumer].group == "webhooks"
        granted = statements(resources, "WebhooksRole")
        for action in ("sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:ChangeMessageVisibility"):
            assert allows(granted, action, {"Fn::GetAtt": [queue, "Arn"]}), (queue, action)
    # Attempts are queued by the fan-out, the API's retry and the sweeper.
    delivery_queue = {"Fn::GetAtt": ["WebhookDeliveryQueue", "Arn"]}
    for role in ("WebhooksRole", "ApiRole", "SweeperRole"):
        assert allows(statements(resources, role), "sqs:SendMessage", delivery_queue), role


def test_the_webhook_functions_reach_their_table_items_and_delivery_queue_and_nothing_else():
    resources = load_template()["Resources"]
    webhooks = statements(resources, "WebhooksRole")
    actions = {a for s in webhooks for a in (s["Action"] if isinstance(s["Action"], list) else [s["Action"]])}
    assert not {a for a in actions if a.split(":")[0] in ("s3", "states", "events", "secretsmanager")}, actions
    sends = [s for s in webhooks if "sqs:SendMessage" in s["Action"]]
    assert [s["Resource"] for s in sends] == [{"Fn::GetAtt": ["WebhookDeliveryQueue", "Arn"]}]
    [table] = [s for s in webhooks if s.get("Sid") == "Table"]
    assert table["Resource"] == [{"Fn::GetAtt": ["Table", "Arn"]}, {"Fn::Sub": "${Table.Arn}/index/gsi1"}]


def test_every_role_that_changes_the_domain_may_publish_on_the_event_bus_and_only_the_fan_out_rule_fills_its_queue():
    from infra.functions import FUNCTIONS, role_output

    resources = load_template()["Resources"]
    bus = {"Fn::GetAtt": ["EventBus", "Arn"]}
    roles = {role_output(f.group).removesuffix("Arn") for f in FUNCTIONS.values()}
    for role in roles - {"WebhooksRole"}:
        assert allows(statements(resources, role), "events:PutEvents", bus), role
    # The webhook functions only deliver events: none of theirs goes on the bus.
    assert not any("events:" in str(s["Action"]) for s in statements(resources, "WebhooksRole"))
    rule = resources["WebhookFanOutRule"]["Properties"]
    assert rule["EventBusName"] == {"Fn::GetAtt": ["EventBus", "Name"]} and rule["EventPattern"] == {"source": ["recon"]}
    assert [t["Arn"] for t in rule["Targets"]] == [{"Fn::GetAtt": ["WebhookEventQueue", "Arn"]}]
    [grant] = resources["WebhookEventQueuePolicy"]["Properties"]["PolicyDocument"]["Statement"]
    assert grant["Principal"] == {"Service": "events.amazonaws.com"} and grant["Action"] == "sqs:SendMessage"
    assert grant["Condition"] == {"ArnEquals": {"aws:SourceArn": {"Fn::GetAtt": ["WebhookFanOutRule", "Arn"]}}}


def test_the_local_provisioner_makes_the_bus_and_its_rule_deliver_to_the_fan_out_queue():
    import json

    import boto3
    from moto import mock_aws

    from chalicelib.adapters.aws import AwsClients
    from chalicelib.settings import Settings

    with mock_aws():
        settings = Settings(region="us-east-1", local_mode=True)
        outputs = provision(AwsClients(settings), {"Stage": "dev"}, "us-east-1", log=lambda _: None)
        sqs = boto3.client("sqs", region_name="us-east-1")
        boto3.client("events", region_name="us-east-1").put_events(Entries=[{
            "Source": "recon", "DetailType": "file_import.completed", "EventBusName": outputs["EventBusName"],
            "Detail": json.dumps({"environment": "acme", "event": {"id": "evt_1"}})}])
        url = sqs.get_queue_url(QueueName=outputs["WebhookEventQueueName"])["QueueUrl"]
        [message] = sqs.receive_message(QueueUrl=url)["Messages"]
        assert json.loads(message["Body"])["detail"]["event"]["id"] == "evt_1"


def test_the_browser_runs_may_look_for_a_resources_audit_entry_when_they_take_an_announcement_over():
    """An agent run's end is announced; a worker that takes over an announcement left pending reads
    the run's audit entries (gsi3) before writing one. The deployment proof does not reach it."""
    browser = statements(load_template()["Resources"], "BrowserRole")
    assert allows(browser, "dynamodb:Query", {"Fn::Sub": "${Table.Arn}/index/gsi3"})


# --- sign-in: the user pool (docs/sign-in.md) ------------------------------------------------------

POOL_ADMIN_ACTIONS = ("cognito-idp:AdminCreateUser", "cognito-idp:AdminGetUser", "cognito-idp:AdminDisableUser",
                      "cognito-idp:AdminEnableUser", "cognito-idp:AdminUserGlobalSignOut", "cognito-idp:ListUsers")


def test_only_the_api_may_manage_the_pools_people_and_no_role_may_sign_them_in():
    resources = load_template()["Resources"]
    pool = {"Fn::GetAtt": ["UserPool", "Arn"]}
    api = statements(resources, "ApiRole")
    for action in POOL_ADMIN_ACTIONS:
        assert allows(api, action, pool), action
    roles = [name for name, r in resources.items() if r["Type"] == "AWS::IAM::Role"]
    for role in roles:
        granted = [a for s in statements(resources, role)
                   for a in (s["Action"] if isinstance(s["Action"], list) else [s["Action"]])]
        cognito = {a for a in granted if a.startswith("cognito-idp:")}
        assert cognito == (set(POOL_ADMIN_ACTIONS) if role == "ApiRole" else set()), role


def test_the_pool_is_invitation_only_by_email_and_its_client_keeps_no_secret():
    resources = load_template()["Resources"]
    pool, client = resources["UserPool"]["Properties"], resources["UserPoolClient"]["Properties"]
    assert pool["AdminCreateUserConfig"]["AllowAdminCreateUserOnly"] is True and pool["UsernameAttributes"] == ["email"]
    assert "{####}" in pool["AdminCreateUserConfig"]["InviteMessageTemplate"]["EmailMessage"]["Fn::Sub"]
    assert pool["Policies"]["PasswordPolicy"]["MinimumLength"] >= 12
    assert resources["UserPool"]["DeletionPolicy"] == "Retain"  # with the table, whose users name its people
    assert client["GenerateSecret"] is False
    assert "email_verified" in client["ReadAttributes"]  # the API reads a token's email only when verified


FEDERATED = {"SignInCallbackUrls": "https://app.acme.test/cb,http://localhost:3000/cb", "SignInDomainPrefix": "acme",
             "SamlMetadataUrl": "https://idp.acme.test/metadata", "OidcIssuer": "https://login.acme.test",
             "OidcClientId": "recon", "OidcClientSecretName": "acme/recon-oidc"}


def test_federation_and_the_oauth_flow_exist_only_when_given_and_the_client_follows_them():
    template = load_template()
    resources = template["Resources"]
    plain, federated = Resolver(template, {}, "eu-west-1"), Resolver(template, FEDERATED, "eu-west-1")
    plain.physical_ids["UserPool"] = federated.physical_ids["UserPool"] = "eu-west-1_Pool"  # as once made
    optional = ("UserPoolDomain", "SamlIdentityProvider", "OidcIdentityProvider")
    assert not any(plain.condition(resources[r]["Condition"]) for r in optional)
    assert all(federated.condition(resources[r]["Condition"]) for r in optional)
    client = resources["UserPoolClient"]["Properties"]
    assert plain.resolve(client)["SupportedIdentityProviders"] == ["COGNITO"]
    assert "CallbackURLs" not in plain.resolve(client) and plain.resolve(client)["AllowedOAuthFlowsUserPoolClient"] is False
    given = federated.resolve(client)
    assert given["SupportedIdentityProviders"] == ["COGNITO", "CompanySAML", "CompanyOIDC"]
    assert given["CallbackURLs"] == ["https://app.acme.test/cb", "http://localhost:3000/cb"]
    assert given["AllowedOAuthFlows"] == ["code"]
    # The OIDC client's secret is read from Secrets Manager by CloudFormation: never a parameter's value.
    secret = federated.resolve(resources["OidcIdentityProvider"]["Properties"]["ProviderDetails"]["client_secret"])
    assert secret == "{{resolve:secretsmanager:acme/recon-oidc:SecretString}}"


SECRET_LIKE = re.compile(r"secret|password|token|credential|private", re.IGNORECASE)


def test_no_parameter_carries_a_secret_and_the_oidc_secret_is_named_only_in_a_dynamic_reference():
    """A parameter's value is shown by DescribeStacks to anyone who may read the stack: a secret is
    named there, and CloudFormation reads its value from Secrets Manager as it makes the resource."""
    template = load_template()
    assert [name for name in template["Parameters"] if SECRET_LIKE.search(name)] == ["OidcClientSecretName"]
    uses = [text for text in _strings(template["Resources"]) if "OidcClientSecretName" in text]
    assert uses == ["{{resolve:secretsmanager:${OidcClientSecretName}:SecretString}}"]
    assert "OidcClientSecretName" not in str(template["Outputs"])


def _strings(node):
    """Every string of a template's tree, a Ref's target included."""
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for value in node.values():
            yield from _strings(value)
    elif isinstance(node, list):
        for value in node:
            yield from _strings(value)


def test_the_local_provisioner_makes_the_pool_and_client_once_and_federation_when_given():
    from moto import mock_aws

    from chalicelib.adapters.aws import AwsClients
    from chalicelib.settings import Settings

    template = load_template()
    template["Resources"] = {k: v for k, v in template["Resources"].items() if v["Type"].startswith("AWS::Cognito::")}
    template["Outputs"] = {k: v for k, v in template["Outputs"].items() if k in ("UserPoolId", "UserPoolClientId")}
    with mock_aws():
        clients = AwsClients(Settings(region="us-east-1", local_mode=True))
        cognito = clients.client("cognito-idp")
        first = provision(clients, {"Stage": "dev"}, "us-east-1", template=template, log=lambda _: None)
        assert provision(clients, {"Stage": "dev"}, "us-east-1", template=template, log=lambda _: None) == first
        assert [p["Id"] for p in cognito.list_user_pools(MaxResults=60)["UserPools"]] == [first["UserPoolId"]]
        client = cognito.describe_user_pool_client(UserPoolId=first["UserPoolId"],
                                                   ClientId=first["UserPoolClientId"])["UserPoolClient"]
        assert client["ClientName"] == "recon-dev-api" and "ClientSecret" not in client
        qa = provision(clients, {"Stage": "qa", **FEDERATED}, "us-east-1", template=template, log=lambda _: None)
        providers = cognito.list_identity_providers(UserPoolId=qa["UserPoolId"])["Providers"]
        assert sorted(p["ProviderName"] for p in providers) == ["CompanyOIDC", "CompanySAML"]
        assert cognito.describe_user_pool_domain(Domain="acme")["DomainDescription"]["UserPoolId"] == qa["UserPoolId"]
