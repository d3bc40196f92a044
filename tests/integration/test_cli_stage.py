"""The operator's command line pointed at a deployed stage (`--stage`): it takes the names that
stage's functions run with from its infrastructure stack's outputs, so a browser agent's login
lands under that stage's secrets prefix and its schedule in that stage's group."""
from __future__ import annotations

import json

import boto3

from chalicelib.cli import deployed_settings
from chalicelib.settings import Settings
from infra.deploy import _placeholder_outputs


def test_a_stage_named_on_the_command_line_gives_its_own_names(moto_aws):
    outputs = {**_placeholder_outputs(), "TableName": "recon-prod-table", "SecretsPrefix": "recon-prod",
               "ScheduleGroupName": "recon-prod", "BrowserRunStateMachineArn": "arn:aws:states:::prod-browser"}
    template = {"Resources": {"Anything": {"Type": "AWS::SQS::Queue"}},
                "Outputs": {name: {"Value": value} for name, value in outputs.items()}}
    region = Settings().region
    boto3.client("cloudformation", region_name=region).create_stack(StackName="recon-prod-infra",
                                                                     TemplateBody=json.dumps(template))

    settings = deployed_settings(Settings(), "prod")

    assert (settings.stage, settings.table_name, settings.secrets_prefix, settings.schedule_group_name) == (
        "prod", "recon-prod-table", "recon-prod", "recon-prod")
    assert settings.browser_run_state_machine == "arn:aws:states:::prod-browser"
