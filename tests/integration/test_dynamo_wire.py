"""The table's own wire (adapters/dynamodb/wire.py) against what nobody here wrote: its signatures
against botocore's SigV4 signer, its requests against dynalite (the local stack's DynamoDB) through
the table, and its retries against a server scripted at the HTTP level."""
from __future__ import annotations

import ipaddress
import json
import ssl
import threading
import time
import zlib
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from unittest.mock import patch

import boto3
import botocore.auth
import botocore.exceptions
import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.config import Config
from botocore.credentials import Credentials
from botocore.exceptions import ClientError
from botocore.parsers import ResponseParserError
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from moto import mock_aws

from chalicelib.adapters.aws import AwsClients
from chalicelib.adapters.dynamodb import keys
from chalicelib.adapters.dynamodb.allocations import allocated_attribute
from chalicelib.adapters.dynamodb.matches import (
    ClaimRepository,
    MatchRepository,
    _claim_update,
    _same_sets,
    _sets_values,
    _status_update,
    _status_values,
    claim_write,
)
from chalicelib.adapters.dynamodb.reconciliation_exceptions import ExceptionRepository
from chalicelib.adapters.dynamodb.records import RecordRepository
from chalicelib.adapters.dynamodb.table import ConditionalUpdate, ConditionFailed, DynamoTable, Filter, serialize
from chalicelib.adapters.dynamodb.wire import CONTENT_TYPE, DynamoWire, SigV4, signed_host
from chalicelib.domain.clock import utc_now
from chalicelib.domain.matches import Match, MatchMember, MatchStatus, record_status
from chalicelib.domain.records import Direction, Record, RecordStatus
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
        settings = Settings(dynamodb_endpoint=f"http://127.0.0.1:{port}", local_mode=True, table_name="recon-wire",
                            dynamodb_client="wire")
        aws = AwsClients(settings)
        template = load_template()
        [definition] = table_definitions(template, Resolver(template, {"DataBucketName": "b"}, "us-east-1"))
        ensure_table(aws.dynamodb, {**definition, "TableName": "recon-wire"}, log=lambda _: None)
        yield aws
    finally:
        processes.stop([process])


def test_the_local_stack_gets_the_wire():
    settings = Settings(dynamodb_endpoint="http://127.0.0.1:8001", local_mode=True, http_proxy=None,
                        dynamodb_client="auto")
    assert isinstance(AwsClients(settings).table_client, DynamoWire)


def test_the_table_over_the_wire(dynalite):
    table = DynamoTable(dynalite.table_client, "recon-wire")
    seen: list[str] = []

    def note(model, **_):
        seen.append(model.name)

    dynalite.dynamodb.meta.events.register("after-call.dynamodb", note)
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
    dynalite.dynamodb.meta.events.unregister("after-call.dynamodb", note)


@pytest.fixture(params=["dynalite", "moto"])
def engine(request):
    """The table on dynalite (through the wire) or on moto (through botocore), and a raw client."""
    if request.param == "dynalite":
        aws = request.getfixturevalue("dynalite")
        yield DynamoTable(aws.table_client, "recon-wire"), aws.dynamodb
        return
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x",
                              config=Config(parameter_validation=False))  # as adapters/aws.py makes it
        template = load_template()
        [definition] = table_definitions(template, Resolver(template, {"DataBucketName": "b"}, "us-east-1"))
        client.create_table(**{**definition, "TableName": "recon-wire"})
        yield DynamoTable(client, "recon-wire"), client


