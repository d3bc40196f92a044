"""Operations in infra/template.yaml and infra/workflows.yaml, read as CloudFormation gets them:
every function, dead-letter queue, work queue and state machine has its alarm on the alarm topic,
every function's log group keeps the retention the deploy gives, the state machines log their
errors, and the dashboard shows all of it. Names are resolved as on AWS (Resolver), for a stage
`prod`, and compared with the names the deploy gives (Chalice's, infra/functions.py's, app.py's)."""
from __future__ import annotations

import json

import pytest

from chalicelib.local.provision import WORKFLOWS_TEMPLATE_PATH, Resolver, function_of_parameter, load_template
from infra import deploy
from infra.functions import FUNCTIONS
from tests.support.chalice_names import chalice_function_names

STAGE = "prod"
REGION = "eu-west-1"
ACCOUNT = "123456789012"  # the Resolver's account
PARAMETERS = {"Stage": STAGE, "BrowserImageUri": f"{ACCOUNT}.dkr.ecr.{REGION}.amazonaws.com/recon-prod-browser:abc",
              "EngineLayerKey": "layers/engine.zip"}
# The functions the deploy makes, by Chalice's names (the API's is the stage's own name) and the
# browser worker, a function of the infrastructure stack.
FUNCTION_NAMES = {name: f"recon-{STAGE}" if name == "api_handler" else f"recon-{STAGE}-{name}"
                  for name in [*FUNCTIONS, "browser_run_attempt"]}


@pytest.fixture(scope="module")
def template():
    return load_template()


@pytest.fixture(scope="module")
def resolver(template):
    return Resolver(template, PARAMETERS, REGION)


def _of_type(template, resolver, kind: str) -> dict[str, dict]:
    """Resources of a type that this stage's conditions keep, their properties resolved."""
    return {logical_id: resolver.resolve(r.get("Properties", {})) for logical_id, r in template["Resources"].items()
            if r["Type"] == kind and resolver.condition(r.get("Condition"))}


def _alarms(template, resolver, metric: str) -> dict[str, dict]:
    """Alarms on `metric`, by the value of their one dimension."""
    found = {}
    for props in _of_type(template, resolver, "AWS::CloudWatch::Alarm").values():
        if props["MetricName"] == metric:
            [dimension, *_] = props["Dimensions"]
            found[dimension["Value"]] = props
    return found


def _queues(template) -> tuple[list[str], list[str]]:
    """(work queues: those with a dead-letter queue, their dead-letter queues)."""
    resources = template["Resources"]
    work = [q for q, r in resources.items() if r["Type"] == "AWS::SQS::Queue" and "RedrivePolicy" in r["Properties"]]
    return work, [resources[q]["Properties"]["RedrivePolicy"]["deadLetterTargetArn"]["Fn::GetAtt"][0] for q in work]


def test_every_alarm_notifies_the_alarm_topic_when_it_fires_and_when_it_clears(template):
    alarms = {k: r for k, r in template["Resources"].items() if r["Type"] == "AWS::CloudWatch::Alarm"}
    assert len(alarms) == 2 * len(FUNCTION_NAMES) + 2 * len(_queues(template)[0]) + 3 + 1
    for logical_id, alarm in alarms.items():
        props = alarm["Properties"]
        assert props["AlarmActions"] == props["OKActions"] == [{"Ref": "AlarmTopic"}], logical_id
        assert "docs/runbook.md#" in props["AlarmDescription"], logical_id
        assert props["TreatMissingData"] == "notBreaching", logical_id  # no traffic is no alarm


def test_the_alarm_email_is_subscribed_only_when_given(template):
    subscription = template["Resources"]["AlarmEmailSubscription"]
    assert subscription["Properties"] == {"TopicArn": {"Ref": "AlarmTopic"}, "Protocol": "email",
                                          "Endpoint": {"Ref": "AlarmEmail"}}
    condition = subscription["Condition"]
    assert template["Parameters"]["AlarmEmail"]["Default"] == ""
    assert not Resolver(template, PARAMETERS, REGION).condition(condition)
    assert Resolver(template, {**PARAMETERS, "AlarmEmail": "ops@example.com"}, REGION).condition(condition)


