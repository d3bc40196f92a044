"""`make deploy`'s parameters (infra/deploy.py): what a stage keeps from its last deploy, the checks
that refuse, before anything is created, a mail sender SES would refuse and a model Bedrock would
refuse, and the import of log groups that functions made before the stack declared them.

moto answers SES (its identities, verified at once) and CloudFormation's reads; it has no Bedrock
GetFoundationModel, GetFoundationModelAvailability or GetInferenceProfile, nor SES v2 GetAccount, and
it takes an IMPORT change set for a CREATE: Bedrock answers here through botocore's Stubber with the
shapes of AWS's API reference, and the import is checked by what is asked of CloudFormation."""
from __future__ import annotations

import json
import re
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber
from moto import mock_aws

from chalicelib.local.provision import load_template
from infra import deploy

REGION = "us-east-1"
NOVA = "amazon.nova-pro-v1:0"


@pytest.fixture
def aws():
    with mock_aws():
        yield boto3.session.Session(region_name=REGION)


# --- the stage's parameters -------------------------------------------------------------------

def _infra_stack(cfn, stage: str, **parameters: str) -> None:
    template = {"Parameters": {name: {"Type": "String"} for name in parameters},
                "Resources": {"Queue": {"Type": "AWS::SQS::Queue", "Properties": {"QueueName": f"{stage}-q"}}}}
    cfn.create_stack(StackName=deploy.stack_names(stage)["infra"], TemplateBody=json.dumps(template),
                     Parameters=[{"ParameterKey": k, "ParameterValue": v} for k, v in parameters.items()])


# Sign-in's parameters, none given: no web app, no hosted domain, no federation.
SIGN_IN_UNSET = {"SignInCallbackUrls": "", "SignInLogoutUrls": "", "SignInDomainPrefix": "", "SamlMetadataUrl": "",
                 "OidcIssuer": "", "OidcClientId": "", "OidcClientSecretName": ""}
# And no web app origin given (the stage's API's, once it exists: `deploy.web_app_origin`), and the
# table's requests sent as the template's default says (`auto`).
UNSET = {**SIGN_IN_UNSET, "WebAppOrigin": "", "DynamoDbClient": "auto"}


def test_a_new_stage_takes_the_templates_defaults_and_what_is_given(aws):
    cfn = aws.client("cloudformation")
    assert deploy.stage_parameters(cfn, "fresh", deploy.StageOptions()) == {
        "MailFrom": "", "ModelId": NOVA, "AlarmEmail": "", "LogRetentionDays": "30", **UNSET}
    given = deploy.StageOptions(mail_from="agents@acme.test", log_retention_days=90)
    assert deploy.stage_parameters(cfn, "fresh", given) == {
        "MailFrom": "agents@acme.test", "ModelId": NOVA, "AlarmEmail": "", "LogRetentionDays": "90", **UNSET}


def test_a_deployed_stage_keeps_its_last_values_unless_given_and_an_empty_value_clears_one(aws):
    cfn = aws.client("cloudformation")
    _infra_stack(cfn, "prod", MailFrom="agents@acme.test", ModelId="us.amazon.nova-pro-v1:0",
                 AlarmEmail="ops@acme.test", LogRetentionDays="90", SignInDomainPrefix="acme-recon")
    assert deploy.stage_parameters(cfn, "prod", deploy.StageOptions()) == {
        **UNSET, "MailFrom": "agents@acme.test", "ModelId": "us.amazon.nova-pro-v1:0",
        "AlarmEmail": "ops@acme.test", "LogRetentionDays": "90", "SignInDomainPrefix": "acme-recon"}
    changed = deploy.StageOptions(alarm_email="", model_id=NOVA)  # `make deploy ALARM_EMAIL= MODEL_ID=...`
    assert deploy.stage_parameters(cfn, "prod", changed) == {
        **UNSET, "MailFrom": "agents@acme.test", "ModelId": NOVA, "AlarmEmail": "", "LogRetentionDays": "90",
        "SignInDomainPrefix": "acme-recon"}