# (stored matched_in as sent, in this order; proposed_in; other attributes; what the claim read: matched_in, proposed_in)
CLAIM_CASES = [
    pytest.param(["30", "4", "100"], None, {}, {4, 30, 100}, set(), id="the same set, stored in another order"),
    pytest.param(["3"], None, {}, {3, 5}, set(), id="a set that grew meanwhile"),
    pytest.param(["3", "5"], None, {}, {3}, set(), id="a set that shrank meanwhile"),
    pytest.param(None, None, {}, set(), set(), id="never matched"),
    pytest.param(["3"], None, {}, set(), set(), id="matched meanwhile"),
    pytest.param(None, ["7"], {}, set(), {7}, id="proposed elsewhere"),
    pytest.param(None, ["7"], {}, set(), set(), id="proposed meanwhile"),
    pytest.param(None, None, {"deleting": {"BOOL": True}}, set(), set(), id="being deleted"),
    pytest.param(None, None, {"match_000000000009": {"N": "4"}}, set(), set(), id="held by another match"),
    pytest.param(None, None, {"allocated_000000000009": {"M": {}}}, set(), set(), id="paid in part"),
    pytest.param("missing", None, {}, set(), set(), id="gone"),
]


def _store_record(raw, record_id: int, stored, proposed_stored, others) -> None:
    """A record of CLAIM_CASES as stored before its claim (nothing when `stored` is "missing")."""
    if stored == "missing":
        return
    key = keys.record("wire", record_id)
    item = {**serialize({**key, "id": record_id, "data_stream_key": "bank", "status": "unreconciled",
                         **keys.record_indexes("wire", record_id, "bank", "unreconciled")}), **others}
    if stored:
        item["matched_in"] = {"NS": stored}
    if proposed_stored:
        item["proposed_in"] = {"NS": proposed_stored}
    raw.put_item(TableName="recon-wire", Item=item)


@pytest.mark.parametrize(("stored", "proposed_stored", "others", "matched_in", "proposed_in"), CLAIM_CASES)
@pytest.mark.parametrize("proposed", [False, True])
def test_a_claim_in_plain_parameters_writes_what_its_expression_wrote(engine, stored, proposed_stored, others,
                                                                       matched_in, proposed_in, proposed):
    """The claim's write (`claim_write`) against the UpdateExpression and ConditionExpression it replaced,
    on twin records: the same outcome and the same item after it."""
    table, raw = engine
    outcomes, items = [], []
    for record_id in (101, 102):
        key = keys.record("wire", record_id)
        _store_record(raw, record_id, stored, proposed_stored, others)
        status = record_status(matched_in | {9}, frozenset({9}), proposed_in | ({9} if proposed else set()))
        try:
            if record_id == 101:
                attribute = keys.match_attribute(9)
                change = "ADD matched_in :r" + (", proposed_in :r" if proposed else "")
                table.update(key, _status_update(status, "SET #m = :match", change),
                             condition="attribute_exists(pk) AND attribute_not_exists(deleting) AND "
                                       "attribute_not_exists(#m) AND attribute_not_exists(#at) AND "
                                       + _same_sets(matched_in, proposed_in),
                             names={"#m": attribute, "#status": "status", "#at": allocated_attribute(9)},
                             values={":match": 4, ":r": {9}, **_status_values("wire", record_id, "bank", status),
                                     **_sets_values(matched_in, proposed_in)})
            else:
                claim_write(table, "wire", record_id, "bank", 9, 4, status, matched_in, proposed_in, proposed)
            outcomes.append("written")
        except ConditionFailed:
            outcomes.append("refused")
        found = table.get(key)
        if found is not None:  # the index keys each name their own record: those of its status
            indexes = {k: v for k, v in found.items() if k.startswith("gsi")}
            assert indexes == keys.record_indexes("wire", record_id, "bank", found["status"])
            found = {k: v for k, v in found.items() if k not in ("pk", "id") and k not in indexes} | {"indexes": set(indexes)}
        items.append(found)
    assert outcomes[0] == outcomes[1]
    assert items[0] == items[1]
    if outcomes[0] == "written":
        assert items[1]["status"] == status.value and 9 in items[1]["matched_in"]


