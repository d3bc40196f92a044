"""dynalite ignores a GSI added to an existing table, so the local stack compares schemas and
rebuilds a stale table, keeping its items."""

import boto3

from chalicelib.local import processes
from chalicelib.local.provision import Resolver, ensure_table, load_template, table_definitions
from chalicelib.local.stack import DYNALITE_CLI


def test_a_table_with_a_stale_schema_is_rebuilt_with_its_items(tmp_path):
    port = processes.free_port()
    dynalite = processes.start(["node", str(DYNALITE_CLI), "--host", "127.0.0.1", "--port", str(port),
                                "--path", str(tmp_path / "db"), "--createTableMs", "0", "--deleteTableMs", "0"],
                               tmp_path / "dynalite.log")
    try:
        processes.wait_for_port(port, dynalite, "dynalite", tmp_path / "dynalite.log")
        client = boto3.client("dynamodb", endpoint_url=f"http://127.0.0.1:{port}", region_name="us-east-1",
                              aws_access_key_id="local", aws_secret_access_key="local")
        template = load_template()
        [wanted] = table_definitions(template, Resolver(template, {"DataBucketName": "b"}, "us-east-1"))
        stale = {k: v for k, v in wanted.items() if k != "GlobalSecondaryIndexes"}
        stale["AttributeDefinitions"] = [a for a in wanted["AttributeDefinitions"] if a["AttributeName"] in ("pk", "sk")]
        client.create_table(**stale)
        # dynalite creates tables asynchronously even with createTableMs 0: a busy machine showed it
        client.get_waiter("table_exists").wait(TableName=wanted["TableName"], WaiterConfig={"Delay": 0.1})
        client.put_item(TableName=wanted["TableName"], Item={"pk": {"S": "a"}, "sk": {"S": "b"},
                                                            "gsi1pk": {"S": "g"}, "gsi1sk": {"S": "1"}})
        messages = []

        ensure_table(client, wanted, log=messages.append)

        described = client.describe_table(TableName=wanted["TableName"])["Table"]
        assert sorted(i["IndexName"] for i in described["GlobalSecondaryIndexes"]) == ["gsi1", "gsi2", "gsi3", "gsi4", "gsi5"]
        found = client.query(TableName=wanted["TableName"], IndexName="gsi1",
                             KeyConditionExpression="gsi1pk = :g", ExpressionAttributeValues={":g": {"S": "g"}})
        assert found["Count"] == 1
        assert any("rebuilt with 1 items" in m for m in messages)

        messages.clear()
        ensure_table(client, wanted, log=messages.append)
        assert messages == []  # an up-to-date table is left alone
    finally:
        processes.stop([dynalite])