def test_the_table_client_given_once_is_kept_by_later_deploys_until_another_is_given(aws):
    cfn = aws.client("cloudformation")
    botocore = deploy.StageOptions(dynamodb_client="botocore")  # `make deploy DYNAMODB_CLIENT=botocore`
    assert deploy.stage_parameters(cfn, "prod", botocore)["DynamoDbClient"] == "botocore"
    _infra_stack(cfn, "prod", MailFrom="agents@acme.test", DynamoDbClient="botocore")  # as that deploy left it
    assert deploy.stage_parameters(cfn, "prod", deploy.StageOptions())["DynamoDbClient"] == "botocore"
    back = deploy.StageOptions(dynamodb_client="auto")
    assert deploy.stage_parameters(cfn, "prod", back)["DynamoDbClient"] == "auto"


@pytest.mark.parametrize(("given", "said"), [
    ({"SamlMetadataUrl": "https://idp.acme.test/metadata"}, "SAML_METADATA_URL need SIGN_IN_DOMAIN"),
    ({"OidcIssuer": "https://login.acme.test", "SignInDomainPrefix": "acme", "SignInCallbackUrls": "https://app/cb"},
     "OIDC_ISSUER needs OIDC_CLIENT_ID and OIDC_CLIENT_SECRET"),
    ({"OidcIssuer": "https://login.acme.test", "SignInDomainPrefix": "acme", "SignInCallbackUrls": "https://app/cb",
      "OidcClientId": "recon", "OidcClientSecretName": "acme/recon-oidc"}, "OIDC_CLIENT_SECRET=acme/recon-oidc: no such"),
])
def test_federation_without_what_it_needs_is_refused_before_deploying(aws, given, said):
    with pytest.raises(deploy.DeployRefused, match=said):
        deploy.check_sign_in(aws.client, {**SIGN_IN_UNSET, **given})


def test_federation_to_an_oidc_provider_whose_secret_exists_is_taken(aws):
    aws.client("secretsmanager").create_secret(Name="acme/recon-oidc", SecretString="client-secret")
    deploy.check_sign_in(aws.client, {**SIGN_IN_UNSET, "OidcIssuer": "https://login.acme.test", "OidcClientId": "recon",
                                   "OidcClientSecretName": "acme/recon-oidc", "SignInDomainPrefix": "acme",
                                   "SignInCallbackUrls": "https://app.acme.test/callback"})


# --- the web app's origin: the pages that may upload to the data bucket --------------------------
# The two updates of a stage's first deploy, against moto's server, are in tests/deploy/test_make_deploy.py.

API = "https://a1b2c3d4e5.execute-api.us-east-1.amazonaws.com"


def _chalice_record(deployed_dir, stage: str, api_id: str | None) -> None:
    """Chalice's record of a deployed app (`.chalice/deployed/<stage>.json`), as `chalice deploy` writes it."""
    resources = [{"name": "api_handler", "resource_type": "lambda_function",
                  "lambda_arn": f"arn:aws:lambda:{REGION}:123456789012:function:recon-{stage}"}]
    if api_id:
        resources.append({"name": "rest_api", "resource_type": "rest_api", "rest_api_id": api_id,
                          "rest_api_url": f"https://{api_id}.execute-api.{REGION}.amazonaws.com/api/"})
    deployed_dir.mkdir(parents=True, exist_ok=True)
    (deployed_dir / f"{stage}.json").write_text(json.dumps({"resources": resources, "schema_version": "2.0",
                                                             "backend": "api"}))


def test_the_apis_origin_comes_from_chalices_record_and_is_unknown_before_chalice_made_the_api(tmp_path):
    assert deploy.api_origin("prod", tmp_path) is None  # a new stage: no record
    _chalice_record(tmp_path, "prod", None)
    assert deploy.api_origin("prod", tmp_path) is None  # a record without an API
    _chalice_record(tmp_path, "prod", "a1b2c3d4e5")
    assert deploy.api_origin("prod", tmp_path) == API
    assert deploy.rest_api_url("prod", tmp_path) == f"{API}/api/"