def test_every_function_has_an_errors_and_a_throttles_alarm_on_its_chalice_name(template, resolver):
    for metric in ("Errors", "Throttles"):
        alarms = _alarms(template, resolver, metric)
        assert set(alarms) == set(FUNCTION_NAMES.values()), metric
        for props in alarms.values():
            assert props["Namespace"] == "AWS/Lambda" and props["Dimensions"][0]["Name"] == "FunctionName"
            assert (props["Statistic"], props["ComparisonOperator"], props["Threshold"]) == (
                "Sum", "GreaterThanThreshold", 0)


def test_the_function_names_are_those_chalice_gives():
    """Chalice names the API's function `<app>-<stage>` and every other `<app>-<stage>-<name>`: what the
    alarms above, the log groups and the log permission are written for."""
    assert chalice_function_names(STAGE) == {name: FUNCTION_NAMES[name] for name in FUNCTIONS}


def test_every_dead_letter_queue_alarms_on_its_first_message(template, resolver):
    _, dead_letter = _queues(template)
    alarms = _alarms(template, resolver, "ApproximateNumberOfMessagesVisible")
    names = {resolver.resolve({"Fn::GetAtt": [q, "QueueName"]}) for q in dead_letter}
    assert len(names) == 5 and names == set(alarms)
    for props in alarms.values():
        assert (props["Statistic"], props["ComparisonOperator"], props["Threshold"]) == (
            "Maximum", "GreaterThanThreshold", 0)


def test_every_work_queue_alarms_when_its_oldest_message_waited_longer_than_its_consumer_takes(template):
    """The threshold is above the consumer's timeout (a message in the works for all of it is no alarm),
    and for the webhook deliveries above SQS's longest delay (900 s) too, which retries wait."""
    from app import app

    resolver = Resolver(template, {**PARAMETERS, "Stage": "dev"}, REGION)  # app.py's queues are the dev stage's
    consumers = {source.queue: source.name for source in app.event_sources if hasattr(source, "queue")}
    work, _ = _queues(template)
    alarms = _alarms(template, resolver, "ApproximateAgeOfOldestMessage")
    names = {resolver.resolve({"Fn::GetAtt": [q, "QueueName"]}) for q in work}
    assert len(names) == 5 and names == set(alarms) == set(consumers)
    for queue, props in alarms.items():
        floor = FUNCTIONS[consumers[queue]].timeout_s + (900 if queue.endswith("webhook-deliveries") else 0)
        assert props["Threshold"] > floor, queue
        assert props["Statistic"] == "Maximum"


def test_every_state_machine_alarms_on_failed_executions(template, resolver):
    """By the ARN the app starts it by (the infrastructure's outputs), for each machine of the workflows."""
    workflows = load_template(WORKFLOWS_TEMPLATE_PATH)
    outputs = template["Outputs"]
    machines = {resolver.resolve(outputs[r["Properties"]["StateMachineName"]["Ref"].replace("Name", "Arn")]["Value"])
                for r in workflows["Resources"].values() if r["Type"] == "AWS::StepFunctions::StateMachine"}
    alarms = _alarms(template, resolver, "ExecutionsFailed")
    assert len(machines) == 3 and set(alarms) == machines
    assert all(p["Namespace"] == "AWS/States" for p in alarms.values())


def test_the_api_5xx_alarm_watches_the_stages_api_by_the_name_app_py_gives_it(template, resolver):
    """API Gateway names the REST API after the app's title: app.py gives it the stage's name, as Chalice
    imports app.py with the stage's variables (RECON_STAGE among them, stage_config)."""
    import os
    import subprocess
    import sys

    [alarm] = _alarms(template, resolver, "5XXError").values()
    dimensions = {d["Name"]: d["Value"] for d in alarm["Dimensions"]}
    outputs = {name: "-" for name in deploy._placeholder_outputs()}
    stage = deploy.stage_config(STAGE, outputs, base={})["stages"][STAGE]
    named = subprocess.run([sys.executable, "-c", "from app import app; print(app.app_name)"], capture_output=True,
                           text=True, check=True, cwd=deploy.ROOT,
                           env={**os.environ, "RECON_STAGE": stage["environment_variables"]["RECON_STAGE"]})
    assert dimensions["ApiName"] == named.stdout.strip() == f"recon-{STAGE}"
    assert dimensions["Stage"] == stage["api_gateway_stage"]


