from pathlib import Path

import pytest
from cfnlint.api import lint_file

from chalicelib.local.provision import TEMPLATE_PATH, Resolver, load_template, provision, table_definitions


def test_the_infra_template_passes_cfn_lint():
    matches = lint_file(Path(TEMPLATE_PATH))
    assert [str(m) for m in matches] == []


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
    with pytest.raises(ValueError, match="DataBucketName"):
        Resolver(load_template(), {}, "us-east-1")


def test_an_unknown_resource_type_is_never_skipped_silently():
    template = load_template()
    template["Resources"] = {"Topic": {"Type": "AWS::SNS::Topic", "Properties": {}}}

    class NoClients:
        dynamodb = None

    with pytest.raises(ValueError, match="AWS::SNS::Topic"):
        provision(NoClients(), {"DataBucketName": "b"}, "us-east-1", template=template, log=lambda _: None)


def test_the_worker_fails_a_job_on_the_very_delivery_the_queue_would_dead_letter():
    from chalicelib.settings import Settings

    queue = load_template()["Resources"]["BulkQueue"]["Properties"]
    assert queue["RedrivePolicy"]["maxReceiveCount"] == Settings().bulk_max_receives