def test_many_items_over_the_wire(dynalite):
    table = DynamoTable(dynalite.table_client, "recon-wire")
    items = [{"pk": "E#wire#MANY", "sk": f"{n:04d}", "n": n} for n in range(130)]
    assert table.batch_write(items, threads=2) >= 6
    found = table.get_many([{"pk": i["pk"], "sk": i["sk"]} for i in items], threads=2)
    assert sorted(i["n"] for i in found) == list(range(130))
    page = table.query_page(keys.BASE_TABLE, "E#wire#MANY", limit=50, newest_first=False)
    assert [i["n"] for i in page.items] == list(range(50)) and page.cursor
    second = table.query_page(keys.BASE_TABLE, "E#wire#MANY", limit=100, cursor=page.cursor, newest_first=False)
    assert [i["n"] for i in second.items] == list(range(50, 130)) and second.cursor is None
    odd = Filter("#f0 = :f0", {"#f0": "n"}, {":f0": 7})
    assert [i["n"] for i in table.query_page(keys.BASE_TABLE, "E#wire#MANY", limit=5, filter=odd).items] == [7]
    bodies = list(table.parsed_pages(keys.BASE_TABLE, ["E#wire#MANY"], parse=lambda body: (body, None)))
    assert len(bodies) == 1 and json.loads(bodies[0])["Count"] == 130  # a raw page: the body itself


class Scripted(BaseHTTPRequestHandler):
    """Answers each POST with the next of `script`: (status, body, damaged CRC?), the body a dict
    (JSON) or bytes (sent as they are); None closes the connection without an answer. Keeps what
    it received: target, body, every header."""
    script: list[tuple[int, dict | bytes, bool] | None] = []
    received: list[dict] = []

    def do_POST(self):  # noqa: N802 (http.server's name)
        body = self.rfile.read(int(self.headers["Content-Length"]))
        type(self).received.append({"target": self.headers["X-Amz-Target"], "body": json.loads(body), "raw": body,
                                    "headers": {k.lower(): v for k, v in self.headers.items()}})
        step = type(self).script.pop(0)
        if step is None:
            self.close_connection = True
            self.connection.shutdown(2)
            return
        status, answer, damaged = step
        data = answer if isinstance(answer, bytes) else json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/x-amz-json-1.0")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("x-amz-crc32", str(zlib.crc32(data) + (1 if damaged else 0)))
        self.send_header("x-amzn-RequestId", "req-1")
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


def serve(scheme: str = "http", certificate: Path | None = None, retries: dict | None = None):
    server = ThreadingHTTPServer(("127.0.0.1", 0), Scripted)
    if certificate is not None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(certificate)
        server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    Scripted.received = []
    client = boto3.client("dynamodb", endpoint_url=f"{scheme}://127.0.0.1:{server.server_address[1]}",
                          region_name="us-east-1", aws_access_key_id="k", aws_secret_access_key="s",
                          config=Config(retries=retries or {"max_attempts": 8, "mode": "standard"}))
    return server, client


def signed_as_botocore_signs(received: dict, secret: str = "s") -> bool:
    """Whether the request's Authorization is what botocore's signer makes of the headers it says it
    signed, at the time it says (the check AWS makes)."""
    headers = received["headers"]
    names = headers["authorization"].split("SignedHeaders=")[1].split(",")[0].split(";")
    request = AWSRequest(method="POST", url=f"http://{headers['host']}/", data=received["raw"],
                         headers={name: headers[name] for name in names})
    moment = datetime.strptime(headers["x-amz-date"], "%Y%m%dT%H%M%SZ")
    with patch.object(botocore.auth, "get_current_datetime", lambda: moment):
        SigV4Auth(Credentials("k", secret), "dynamodb", "us-east-1").add_auth(request)
    return request.headers["Authorization"] == headers["authorization"]


@pytest.fixture
def waits(monkeypatch):
    """The waits between attempts, recorded instead of slept (the wire's and botocore's alike)."""
    slept: list[float] = []
    monkeypatch.setattr(time, "sleep", slept.append)
    return slept


@pytest.fixture
def scripted(waits):
    server, client = serve()
    yield DynamoWire(client, client._request_signer._credentials)
    server.shutdown()
    server.server_close()


def throttled():
    return 400, {"__type": "com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException",
                 "message": "The level of configured provisioned throughput for the table was exceeded."}, False


