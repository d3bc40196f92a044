"""The local stack's S3 (s3rver with chalicelib/local/s3_server.js's fixes) answers every S3 call the
service makes as AWS does, with any credentials; each case names the s3rver behaviour it guards."""
from __future__ import annotations

import hashlib
import http.client
import shutil
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

import boto3
import pytest
import requests

from chalicelib.local import processes
from chalicelib.local.aws_server import S3RVER_PACKAGE, s3rver_command

BUCKET = "recon-local-data"

pytestmark = pytest.mark.skipif(not S3RVER_PACKAGE.exists(), reason="s3rver is not installed (npm ci)")


@pytest.fixture(scope="module")
def s3rver(tmp_path_factory):
    directory = tmp_path_factory.mktemp("s3")
    port = processes.free_port()
    log = directory.parent / "s3rver.log"
    server = processes.start(s3rver_command(port, directory), log)
    try:
        processes.wait_for_port(port, server, "s3rver", log)
        yield f"http://{processes.LOOPBACK}:{port}", directory
    finally:
        processes.stop([server])


@pytest.fixture(scope="module")
def s3(s3rver):
    client = client_for(s3rver[0], "local")
    client.create_bucket(Bucket=BUCKET)
    return client


def client_for(endpoint: str, key: str):
    return boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id=key,
                        aws_secret_access_key=key)


def keys_under(s3, prefix: str, page_size: int = 1000) -> list[tuple[str, str]]:
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix,
                                                         PaginationConfig={"PageSize": page_size})
    return [(o["Key"], o["ETag"]) for page in pages for o in page.get("Contents", [])]


def test_any_credentials_are_taken(s3rver, s3):
    s3.put_object(Bucket=BUCKET, Key="creds/x", Body=b"x")
    assert client_for(s3rver[0], "someone-else").get_object(Bucket=BUCKET, Key="creds/x")["Body"].read() == b"x"


def test_a_listing_of_several_pages_follows_the_continuation_token_with_stable_etags(s3):
    # s3rver's DES continuation token failed on OpenSSL 3: any listing past one page (1,000 keys) was a
    # 500. Pages of 100 take the same path with fewer keys to write.
    keys = [f"many/import={n}/part-{n:06d}.parquet" for n in range(250)]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda key: s3.put_object(Bucket=BUCKET, Key=key, Body=key.encode()), keys))

    listed = keys_under(s3, "many/", page_size=100)

    assert [key for key, _ in listed] == sorted(keys)
    assert listed == keys_under(s3, "many/", page_size=100) == keys_under(s3, "many/")
    assert dict(listed)[keys[7]].strip('"') == hashlib.md5(keys[7].encode()).hexdigest()
    assert s3.list_objects_v2(Bucket=BUCKET, Prefix="many/", MaxKeys=1)["KeyCount"] == 1
    errors = s3.delete_objects(Bucket=BUCKET, Delete={"Objects": [{"Key": k} for k in keys[:200]], "Quiet": True})
    assert not errors.get("Errors") and len(keys_under(s3, "many/")) == 50


@pytest.mark.parametrize("key", ["mirror/environment=local/data_stream=bank/import=7/part-000001.parquet",
                                 "odd/a b+c%d/é#?&;,$@:.txt"])
def test_copy_finds_a_source_whose_key_has_reserved_characters(s3, key):
    # s3rver read x-amz-copy-source with decodeURI, which leaves '=' and '+' encoded: "NoSuchKey"
    s3.put_object(Bucket=BUCKET, Key=key, Body=b"part", ContentType="application/vnd.apache.parquet")

    s3.copy_object(Bucket=BUCKET, Key=f"published/{key}", CopySource={"Bucket": BUCKET, "Key": key})

    copied = s3.get_object(Bucket=BUCKET, Key=f"published/{key}")
    assert copied["Body"].read() == b"part" and copied["ContentType"] == "application/vnd.apache.parquet"
    assert copied["ETag"] == s3.head_object(Bucket=BUCKET, Key=key)["ETag"]


def test_copy_of_a_missing_source_is_no_such_key(s3):
    with pytest.raises(s3.exceptions.NoSuchKey):
        s3.copy_object(Bucket=BUCKET, Key="published/none", CopySource={"Bucket": BUCKET, "Key": "staged/none"})


def test_reads_ranges_heads_and_deletes(s3):
    s3.put_object(Bucket=BUCKET, Key="blob.json", Body=b'{"a": 1}', ContentType="application/json")
    assert s3.get_object(Bucket=BUCKET, Key="blob.json", Range="bytes=0-2")["Body"].read() == b'{"a'
    assert s3.head_object(Bucket=BUCKET, Key="blob.json")["ContentLength"] == 8
    s3.put_object(Bucket=BUCKET, Key="marker/_rows=0", Body=b"")
    assert s3.get_object(Bucket=BUCKET, Key="marker/_rows=0")["Body"].read() == b""
    s3.delete_object(Bucket=BUCKET, Key="blob.json")
    with pytest.raises(s3.exceptions.ClientError):
        s3.head_object(Bucket=BUCKET, Key="blob.json")


