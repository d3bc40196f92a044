"""The table's own wire (adapters/dynamodb/wire.py) against what nobody here wrote: its signatures
against botocore's SigV4 signer, its requests against dynalite (the local stack's DynamoDB) through
the table, and its retries against a server scripted at the HTTP level."""
from __future__ import annotations

import ipaddress
import json
import ssl
import threading
import zlib
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import boto3
import botocore.auth
import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.exceptions import ClientError, EndpointConnectionError
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from chalicelib.adapters.aws import AwsClients
from chalicelib.adapters.dynamodb import wire as wire_module
from chalicelib.adapters.dynamodb.keys import BASE_TABLE
from chalicelib.adapters.dynamodb.table import ConditionFailed, DynamoTable, Filter
from chalicelib.adapters.dynamodb.wire import DynamoWire, SigV4
from chalicelib.local import processes
from chalicelib.local.provision import Resolver, ensure_table, load_template, table_definitions
from chalicelib.local.stack import DYNALITE_CLI
from chalicelib.settings import Settings


@pytest.mark.parametrize("token", [None, "FwoGZXIvYXdzEJr//////////wEaDH0token"])
def test_a_signature_is_botocores(token, monkeypatch):
    body = json.dumps({"TableName": "recon-dev", "Key": {"pk": {"S": "E#x#REC#1"}, "sk": {"S": "REC"}}}).encode()
    moment = datetime(2026, 11, 30, 8, 45, 12, tzinfo=UTC)
    ours = SigV4("eu-west-1", "dynamodb.eu-west-1.amazonaws.com").headers(
        "DynamoDB_20120810.GetItem", body, "AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", token, now=moment)

    request = AWSRequest(method="POST", url="https://dynamodb.eu-west-1.amazonaws.com/", data=body,
                         headers={"Content-Type": "application/x-amz-json-1.0",
                                  "X-Amz-Target": "DynamoDB_20120810.GetItem"})
    signer = SigV4Auth(Credentials("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", token),
                       "dynamodb", "eu-west-1")
    monkeypatch.setattr(botocore.auth, "get_current_datetime", lambda: moment.replace(tzinfo=None))
    signer.add_auth(request)

    assert ours["authorization"] == request.headers["Authorization"]
    assert ours["x-amz-date"] == request.headers["X-Amz-Date"]
    assert ours.get("x-amz-security-token") == request.headers.get("X-Amz-Security-Token")


@pytest.mark.parametrize(("given", "endpoint", "function", "proxy", "wire"), [
    ("auto", "http://127.0.0.1:8001", None, None, True),  # the local stack
    ("auto", None, "recon-dev-api", None, True),  # Lambda
    ("auto", None, None, None, False),  # moto's in-process mock, a laptop's CLI
    ("auto", "http://127.0.0.1:8001", None, "http://proxy:3128", False),
    ("botocore", "http://127.0.0.1:8001", "recon-dev-api", None, False),
    ("wire", None, None, None, True),
])
def test_where_the_wire_is_used(given, endpoint, function, proxy, wire):
    settings = Settings(dynamodb_client=given, dynamodb_endpoint=endpoint, lambda_function_name=function,
                        http_proxy=proxy)
    assert settings.dynamodb_wire is wire


@pytest.fixture(scope="module")
def dynalite(tmp_path_factory):
    folder = tmp_path_factory.mktemp("wire")
    port = processes.free_port()
    process = processes.start(["node", str(DYNALITE_CLI), "--host", "127.0.0.1", "--port", str(port),
                               "--createTableMs", "0"], folder / "dynalite.log")
    try:
        processes.wait_for_port(port, process, "dynalite", folder / "dynalite.log")
        settings = Settings(dynamodb_endpoint=f"http://127.0.0.1:{port}", local_mode=True, table_name="recon-wire")
        aws = AwsClients(settings)
        template = load_template()
        [definition] = table_definitions(template, Resolver(template, {"DataBucketName": "b"}, "us-east-1"))
        ensure_table(aws.dynamodb, {**definition, "TableName": "recon-wire"}, log=lambda _: None)
        yield aws
    finally:
        processes.stop([process])


def test_the_local_stack_gets_the_wire(dynalite):
    assert isinstance(dynalite.table_client, DynamoWire)