def test_throttling_damage_and_lost_connections_are_retried(scripted, monkeypatch):
    monkeypatch.setenv("AWS_LAMBDA_FUNCTION_NAME", "recon-dev-api")  # on Lambda, botocore's handler adds the
    monkeypatch.setenv("_X_AMZN_TRACE_ID", "Root=1-5759e988-bd862e3fe1be46a994272793")  # trace header
    Scripted.script = [throttled(), (500, {"__type": "InternalServerError"}, False), None,
                       (200, {"Item": {"pk": {"S": "a"}}}, True), (200, {"Item": {"pk": {"S": "a"}}}, False)]
    found = scripted.get_item(TableName="t", Key={"pk": {"S": "a"}})
    assert found["Item"] == {"pk": {"S": "a"}} and found["ResponseMetadata"]["RequestId"] == "req-1"
    assert len(Scripted.received) == 5
    assert {r["target"] for r in Scripted.received} == {"DynamoDB_20120810.GetItem"}
    assert all(r["body"] == {"TableName": "t", "Key": {"pk": {"S": "a"}}} for r in Scripted.received)
    assert all(signed_as_botocore_signs(r) for r in Scripted.received)
    assert {r["headers"]["x-amzn-trace-id"] for r in Scripted.received} == {"Root=1-5759e988-bd862e3fe1be46a994272793"}


def test_a_signature_that_is_not_botocores_is_noticed():
    assert not signed_as_botocore_signs({**{"raw": b"{}"}, "headers": {
        "host": "127.0.0.1:1", "x-amz-date": "20261130T084512Z", "content-type": CONTENT_TYPE,
        "authorization": "AWS4-HMAC-SHA256 Credential=k/20261130/us-east-1/dynamodb/aws4_request, "
                         "SignedHeaders=content-type;host;x-amz-date, Signature=00"}})


def test_an_error_is_botocores_and_not_retried(scripted):
    Scripted.script = [(400, {"__type": "com.amazonaws.dynamodb.v20120810#ConditionalCheckFailedException",
                              "message": "The conditional request failed"}, False)]
    with pytest.raises(ClientError) as failed:
        scripted.put_item(TableName="t", Item={"pk": {"S": "a"}}, ConditionExpression="attribute_not_exists(pk)")
    assert failed.value.response["Error"] == {"Code": "ConditionalCheckFailedException",
                                              "Message": "The conditional request failed"}
    assert len(Scripted.received) == 1


@pytest.mark.parametrize("answer", [
    throttled(),
    (503, b"<html>Service Unavailable</html>", False),
    None,
], ids=["throttled", "an answer that is not JSON", "a connection lost"])
def test_attempts_waits_and_the_last_error_are_botocores(waits, answer):
    """The same endless trouble through botocore's client (standard retries, the service's attempts)
    and through the wire built on it: as many attempts, waits within the same bounds, the same error."""
    server, client = serve()
    try:
        outcomes = []
        for sender in (client, DynamoWire(client, client._request_signer._credentials)):
            Scripted.received, Scripted.script = [], [answer] * 20
            waits.clear()
            with pytest.raises(Exception) as failed:
                sender.get_item(TableName="t", Key={"pk": {"S": "a"}})
            error = failed.value
            outcomes.append((len(Scripted.received), len(waits), type(error).__name__,
                             (getattr(error, "response", None) or {}).get("Error")))
            scale = 1 if answer == throttled() else 0.025  # botocore's: throttling, else DynamoDB's own
            assert all(0 <= wait <= min(20, scale * 2 ** n) for n, wait in enumerate(waits))
        assert outcomes[0] == outcomes[1]
        assert outcomes[0][0] == 9  # max_attempts 8 (adapters/aws.py) is 9 attempts in all
    finally:
        server.shutdown()
        server.server_close()