def test_a_presigned_put_uploads_the_file(s3):
    url = s3.generate_presigned_url("put_object", Params={"Bucket": BUCKET, "Key": "uploads/nov.csv"}, ExpiresIn=60)
    assert requests.put(url, data=b"date,amount\n2026-11-01,1.00\n", timeout=10).status_code == 200
    assert s3.get_object(Bucket=BUCKET, Key="uploads/nov.csv")["Body"].read() == b"date,amount\n2026-11-01,1.00\n"


@pytest.mark.skipif(not shutil.which("curl"), reason="no curl")
def test_a_presigned_put_takes_curl_upload_file_as_the_readme_tour_uploads(s3, tmp_path):
    url = s3.generate_presigned_url("put_object", Params={"Bucket": BUCKET, "Key": "uploads/tour.csv"}, ExpiresIn=60)
    (tmp_path / "august.csv").write_text("date,amount\n2026-08-07,1250.00\n")
    curl = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-X", "PUT", "--upload-file",
                           str(tmp_path / "august.csv"), url], capture_output=True, text=True, timeout=10)
    assert curl.stdout == "200"
    assert s3.get_object(Bucket=BUCKET, Key="uploads/tour.csv")["Body"].read() == b"date,amount\n2026-08-07,1250.00\n"


def test_an_object_being_written_is_neither_listed_nor_read_until_whole(s3rver, s3):
    # s3rver wrote in place (a crash mid-write left a truncated object that listings showed, and a
    # reader could get part of it); ours writes a .partial file renamed over the object when whole
    s3.put_object(Bucket=BUCKET, Key="whole/a", Body=b"first")
    port = int(s3rver[0].rsplit(":", 1)[1])
    upload = http.client.HTTPConnection(processes.LOOPBACK, port, timeout=10)
    upload.putrequest("PUT", f"/{BUCKET}/whole/a")
    upload.putheader("Content-Length", "2000")
    upload.endheaders()
    upload.send(b"s" * 1000)
    time.sleep(0.2)  # s3rver has the first half

    assert s3.get_object(Bucket=BUCKET, Key="whole/a")["Body"].read() == b"first"
    assert keys_under(s3, "whole/") == [("whole/a", f'"{hashlib.md5(b"first").hexdigest()}"')]

    upload.send(b"s" * 1000)
    assert upload.getresponse().status == 200
    assert s3.get_object(Bucket=BUCKET, Key="whole/a")["Body"].read() == b"s" * 2000
    assert keys_under(s3, "whole/") == [("whole/a", f'"{hashlib.md5(b"s" * 2000).hexdigest()}"')]
    assert not list((s3rver[1] / BUCKET / "whole").glob("*.partial"))


def test_the_bucket_refuses_event_notifications_as_not_implemented(s3):
    # the provisioner skips them on this answer; the local runtime polls the bucket instead
    with pytest.raises(s3.exceptions.ClientError, match="NotImplemented"):
        s3.put_bucket_notification_configuration(Bucket=BUCKET,
                                                 NotificationConfiguration={"EventBridgeConfiguration": {}})


@pytest.mark.parametrize(("origin", "allowed"), [
    ("http://127.0.0.1:8000", True), ("http://localhost:41234", True),
    ("https://evil.test", False), ("http://127.0.0.2:8000", False)])
def test_a_browser_on_the_loopback_may_put_a_file_to_a_presigned_url(s3, origin, allowed):
    # The web app's imports page PUTs from the page's origin (the local API, any loopback port) to the
    # upload URL: the preflight must allow it, and only from there (template's DataBucket CorsConfiguration)
    url = s3.generate_presigned_url("put_object", Params={"Bucket": BUCKET, "Key": "uploads/cors.csv"}, ExpiresIn=60)
    preflight = requests.options(url, headers={"Origin": origin, "Access-Control-Request-Method": "PUT",
                                               "Access-Control-Request-Headers": "content-type"}, timeout=10)
    assert (preflight.status_code == 200) is allowed, preflight.text
    if not allowed:
        return
    assert "PUT" in preflight.headers["Access-Control-Allow-Methods"]
    assert preflight.headers["Access-Control-Allow-Headers"] == "content-type"
    put = requests.put(url, data=b"date,amount\n", headers={"Origin": origin, "Content-Type": "text/csv"}, timeout=10)
    assert put.status_code == 200 and put.headers["Access-Control-Allow-Origin"] == origin
    assert s3.get_object(Bucket=BUCKET, Key="uploads/cors.csv")["Body"].read() == b"date,amount\n"
    refused = requests.options(url, headers={"Origin": origin, "Access-Control-Request-Method": "DELETE"}, timeout=10)
    assert refused.status_code == 403