def test_the_table_over_the_wire(dynalite):
    table = DynamoTable(dynalite.table_client, "recon-wire")
    seen: list[str] = []
    dynalite.dynamodb.meta.events.register("after-call.dynamodb", lambda model, **_: seen.append(model.name))
    key = {"pk": "E#wire#THING#1", "sk": "THING"}

    table.put({**key, "amount": 1234, "tags": ["a", "b"], "meta": {"x": None, "y": True}, "blob": b"\x00\xffz"})
    assert table.get(key) == {**key, "amount": 1234, "tags": ["a", "b"], "meta": {"x": None, "y": True},
                              "blob": b"\x00\xffz"}
    with pytest.raises(ConditionFailed):
        table.put_new({**key, "amount": 1})
    updated = table.update(key, "SET amount = amount + :n ADD seen :s", values={":n": 6, ":s": {7}, ":was": 1234},
                           condition="amount = :was", return_new=True)
    assert updated["amount"] == 1240 and updated["seen"] == {7}
    with pytest.raises(ConditionFailed):
        table.update(key, "SET amount = :n", values={":n": 0, ":was": 1234}, condition="amount = :was")
    assert table.add_to_counter({"pk": "E#wire#COUNTER", "sk": "C"}, 5) == 5
    with pytest.raises(ClientError) as refused:
        table.update(key, "SET #bad = :n", values={":n": 1})  # a name never defined: DynamoDB refuses it
    assert refused.value.response["Error"]["Code"] == "ValidationException"
    table.delete(key)
    assert table.get(key) is None
    assert {"PutItem", "GetItem", "UpdateItem", "DeleteItem"} <= set(seen)


def test_a_plain_update_is_the_expression_it_stands_for(dynalite):
    table = DynamoTable(dynalite.table_client, "recon-wire")
    key = {"pk": "E#wire#PLAIN#1", "sk": "PLAIN"}
    table.put({**key, "status": "unreconciled", "gsi5pk": "open", "gsi5sk": "1", "matched_in": {3}})
    plain = {"put": {"status": "reconciled", "m_4": 9}, "remove": ["gsi5pk", "gsi5sk"], "add": {"matched_in": {4}},
             "present": ["pk"], "absent": ["deleting", "m_4"]}

    with pytest.raises(ConditionFailed):  # the set differs: {3} is not {3, 5}
        table.update_plainly(key, **plain, equal={"matched_in": {3, 5}})
    with pytest.raises(ConditionFailed):
        table.update_plainly({"pk": "E#wire#PLAIN#2", "sk": "PLAIN"}, **plain, equal={"matched_in": {3}})
    table.update_plainly(key, **plain, equal={"matched_in": {3}})
    assert table.get(key) == {**key, "status": "reconciled", "m_4": 9, "matched_in": {3, 4}}
    with pytest.raises(ConditionFailed):  # m_4 is there now
        table.update_plainly(key, **plain, equal={"matched_in": {4, 3}})
    assert table.get(key)["matched_in"] == {3, 4}


def test_many_items_over_the_wire(dynalite):
    table = DynamoTable(dynalite.table_client, "recon-wire")
    items = [{"pk": "E#wire#MANY", "sk": f"{n:04d}", "n": n} for n in range(130)]
    assert table.batch_write(items, threads=2) >= 6
    found = table.get_many([{"pk": i["pk"], "sk": i["sk"]} for i in items], threads=2)
    assert sorted(i["n"] for i in found) == list(range(130))
    page = table.query_page(BASE_TABLE, "E#wire#MANY", limit=50, newest_first=False)
    assert [i["n"] for i in page.items] == list(range(50)) and page.cursor
    second = table.query_page(BASE_TABLE, "E#wire#MANY", limit=100, cursor=page.cursor, newest_first=False)
    assert [i["n"] for i in second.items] == list(range(50, 130)) and second.cursor is None
    odd = Filter("#f0 = :f0", {"#f0": "n"}, {":f0": 7})
    assert [i["n"] for i in table.query_page(BASE_TABLE, "E#wire#MANY", limit=5, filter=odd).items] == [7]
    bodies = list(table.parsed_pages(BASE_TABLE, ["E#wire#MANY"], parse=lambda body: (body, None)))
    assert len(bodies) == 1 and json.loads(bodies[0])["Count"] == 130  # a raw page: the body itself


class Scripted(BaseHTTPRequestHandler):
    """Answers each POST with the next of `script` (status, body, damaged CRC?); a None closes the
    connection without an answer."""
    script: list[tuple[int, dict, bool] | None] = []
    received: list[dict] = []

    def do_POST(self):  # noqa: N802 (http.server's name)
        body = self.rfile.read(int(self.headers["Content-Length"]))
        type(self).received.append({"target": self.headers["X-Amz-Target"], "body": json.loads(body),
                                    "authorization": self.headers["Authorization"]})
        step = type(self).script.pop(0)
        if step is None:
            self.close_connection = True
            self.connection.shutdown(2)
            return
        status, answer, damaged = step
        data = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/x-amz-json-1.0")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("x-amz-crc32", str(zlib.crc32(data) + (1 if damaged else 0)))
        self.send_header("x-amzn-RequestId", "req-1")
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