def test_on_the_services_own_client_config_the_wire_retries_as_long(waits):
    """The client the service builds (adaptive retries, max_attempts 8: adapters/aws.py): the wire asks
    its retry handlers, so 9 attempts, and its rate limiter only hears the answers (nothing blocks)."""
    server, client = serve(retries={"max_attempts": 8, "mode": "adaptive"})
    try:
        Scripted.script = [throttled()] * 20
        with pytest.raises(ClientError) as failed:
            DynamoWire(client, client._request_signer._credentials).get_item(TableName="t", Key={"pk": {"S": "a"}})
        assert failed.value.response["Error"]["Code"] == "ProvisionedThroughputExceededException"
        assert len(Scripted.received) == 9 and len(waits) == 8
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize(("script", "requests"), [
    ([(200, b"{\"Item\": {\"pk\"", True), (200, {"Item": {"pk": {"S": "a"}}}, False)], 2),  # damaged: tried again
    ([(200, b"<html>", False)], 1),  # not JSON, and not damaged: not DynamoDB's answer
    ([(200, b"[]", False)], 1),
])
def test_a_success_that_cannot_be_read(scripted, script, requests):
    Scripted.script = list(script)
    if script[-1][1] == {"Item": {"pk": {"S": "a"}}}:
        found = scripted.get_item(TableName="t", Key={"pk": {"S": "a"}})
        assert found["Item"] == {"pk": {"S": "a"}} and found["ResponseMetadata"]["RetryAttempts"] == 1
    else:
        with pytest.raises(ResponseParserError):
            scripted.get_item(TableName="t", Key={"pk": {"S": "a"}})
    assert len(Scripted.received) == requests


@pytest.mark.parametrize(("endpoint", "host"), [
    ("https://dynamodb.us-east-1.amazonaws.com", "dynamodb.us-east-1.amazonaws.com"),
    ("https://dynamodb.us-east-1.amazonaws.com:443", "dynamodb.us-east-1.amazonaws.com"),
    ("http://127.0.0.1:80", "127.0.0.1"),
    ("http://127.0.0.1:8001", "127.0.0.1:8001"),
    ("https://DynamoDB.eu-west-1.amazonaws.com:8443/", "dynamodb.eu-west-1.amazonaws.com:8443"),
    ("http://[::1]:8001", "[::1]:8001"),
])
def test_the_host_signed_is_botocores(endpoint, host):
    assert signed_host(endpoint) == host == botocore.auth._host_from_url(endpoint)


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


def test_https_is_verified(tmp_path, waits):
    certificate = self_signed(tmp_path)
    server, client = serve("https", certificate)
    try:
        Scripted.script = [(200, {"Item": {"pk": {"S": "a"}}}, False)]
        trusting = DynamoWire(client, client._request_signer._credentials, ca_bundle=str(certificate))
        assert trusting.get_item(TableName="t", Key={"pk": {"S": "a"}})["Item"] == {"pk": {"S": "a"}}

        Scripted.script = [(200, {}, False)] * 20
        with pytest.raises(botocore.exceptions.SSLError):  # botocore's bundle does not know this certificate
            DynamoWire(client, client._request_signer._credentials).get_item(TableName="t", Key={"pk": {"S": "a"}})
        assert len(Scripted.received) == 1  # no request ever reached the server unverified
    finally:
        server.shutdown()
        server.server_close()


def test_holds_in_transactions_write_what_hold_record_writes(engine):
    """`ExceptionRepository.hold_together` (TransactWriteItems of 100; a cancelled one goes again
    without its refused holds) against `hold_record`, on twin records n and 200 + n: the same records
    held, the same items after."""
    table, raw = engine
    exceptions = ExceptionRepository(table, counters=None)
    for record_id in [*range(1, 121), *range(201, 321)]:
        _store_record(raw, record_id, None, None, {})
    for offset in (0, 200):
        assert exceptions.hold_record("wire", 7 + offset, 9, 11)  # another exception of the reconciliation
        assert exceptions.hold_record("wire", 8 + offset, 9, 10)  # this one, already
        assert exceptions.hold_record("wire", 9 + offset, 3, 30)  # another reconciliation

    held = exceptions.hold_together("wire", [*range(1, 121), 150], 9, 10)  # 150: not stored
    one_by_one = {n - 200 for n in [*range(201, 321), 350] if exceptions.hold_record("wire", n, 9, 10)}

    assert held == one_by_one == set(range(1, 121)) - {7}

    def stored(record_id: int) -> dict:
        item = table.get(keys.record("wire", record_id)) or {}
        return {k: v for k, v in item.items() if k not in ("pk", "id") and not k.startswith("gsi")}

    for record_id in (1, 7, 8, 9, 120):
        assert stored(record_id) == stored(record_id + 200)
    assert (stored(1)["exception_9"], stored(1)["exception_holds"]) == (10, {"9:10"})
    assert (stored(7)["exception_9"], stored(7)["exception_holds"]) == (11, {"9:11"})
    assert stored(9)["exception_holds"] == {"3:30", "9:10"}
    assert stored(150) == {}  # a hold makes no record