def test_every_functions_log_group_is_declared_with_the_retention_parameter(template, resolver):
    groups = _of_type(template, resolver, "AWS::Logs::LogGroup")
    names = {props["LogGroupName"]: props for props in groups.values()}
    expected = {f"/aws/lambda/{name}" for name in FUNCTION_NAMES.values()} | {f"/aws/vendedlogs/states/recon-{STAGE}"}
    assert set(names) == expected
    for logical_id, resource in template["Resources"].items():
        if resource["Type"] == "AWS::Logs::LogGroup":
            assert resource["Properties"]["RetentionInDays"] == {"Ref": "LogRetentionDays"}, logical_id
            assert resource["DeletionPolicy"] == "Delete", logical_id  # an import (adopt_log_groups) needs one
    retention = template["Parameters"]["LogRetentionDays"]
    assert retention["Default"] == 30 and 30 in retention["AllowedValues"]
    # The browser worker logs to its group from its first line: the group is made before it.
    assert template["Resources"]["BrowserRunAttemptFunction"]["DependsOn"] == "BrowserRunAttemptLogGroup"


def test_every_state_machine_logs_its_errors_to_the_stacks_log_group_and_may_deliver_there():
    workflows = load_template(WORKFLOWS_TEMPLATE_PATH)
    arn = {"Fn::Sub": "arn:${AWS::Partition}:logs:${AWS::Region}:${AWS::AccountId}:log-group:"
                      "${StateMachineLogGroupName}:*"}
    machines = [r for r in workflows["Resources"].values() if r["Type"] == "AWS::StepFunctions::StateMachine"]
    assert len(machines) == 3
    for machine in machines:
        logging = machine["Properties"]["LoggingConfiguration"]
        assert logging["Level"] == "ERROR"
        assert logging["Destinations"] == [{"CloudWatchLogsLogGroup": {"LogGroupArn": arn}}]
    granted = [s for p in workflows["Resources"]["StateMachineRole"]["Properties"]["Policies"]
               for s in p["PolicyDocument"]["Statement"]]
    for action in ("logs:CreateLogDelivery", "logs:GetLogDelivery", "logs:UpdateLogDelivery",
                   "logs:DeleteLogDelivery", "logs:ListLogDeliveries", "logs:PutResourcePolicy",
                   "logs:DescribeResourcePolicies", "logs:DescribeLogGroups"):
        assert any(action in s["Action"] and s["Resource"] == "*" for s in granted), action
    # The group's name reaches the workflows as a stack output, not as a function (workflow_parameters).
    assert function_of_parameter("StateMachineLogGroupName") is None
    assert load_template()["Outputs"]["StateMachineLogGroupName"]["Value"] == {"Ref": "StateMachineLogGroup"}


def test_the_dashboard_shows_every_function_queue_and_state_machine_of_the_stage(template, resolver):
    [dashboard] = _of_type(template, resolver, "AWS::CloudWatch::Dashboard").values()
    body = json.loads(dashboard["DashboardBody"])
    shown = {m[3] for w in body["widgets"] for m in w["properties"].get("metrics", [])}
    work, dead_letter = _queues(template)
    queues = {resolver.resolve({"Fn::GetAtt": [q, "QueueName"]}) for q in work + dead_letter}
    machines = {arn for arn in _alarms(template, resolver, "ExecutionsFailed")}
    assert set(FUNCTION_NAMES.values()) | queues | machines <= shown
    [logs] = [w for w in body["widgets"] if w["type"] == "log"]
    assert all(f"SOURCE '/aws/lambda/{name}'" in logs["properties"]["query"] for name in FUNCTION_NAMES.values())
    assert all(w["properties"]["region"] == REGION for w in body["widgets"])


def test_every_alarm_names_a_section_of_the_runbook_that_exists(template):
    import re

    from chalicelib.local.provision import TEMPLATE_PATH

    runbook = (TEMPLATE_PATH.parents[1] / "docs" / "runbook.md").read_text()
    anchors = {re.sub(r"[^a-z0-9 -]", "", heading.lower()).replace(" ", "-")
               for heading in re.findall(r"^## (.+)$", runbook, flags=re.MULTILINE)}
    named = {r["Properties"]["AlarmDescription"].rsplit("#", 1)[1] for r in template["Resources"].values()
             if r["Type"] == "AWS::CloudWatch::Alarm"}
    assert len(named) == 6 and named <= anchors, named - anchors