@pytest.mark.parametrize(("configured", "api", "origin"), [
    ("", None, ""),  # a stage's first stack: no browser origin until its API exists
    ("", API, API),  # then the API's, and on every later deploy (read from the app's record first)
    (API, API, API),
    ("https://zzzzzzzzzz.execute-api.us-east-1.amazonaws.com", API, API),  # never another API's
    ("https://recon.acme.test", API, f"https://recon.acme.test,{API}"),  # WEB_APP_ORIGIN, given or kept
    ("https://recon.acme.test", None, "https://recon.acme.test"),
    (f"https://recon.acme.test,{API}", API, f"https://recon.acme.test,{API}"),
    # Another API's origin in a list is dropped, and a recreated API's replaces the old one's.
    ("https://recon.acme.test,https://zzzzzzzzzz.execute-api.us-east-1.amazonaws.com", API,
     f"https://recon.acme.test,{API}"),
])
def test_the_web_apps_origins_are_the_operators_custom_domains_and_the_stages_own_api(configured, api, origin):
    assert deploy.web_app_origin(configured, api) == origin


# --- the user pool a destroy kept -------------------------------------------------------------

def _stack_holding_pool(cfn, stage: str, pool_id: str) -> None:
    template = {"Resources": {"Queue": {"Type": "AWS::SQS::Queue", "Properties": {"QueueName": f"{stage}-q"}}},
                "Outputs": {"UserPoolId": {"Value": pool_id}}}
    cfn.create_stack(StackName=deploy.stack_names(stage)["infra"], TemplateBody=json.dumps(template))


def test_a_pool_a_destroy_kept_outside_the_stack_is_refused_with_what_to_do(aws):
    kept = aws.client("cognito-idp").create_user_pool(PoolName="recon-prod")["UserPool"]["Id"]
    with pytest.raises(deploy.DeployRefused) as refused:
        deploy.check_user_pool(aws.client, "prod")
    said = str(refused.value)
    assert f"user pool recon-prod ({kept}) exists outside the stack recon-prod-infra" in said
    assert "docs/upgrades.md" in said and f"delete-user-pool --user-pool-id {kept}" in said


def test_a_second_pool_of_the_stages_name_beside_the_stacks_own_is_refused(aws):
    cognito = aws.client("cognito-idp")
    held = cognito.create_user_pool(PoolName="recon-prod")["UserPool"]["Id"]
    _stack_holding_pool(aws.client("cloudformation"), "prod", held)
    deploy.check_user_pool(aws.client, "prod")  # its own pool: taken
    stray = cognito.create_user_pool(PoolName="recon-prod")["UserPool"]["Id"]
    with pytest.raises(deploy.DeployRefused, match=f"recon-prod \\({stray}\\) exists outside"):
        deploy.check_user_pool(aws.client, "prod")


def test_a_stage_with_no_pool_of_its_name_or_another_stages_pool_is_taken(aws):
    aws.client("cognito-idp").create_user_pool(PoolName="recon-staging")
    aws.client("cognito-idp").create_user_pool(PoolName="recon-prod-old")
    deploy.check_user_pool(aws.client, "prod")


def test_deploy_refuses_a_kept_pool_before_creating_anything(aws):
    aws.client("ses").verify_email_identity(EmailAddress="agents@acme.test")
    aws.client("cognito-idp").create_user_pool(PoolName="recon-prod")
    with pytest.raises(deploy.DeployRefused, match="exists outside the stack"):
        deploy.deploy("prod", log=lambda _: None, options=deploy.StageOptions(mail_from="agents@acme.test"),
                      session=aws)
    assert aws.client("cloudformation").list_stacks()["StackSummaries"] == []