@pytest.mark.parametrize(("stored", "proposed_stored", "others", "matched_in", "proposed_in"), CLAIM_CASES)
@pytest.mark.parametrize("proposed", [False, True])
def test_a_claim_in_a_transaction_writes_what_claim_write_writes(engine, stored, proposed_stored, others,
                                                                 matched_in, proposed_in, proposed):
    """A claim as `ClaimRepository.claim_together` sends it (TransactWriteItems: expressions, with the
    record as its member saw it, proposed nowhere) against `claim_write`, on twin records: the same
    outcome, the same item after it, and a refusal's reason as DynamoDB names it."""
    table, raw = engine
    outcomes, items = [], []
    for record_id in (101, 102):
        key = keys.record("wire", record_id)
        _store_record(raw, record_id, stored, proposed_stored, others)
        status = record_status(matched_in | {9}, frozenset({9}), {9} if proposed else set())
        match = Match(environment="wire", id=4, reconciliation_id=9, group_key="g", created_at=utc_now(), record_count=1,
                      status=MatchStatus.PROPOSED if proposed else MatchStatus.CONFIRMED)
        if record_id == 101:
            reasons = table.write_together([_claim_update(match, MatchMember("a", record_id, "bank",
                                                                             frozenset(matched_in)), frozenset({9}))])
            assert reasons in (None, ["ConditionalCheckFailed"])
            outcomes.append("written" if reasons is None else "refused")
        else:
            try:
                claim_write(table, "wire", record_id, "bank", 9, 4, status, set(matched_in), set(), proposed)
                outcomes.append("written")
            except ConditionFailed:
                outcomes.append("refused")
        found = table.get(key)
        if found is not None:
            found = {k: v for k, v in found.items() if k not in ("pk", "id") and not k.startswith("gsi")}
        items.append(found)
    assert outcomes[0] == outcomes[1]
    assert items[0] == items[1]
    if not (proposed_in or proposed_stored or others) and stored != "missing" and set(map(int, stored or ())) == matched_in:
        assert outcomes[0] == "written"  # the record as seen: the claim passes


def transactions_counted(table: DynamoTable) -> list[int]:
    """The actions of each TransactWriteItems the table sends from now on, in the list returned."""
    sent: list[int] = []
    send = table._client.transact_write_items

    def counted(**params):
        sent.append(len(params["TransactItems"]))
        return send(**params)

    table._client.transact_write_items = counted
    return sent


def test_whole_entries_go_in_packed_transactions_and_a_refused_one_leaves_the_rest_to_go_again(engine):
    """`DynamoTable.write_whole`: entries of 60, 50, 30 and 1 updates go in two transactions (the
    50 does not fit beside the 60); one update of the 30 is refused, so that transaction is
    cancelled and its other entries, whose updates all passed, go again in a third: all of them
    written but the 30, of which nothing is."""
    table, _ = engine
    for n in range(1, 141):
        table.put({"pk": f"E#wire#W#{n}", "sk": "W", "n": n})
    sent = transactions_counted(table)

    def touch(n: int) -> ConditionalUpdate:  # refused where no item is (n > 140)
        return ConditionalUpdate({"pk": f"E#wire#W#{n}", "sk": "W"}, "SET touched = :t", "attribute_exists(pk)",
                                 {":t": True})

    entries = {"sixty": range(1, 61), "fifty": range(61, 111), "thirty": [*range(111, 140), 999], "one": [140]}
    written = table.write_whole(list(entries), lambda name: [touch(n) for n in entries[name]], threads=1)

    assert written == ["sixty", "fifty", "one"]
    assert sent == [60, 81, 51]
    touched = {n for n in range(1, 141) if (table.get({"pk": f"E#wire#W#{n}", "sk": "W"}) or {}).get("touched")}
    assert touched == {*range(1, 111), 140}


