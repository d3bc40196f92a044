"""The operator's command line pointed at a deployed stage (`--stage`): it takes the names that
stage's functions run with from its infrastructure stack's outputs, so a browser agent's login
lands under that stage's secrets prefix and its schedule in that stage's group."""
from __future__ import annotations

import json

import boto3

from chalicelib.cli import deployed_settings
from chalicelib.settings import Settings
from infra.deploy import _placeholder_outputs


def _deployed_stage(**outputs: str) -> None:
    outputs = {**_placeholder_outputs(), **outputs}
    template = {"Resources": {"Anything": {"Type": "AWS::SQS::Queue"}},
                "Outputs": {name: {"Value": value} for name, value in outputs.items()}}
    region = Settings().region
    boto3.client("cloudformation", region_name=region).create_stack(StackName="recon-prod-infra",
                                                                     TemplateBody=json.dumps(template))


def test_a_stage_named_on_the_command_line_gives_its_own_names(moto_aws):
    _deployed_stage(TableName="recon-prod-table", SecretsPrefix="recon-prod", ScheduleGroupName="recon-prod",
                    BrowserRunStateMachineArn="arn:aws:states:::prod-browser")

    settings = deployed_settings(Settings(), "prod")

    assert (settings.stage, settings.table_name, settings.secrets_prefix, settings.schedule_group_name) == (
        "prod", "recon-prod-table", "recon-prod", "recon-prod")
    assert settings.browser_run_state_machine == "arn:aws:states:::prod-browser"


def test_the_stages_table_client_is_its_functions_not_this_machines(moto_aws):
    """`DYNAMODB_CLIENT` says how the stage's functions reach DynamoDB; the operator's machine (behind
    a proxy, say) keeps its own way."""
    _deployed_stage(TableName="recon-prod-table", DynamoDbClient="wire")

    settings = deployed_settings(Settings(dynamodb_client="botocore"), "prod")

    assert (settings.table_name, settings.dynamodb_client) == ("recon-prod-table", "botocore")