@pytest.mark.parametrize(("parameter", "value", "said"), [
    ("LogRetentionDays", "31", "LOG_RETENTION_DAYS=31 is not one of 1, 3, 5, 7, 14, 30,"),
    ("MailFrom", "agents at acme", "MAIL_FROM='agents at acme' is not valid"),
    ("DynamoDbClient", "boto3", "DYNAMODB_CLIENT=boto3 is not one of auto, wire, botocore"),
    ("AlarmEmail", "Ops <ops@acme.test>", "ALARM_EMAIL='Ops <ops@acme.test>' is not valid"),
    ("WebAppOrigin", "https://*.execute-api.us-east-1.amazonaws.com",
     "WEB_APP_ORIGIN='https://*.execute-api.us-east-1.amazonaws.com' is not valid"),
    ("WebAppOrigin", "https://recon.acme.test/app", "WEB_APP_ORIGIN='https://recon.acme.test/app' is not valid"),
])
def test_a_value_the_template_would_refuse_is_refused_first_naming_its_variable(parameter, value, said):
    values = {"MailFrom": "agents@acme.test", "ModelId": NOVA, "AlarmEmail": "", "LogRetentionDays": "30"}
    with pytest.raises(deploy.DeployRefused, match=re.escape(said)):
        deploy.check_against_template({**values, parameter: value})


# --- the mail sender --------------------------------------------------------------------------

def test_no_sender_is_refused_with_what_to_do(aws):
    with pytest.raises(deploy.DeployRefused, match="MAIL_FROM is not set") as refused:
        deploy.check_mail_sender(aws.client("ses"), "", REGION)
    assert "aws ses verify-email-identity" in str(refused.value) and REGION in str(refused.value)


def test_an_unverified_sender_is_refused_naming_the_parameter_and_how_to_verify_it(aws):
    ses = aws.client("ses")
    ses.verify_email_identity(EmailAddress="someone.else@acme.test")
    with pytest.raises(deploy.DeployRefused) as refused:
        deploy.check_mail_sender(ses, "Recon agents <agents@acme.test>", REGION)
    said = str(refused.value)
    assert said.startswith("MAIL_FROM=Recon agents <agents@acme.test>: SES sends only from a verified identity")
    assert "neither agents@acme.test nor acme.test is verified in us-east-1" in said
    assert "aws ses verify-email-identity --email-address agents@acme.test" in said


def test_a_sender_whose_address_or_domain_is_verified_is_taken(aws):
    ses = aws.client("ses")
    ses.verify_email_identity(EmailAddress="agents@acme.test")
    deploy.check_mail_sender(ses, "agents@acme.test", REGION)
    deploy.check_mail_sender(ses, "Recon <agents@acme.test>", REGION)
    ses.verify_domain_identity(Domain="globex.test")
    deploy.check_mail_sender(ses, "anyone@globex.test", REGION)


# --- the model ----------------------------------------------------------------------------------

def _model(model_id: str, inference: list[str]) -> dict[str, Any]:
    return {"modelDetails": {"modelArn": f"arn:aws:bedrock:{REGION}::foundation-model/{model_id}", "modelId": model_id,
                             "inferenceTypesSupported": inference, "modelLifecycle": {"status": "ACTIVE"}}}


def _availability(model_id: str, entitled: bool = True) -> dict[str, Any]:
    return {"modelId": model_id, "agreementAvailability": {"status": "AVAILABLE" if entitled else "NOT_AVAILABLE"},
            "authorizationStatus": "AUTHORIZED", "entitlementAvailability": "AVAILABLE" if entitled else "NOT_AVAILABLE",
            "regionAvailability": "AVAILABLE"}


@pytest.fixture
def bedrock():
    client = boto3.client("bedrock", region_name=REGION)
    with Stubber(client) as stubber:
        yield client, stubber
        stubber.assert_no_pending_responses()


def test_moto_still_lacks_the_bedrock_calls_the_check_makes(aws):
    """Why Bedrock is stubbed here: should moto answer these one day, this says so."""
    client = aws.client("bedrock")
    with pytest.raises(NotImplementedError):
        client.get_foundation_model(modelIdentifier=NOVA)