@pytest.mark.parametrize("in_transactions", [True, False], ids=["in transactions", "one by one"])
def test_records_put_where_none_is_leave_a_claimed_record_as_it_stands(engine, in_transactions):
    """`RecordRepository.put_absent` (an ingestion chunk two executions may write): of 150 records,
    the 3 already in the table (one claimed by a run since) are left as they are and returned; the
    others are written whole, in transactions of 100 puts where they go that way (the one holding
    a record there is cancelled and sent again without it) or one conditional put each."""
    table, _ = engine
    records = RecordRepository(table, in_transactions=in_transactions)
    env = "wire-together" if in_transactions else "wire-each"  # dynalite's table outlives a test
    made = [wire_record(env, n, external_id=f"x-{n}") for n in range(1, 151)]
    there = [made[4], made[120], made[149]]
    records.put_many(there)
    key = keys.record(env, made[120].id)
    table.update(key, "SET #s = :s", names={"#s": "status"}, values={":s": "reconciled"})  # a run's claim
    sent = transactions_counted(table)

    left = records.put_absent([replace(record, description="again") for record in made])

    assert sorted(r.id for r in left) == [5, 121, 150]
    assert sent == ([100, 50, 100, 47] if in_transactions else [])  # the 147 that passed, packed again
    assert table.get(key)["status"] == "reconciled"
    stored = records.find_many(env, range(1, 151))
    assert sorted(stored) == list(range(1, 151))
    assert {n for n, record in stored.items() if record.description == "again"} == set(range(1, 151)) - {5, 121, 150}


def wire_record(env: str, n: int, **fields) -> Record:
    return Record(**{"environment": env, "id": n, "data_stream_key": "bank", "data_stream_id": 1, "date": "2026-11-02",
                     "amount": 100 + n, "direction": Direction.CREDIT, "currency": "USD", "decimal_places": 2,
                     "status": RecordStatus.UNRECONCILED, "created_at": utc_now(), **fields})


@pytest.mark.parametrize("adopted", [True, False])
def test_open_records_between_ids_are_read_from_every_partition_of_the_listing(engine, adopted):
    """`ClaimRepository.open_record_columns(id_ranges=...)`, a run's read of a stream's changed
    blocks: the sort keys of every shard of the stream's listing between each range's first and
    last id, both in; records matched in the reconciliation and records of other streams left out."""
    table, _ = engine
    env = f"wire-ranges-{adopted}"
    reconciled = {n for n in range(1, 101) if n % 7 == 0}
    RecordRepository(table).put_many(
        [wire_record(env, n, status=RecordStatus.RECONCILED) if n in reconciled else wire_record(env, n)
         for n in range(1, 101)] + [wire_record(env, n, data_stream_key="ledger") for n in range(101, 111)])
    for n in reconciled:  # as a claim leaves them: matched in reconciliation 3
        table.update(keys.record(env, n), "ADD matched_in :r", values={":r": {3}})
    claims = ClaimRepository(table, MatchRepository(table))

    pages = claims.open_record_columns(env, "bank", 3, adopted, id_ranges=[(5, 20), (40, 40), (95, 200)])

    read = sorted(i for page in pages for i in page["id"])
    assert read == [n for n in [*range(5, 21), 40, *range(95, 101)] if n not in reconciled]