def serve(scheme: str = "http", certificate: Path | None = None):
    server = ThreadingHTTPServer(("127.0.0.1", 0), Scripted)
    if certificate is not None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(certificate)
        server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    Scripted.received = []
    client = boto3.client("dynamodb", endpoint_url=f"{scheme}://127.0.0.1:{server.server_address[1]}",
                          region_name="us-east-1", aws_access_key_id="k", aws_secret_access_key="s")
    return server, client


@pytest.fixture
def scripted(monkeypatch):
    monkeypatch.setattr(wire_module, "_back_off", lambda attempt: None)
    server, client = serve()
    yield DynamoWire(client, client._request_signer._credentials)
    server.shutdown()
    server.server_close()


def self_signed(folder: Path) -> Path:
    """A certificate for 127.0.0.1 and its key, in one PEM file."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.now(UTC)
    certificate = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
                   .serial_number(x509.random_serial_number()).not_valid_before(now - timedelta(minutes=1))
                   .not_valid_after(now + timedelta(hours=1))
                   .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                                  critical=False)
                   .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                   .sign(key, hashes.SHA256()))
    path = folder / "endpoint.pem"
    path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM) + key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    return path


def test_https_is_verified(tmp_path, monkeypatch):
    monkeypatch.setattr(wire_module, "_back_off", lambda attempt: None)
    certificate = self_signed(tmp_path)
    server, client = serve("https", certificate)
    try:
        Scripted.script = [(200, {"Item": {"pk": {"S": "a"}}}, False)]
        trusting = DynamoWire(client, client._request_signer._credentials, ca_bundle=str(certificate))
        assert trusting.get_item(TableName="t", Key={"pk": {"S": "a"}})["Item"] == {"pk": {"S": "a"}}

        Scripted.script = [(200, {}, False)] * wire_module.MAX_ATTEMPTS
        with pytest.raises(EndpointConnectionError):  # botocore's bundle does not know this certificate
            DynamoWire(client, client._request_signer._credentials).get_item(TableName="t", Key={"pk": {"S": "a"}})
        assert len(Scripted.received) == 1  # no request ever reached the server unverified
    finally:
        server.shutdown()
        server.server_close()


def throttled():
    return 400, {"__type": "com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException",
                 "message": "The level of configured provisioned throughput for the table was exceeded."}, False


def test_throttling_damage_and_lost_connections_are_retried(scripted):
    Scripted.script = [throttled(), (500, {"__type": "InternalServerError"}, False), None,
                       (200, {"Item": {"pk": {"S": "a"}}}, True), (200, {"Item": {"pk": {"S": "a"}}}, False)]
    found = scripted.get_item(TableName="t", Key={"pk": {"S": "a"}})
    assert found["Item"] == {"pk": {"S": "a"}} and found["ResponseMetadata"]["RequestId"] == "req-1"
    assert len(Scripted.received) == 5
    assert {r["target"] for r in Scripted.received} == {"DynamoDB_20120810.GetItem"}
    assert all(r["body"] == {"TableName": "t", "Key": {"pk": {"S": "a"}}} for r in Scripted.received)
    assert all(r["authorization"].startswith("AWS4-HMAC-SHA256 Credential=k/") for r in Scripted.received)


def test_an_error_is_botocores_and_not_retried(scripted):
    Scripted.script = [(400, {"__type": "com.amazonaws.dynamodb.v20120810#ConditionalCheckFailedException",
                              "message": "The conditional request failed"}, False)]
    with pytest.raises(ClientError) as failed:
        scripted.put_item(TableName="t", Item={"pk": {"S": "a"}}, ConditionExpression="attribute_not_exists(pk)")
    assert failed.value.response["Error"] == {"Code": "ConditionalCheckFailedException",
                                              "Message": "The conditional request failed"}
    assert len(Scripted.received) == 1


def test_retries_end(scripted):
    Scripted.script = [throttled() for _ in range(wire_module.MAX_ATTEMPTS)]
    with pytest.raises(ClientError) as failed:
        scripted.update_item(TableName="t", Key={"pk": {"S": "a"}}, UpdateExpression="SET n = :n",
                             ExpressionAttributeValues={":n": {"N": "1"}})
    assert failed.value.response["Error"]["Code"] == "ProvisionedThroughputExceededException"
    assert len(Scripted.received) == wire_module.MAX_ATTEMPTS

    Scripted.script = [None] * wire_module.MAX_ATTEMPTS
    with pytest.raises(EndpointConnectionError):
        scripted.query(TableName="t", KeyConditionExpression="pk = :p", ExpressionAttributeValues={":p": {"S": "a"}})