def test_a_model_served_on_demand_and_enabled_is_taken(bedrock):
    client, stubber = bedrock
    stubber.add_response("get_foundation_model", _model(NOVA, ["ON_DEMAND"]), {"modelIdentifier": NOVA})
    stubber.add_response("get_foundation_model_availability", _availability(NOVA), {"modelId": NOVA})
    deploy.check_model(client, NOVA, REGION)


def test_a_model_this_account_has_no_access_to_is_refused_with_where_to_enable_it(bedrock):
    client, stubber = bedrock
    model = "anthropic.claude-3-haiku-20240307-v1:0"
    stubber.add_response("get_foundation_model", _model(model, ["ON_DEMAND"]), {"modelIdentifier": model})
    stubber.add_response("get_foundation_model_availability", _availability(model, entitled=False), {"modelId": model})
    with pytest.raises(deploy.DeployRefused) as refused:
        deploy.check_model(client, model, REGION)
    said = str(refused.value)
    assert said.startswith(f"MODEL_ID={model} is not enabled in us-east-1: this account has no access to it")
    assert "Bedrock console" in said


def test_an_unknown_model_is_refused_with_how_to_list_the_models(bedrock):
    client, stubber = bedrock
    stubber.add_client_error("get_foundation_model", "ValidationException", "The provided model identifier is invalid.")
    stubber.add_client_error("get_inference_profile", "ResourceNotFoundException", "Inference profile not found")
    with pytest.raises(deploy.DeployRefused) as refused:
        deploy.check_model(client, "amazon.nova-prime-v9:0", REGION)
    said = str(refused.value)
    assert said.startswith("MODEL_ID=amazon.nova-prime-v9:0: Bedrock has no such model or inference profile in us-east-1")
    assert "aws bedrock list-foundation-models" in said and "aws bedrock list-inference-profiles" in said


def test_a_model_served_only_through_an_inference_profile_is_refused_naming_the_profile_to_pass(bedrock):
    client, stubber = bedrock
    model = "anthropic.claude-sonnet-4-20250514-v1:0"
    stubber.add_response("get_foundation_model", _model(model, ["INFERENCE_PROFILE"]), {"modelIdentifier": model})
    with pytest.raises(deploy.DeployRefused, match=f"only through an inference profile.*us.{model}"):
        deploy.check_model(client, model, REGION)


def test_an_inference_profile_is_checked_by_the_model_it_routes_to_here(bedrock):
    client, stubber = bedrock
    profile = f"us.{NOVA}"
    stubber.add_client_error("get_foundation_model", "ValidationException", "The provided model identifier is invalid.")
    stubber.add_response("get_inference_profile", {
        "inferenceProfileName": "US Nova Pro", "inferenceProfileArn":
            f"arn:aws:bedrock:{REGION}:123456789012:inference-profile/{profile}",
        "inferenceProfileId": profile, "status": "ACTIVE", "type": "SYSTEM_DEFINED",
        "models": [{"modelArn": f"arn:aws:bedrock:us-west-2::foundation-model/{NOVA}"},
                   {"modelArn": f"arn:aws:bedrock:{REGION}::foundation-model/{NOVA}"}]},
        {"inferenceProfileIdentifier": profile})
    stubber.add_response("get_foundation_model_availability", _availability(NOVA, entitled=False), {"modelId": NOVA})
    with pytest.raises(deploy.DeployRefused, match=rf"MODEL_ID={profile} \({NOVA}\) is not enabled"):
        deploy.check_model(client, profile, REGION)


# --- all of them, before anything is created ----------------------------------------------------

def test_deploy_refuses_an_unverified_sender_before_creating_anything(aws):
    with pytest.raises(deploy.DeployRefused, match="MAIL_FROM=agents@acme.test"):
        deploy.deploy("prod", log=lambda _: None, options=deploy.StageOptions(mail_from="agents@acme.test"),
                      session=aws)
    assert aws.client("cloudformation").list_stacks()["StackSummaries"] == []
    assert aws.client("s3").list_buckets()["Buckets"] == []