def test_records_of_an_unbegun_chunk_left_unprocessed_go_again_only_where_none_is(engine):
    """`RecordRepository.put_many`: DynamoDB leaves the 25 puts of record 10's batch unprocessed
    (the answer scripted at the wire, as a throttled table gives it); meanwhile another execution
    wrote record 10 and a run claimed it. The 25 go again as conditional puts: the claimed one
    stays, the others are written, and the other batch of 25 went once."""
    table, _ = engine
    records = RecordRepository(table)
    made = [wire_record("wire-unbegun", n, description="first") for n in range(1, 51)]
    send = table._client.batch_write_item
    batches: list[int] = []
    throttled: list[bool] = []

    def throttled_once(**params):
        batch = params["RequestItems"][table.name]
        batches.append(len(batch))
        if not throttled and {"N": "10"} in (request["PutRequest"]["Item"]["id"] for request in batch):
            throttled.append(True)  # nothing of it written: all of it back as unprocessed
            records.put_many([replace(made[9], description="the other execution's")])
            table.update(keys.record("wire-unbegun", 10), "SET #s = :s", names={"#s": "status"},
                         values={":s": "reconciled"})
            return {"UnprocessedItems": {table.name: batch}}
        return send(**params)

    table._client.batch_write_item = throttled_once

    left = records.put_many(made)

    assert [r.id for r in left] == [10]
    assert sorted(batches) == [1, 25, 25]  # the two batches once each, and the other execution's put
    stored = records.find_many("wire-unbegun", range(1, 51))
    assert sorted(stored) == list(range(1, 51))
    assert stored[10].description == "the other execution's" and stored[10].status is RecordStatus.RECONCILED
    assert all(stored[n].description == "first" for n in range(1, 51) if n != 10)


def test_a_record_too_large_for_a_transaction_of_puts_goes_alone(engine):
    """DynamoDB takes 4 MB a transaction; a record's metadata may be 64 KB: such a record is put on
    its own, the others together."""
    table, _ = engine
    records = RecordRepository(table, in_transactions=True)
    made = [wire_record("wire-large", 1), wire_record("wire-large", 2, metadata={"note": "x" * 40_000}),
            wire_record("wire-large", 3)]
    sent = transactions_counted(table)

    assert records.put_absent(made) == []
    assert sent == [2]
    assert sorted(records.find_many("wire-large", [1, 2, 3])) == [1, 2, 3]
    assert len(records.get("wire-large", 2).metadata["note"]) == 40_000


def test_a_streams_noting_marks_and_the_records_changed_since_their_import(engine):
    """`streams note-changes` on the table: a stream made before the blocks is marked, a change after
    the mark notes its block, the records whose items carry what a claim or a delete writes are
    found, and the blocks found are trusted under the mark they began with."""
    from chalicelib.adapters.dynamodb.counters import Counters
    from chalicelib.adapters.dynamodb.data_streams import DataStreamRepository
    from chalicelib.domain.data_streams import DataStream, StreamType

    table, _ = engine
    env = "wire-noting"
    streams = DataStreamRepository(table, Counters(table), note_changed_blocks=False)
    streams.add(DataStream(env, 1, "bank", "Bank", StreamType.API, utc_now()))
    records = RecordRepository(table)
    records.put_many([wire_record(env, n, external_id=f"x-{n}", metadata={"k": n}) for n in (1, 2, 3, 20_000)])
    table.update(keys.record(env, 2), "ADD matched_in :r", values={":r": {3}})  # as a claim leaves it
    records.mark_deleting(env, 3, (RecordStatus.UNRECONCILED,), timedelta(minutes=5))
    streams.note_records_changed(env, {"bank": [2]})  # before the mark: where, not noted

    began = streams.begin_noting_changes(env, "bank", utc_now())
    streams.note_records_changed(env, {"bank": [20_000]})

    assert began is not None and streams.changed_since_import(env, "bank") is None
    assert records.ids_since_import(env, "bank") == ({1, 2, 3, 20_000}, {2, 3})
    assert streams.finish_noting_changes(env, "bank", began, [0])
    assert streams.changed_since_import(env, "bank") == {0, 1}
    assert streams.begin_noting_changes(env, "bank", utc_now()) is None
