"""File imports on the real local stack: presigned upload to the embedded S3, the emulated S3 event,
the state machine run in-process, polling until done; and a file dropped in the bucket."""
import time
import uuid
from pathlib import Path

import boto3
import requests

NACHA = Path(__file__).resolve().parents[1] / "data" / "nacha"


def wait_done(stack, url, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        body = stack.request("GET", url.removeprefix("/v1")).json()
        if body["status"] not in ("pending", "processing", "replicating"):
            return body
        time.sleep(0.2)
    raise TimeoutError(body)


def new_stream(stack):
    key = f"files-{uuid.uuid4().hex[:8]}"
    assert stack.request("POST", "/data_streams", {"key": key, "name": key}).status_code == 201
    return key


def test_an_uploaded_csv_is_imported(stack):
    stream = new_stream(stack)
    created = stack.request("POST", f"/data_streams/{stream}/file_imports",
                            {"filename": "nov.csv", "format": "csv"}).json()
    rows = "date,amount,external_id,memo\n" + "".join(f"2026-11-01,{n}.25,u-{n},m{n}\n" for n in range(1500))
    assert requests.put(created["upload_url"], data=rows.encode(), timeout=30).status_code == 200
    done = wait_done(stack, created["url"])
    assert done["status"] == "completed" and done["successful_items"] == 1500
    listed = stack.request("GET", f"/data_streams/{stream}/file_imports").json()["data"]
    assert listed[0]["record_count"] == 1500 and listed[0]["total_credits"] == sum(n * 100 + 25 for n in range(1500))
    assert stack.request("GET", f"/data_streams/{stream}").json()["records_count"] == 1500


def test_a_nacha_file_dropped_in_the_bucket_imports_itself(stack):
    stream = new_stream(stack)
    info = stack.stack_info()
    s3 = boto3.client("s3", endpoint_url=info["aws_endpoint"], region_name="us-east-1",
                      aws_access_key_id="local", aws_secret_access_key="local")
    s3.put_object(Bucket=info["bucket_name"], Key=f"drops/local/{stream}/payroll.ach",
                  Body=(NACHA / "ccd_addenda.ach").read_bytes())
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        imports = stack.request("GET", f"/data_streams/{stream}/file_imports").json()["data"]
        if imports and imports[0]["status"] == "completed":
            break
        time.sleep(0.2)
    assert imports[0]["status"] == "completed" and imports[0]["source"] == "nacha"
    records = stack.request("GET", f"/file_imports/{imports[0]['id']}/records").json()["data"]
    assert {r["metadata"]["sec_code"] for r in records} == {"CCD"} and len(records) == 2