def test_make_deploy_says_what_is_missing_and_fails(aws, capsys):
    assert deploy.main(["deploy", "--stage", "prod"], session=aws) == 1
    assert capsys.readouterr().err.startswith("make deploy: MAIL_FROM is not set")


def test_the_checks_take_a_verified_sender_and_an_enabled_model_and_note_the_ses_sandbox(aws, bedrock):
    client, stubber = bedrock
    stubber.add_response("get_foundation_model", _model(NOVA, ["ON_DEMAND"]), {"modelIdentifier": NOVA})
    stubber.add_response("get_foundation_model_availability", _availability(NOVA), {"modelId": NOVA})
    sesv2 = boto3.client("sesv2", region_name=REGION)
    aws.client("ses").verify_email_identity(EmailAddress="agents@acme.test")
    clients = {"ses": aws.client("ses"), "bedrock": client, "sesv2": sesv2,
               "cognito-idp": aws.client("cognito-idp"), "cloudformation": aws.client("cloudformation")}
    said: list[str] = []
    with Stubber(sesv2) as sandbox:
        sandbox.add_response("get_account", {"ProductionAccessEnabled": False, "SendingEnabled": True})
        deploy.check_parameters(clients.__getitem__, REGION, {
            "MailFrom": "agents@acme.test", "ModelId": NOVA, "AlarmEmail": "", "LogRetentionDays": "30"}, said.append,
            stage="prod")
    assert said == ["note: SES is in its sandbox in us-east-1: agents' mail reaches only verified addresses (at most "
                    "200 messages a day) until AWS grants production access (README, 'Mail and models')"]


# --- log groups made before the stack declared them ----------------------------------------------

class RecordingImports:
    """moto's CloudFormation for reads; the import's calls recorded (moto would create, not import)."""

    def __init__(self, cfn) -> None:
        self._cfn = cfn
        self.calls: list[tuple[str, dict]] = []

    def __getattr__(self, name: str):
        return getattr(self._cfn, name)

    def create_change_set(self, **arguments):
        self.calls.append(("create_change_set", arguments))

    def execute_change_set(self, **arguments):
        self.calls.append(("execute_change_set", arguments))

    def get_waiter(self, name: str):
        calls = self.calls

        class Waiter:
            def wait(self, **arguments):
                calls.append((f"wait:{name}", arguments))
        return Waiter()


INFRA_PARAMETERS = {"Stage": "prod", "MailFrom": "agents@acme.test"}


def test_log_groups_functions_made_before_the_stack_declared_them_are_imported_with_the_stack_unchanged(aws):
    cfn, logs = aws.client("cloudformation"), aws.client("logs")
    # A stage deployed before its template declared log groups: its functions made theirs.
    _infra_stack(cfn, "prod", MailFrom="agents@acme.test", LogRetentionDays="30")
    stack = deploy.stack_names("prod")["infra"]
    before = cfn.get_template(StackName=stack)["TemplateBody"]
    for name in ("/aws/lambda/recon-prod-bulk_worker", "/aws/lambda/recon-prod-sweep_stuck_jobs",
                 "/aws/lambda/recon-prod-bulk_worker-old", "/aws/lambda/recon-staging-bulk_worker"):
        logs.create_log_group(logGroupName=name)
    recording = RecordingImports(cfn)
    said: list[str] = []
    adopted = deploy.adopt_log_groups(recording, logs, stack, load_template(), INFRA_PARAMETERS, REGION, said.append)
    assert adopted == ["/aws/lambda/recon-prod-bulk_worker", "/aws/lambda/recon-prod-sweep_stuck_jobs"]
    [(create, arguments), (wait_create, _), (execute, _), (wait_import, _)] = recording.calls
    assert (create, wait_create, execute, wait_import) == (
        "create_change_set", "wait:change_set_create_complete", "execute_change_set", "wait:stack_import_complete")
    assert arguments["ChangeSetType"] == "IMPORT" and arguments["StackName"] == stack
    assert arguments["ResourcesToImport"] == [
        {"ResourceType": "AWS::Logs::LogGroup", "LogicalResourceId": "BulkWorkerLogGroup",
         "ResourceIdentifier": {"LogGroupName": "/aws/lambda/recon-prod-bulk_worker"}},
        {"ResourceType": "AWS::Logs::LogGroup", "LogicalResourceId": "SweepStuckJobsLogGroup",
         "ResourceIdentifier": {"LogGroupName": "/aws/lambda/recon-prod-sweep_stuck_jobs"}}]
    # The stack's own template and parameters, with the groups added (each with a DeletionPolicy, as imports need).
    imported = json.loads(arguments["TemplateBody"])
    added = {k: v for k, v in imported["Resources"].items() if k not in before["Resources"]}
    assert {k: v for k, v in imported.items() if k != "Resources"} == {k: v for k, v in before.items() if k != "Resources"}
    assert {k: imported["Resources"][k] for k in before["Resources"]} == before["Resources"]
    assert added == {
        "BulkWorkerLogGroup": {"Type": "AWS::Logs::LogGroup", "DeletionPolicy": "Delete", "UpdateReplacePolicy": "Delete",
                               "Properties": {"LogGroupName": "/aws/lambda/recon-prod-bulk_worker"}},
        "SweepStuckJobsLogGroup": {"Type": "AWS::Logs::LogGroup", "DeletionPolicy": "Delete",
                                   "UpdateReplacePolicy": "Delete",
                                   "Properties": {"LogGroupName": "/aws/lambda/recon-prod-sweep_stuck_jobs"}}}
    assert arguments["Parameters"] == [{"ParameterKey": "MailFrom", "UsePreviousValue": True},
                                       {"ParameterKey": "LogRetentionDays", "UsePreviousValue": True}]
    assert said == [f"stack {stack}: imported 2 log groups made before it declared them "
                    "(/aws/lambda/recon-prod-bulk_worker, /aws/lambda/recon-prod-sweep_stuck_jobs)"]


def test_a_stage_whose_stack_does_not_exist_yet_imports_its_groups_into_a_new_one(aws):
    cfn, logs = aws.client("cloudformation"), aws.client("logs")
    logs.create_log_group(logGroupName="/aws/lambda/recon-prod")  # the API's, from a stage destroyed before
    recording = RecordingImports(cfn)
    stack = deploy.stack_names("prod")["infra"]
    deploy.adopt_log_groups(recording, logs, stack, load_template(), INFRA_PARAMETERS, REGION, lambda _: None)
    arguments = recording.calls[0][1]
    assert json.loads(arguments["TemplateBody"]) == {"AWSTemplateFormatVersion": "2010-09-09", "Resources": {
        "ApiHandlerLogGroup": {"Type": "AWS::Logs::LogGroup", "DeletionPolicy": "Delete", "UpdateReplacePolicy": "Delete",
                               "Properties": {"LogGroupName": "/aws/lambda/recon-prod"}}}}
    assert arguments["Parameters"] == []


def test_nothing_is_imported_when_no_declared_group_exists_outside_the_stack(aws):
    cfn, logs = aws.client("cloudformation"), aws.client("logs")
    logs.create_log_group(logGroupName="/aws/lambda/recon-prod-bulk_worker")
    template = load_template()
    stack = deploy.stack_names("prod")["infra"]
    # The group is the stack's already (a deploy after the import, or after the stack made it).
    cfn.create_stack(StackName=stack, TemplateBody=json.dumps({"Resources": {
        "BulkWorkerLogGroup": {"Type": "AWS::Logs::LogGroup", "DeletionPolicy": "Delete",
                               "Properties": {"LogGroupName": "/aws/lambda/recon-prod-bulk_worker-x"}}}}))
    recording = RecordingImports(cfn)
    assert deploy.adopt_log_groups(recording, logs, stack, template, INFRA_PARAMETERS, REGION, lambda _: None) == []
    assert recording.calls == []
