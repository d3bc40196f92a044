"""The analytics mirror's deletes (adapters/mirror.py) against S3's answer on the wire: DeleteObjects
answers 200 and lists apart the keys it could not delete, which must not pass unseen."""
from __future__ import annotations

import boto3
import pytest
from botocore.stub import Stubber

from chalicelib.adapters.mirror import AnalyticsMirror

BUCKET = "recon-dev-data"
PREFIX = "mirror/environment=acme/data_stream=bank/"
KEYS = [f"{PREFIX}import=000000000001/_money-10-0.json", f"{PREFIX}import=000000000001/part-000000.parquet"]


def scripted_s3(errors: list[dict]):
    s3 = boto3.client("s3", region_name="us-east-1")
    stub = Stubber(s3)
    stub.add_response("list_objects_v2", {"Contents": [{"Key": key} for key in KEYS], "IsTruncated": False},
                      {"Bucket": BUCKET, "Prefix": PREFIX})
    stub.add_response("list_objects_v2", {"IsTruncated": False},
                      {"Bucket": BUCKET, "Prefix": "staging/environment=acme/data_stream=bank/"})
    stub.add_response("delete_objects", {"Deleted": [], **({"Errors": errors} if errors else {})},
                      {"Bucket": BUCKET, "Delete": {"Objects": [{"Key": key} for key in KEYS], "Quiet": True}})
    return s3, stub


def test_a_key_s3_could_not_delete_fails_the_delete_naming_it():
    s3, stub = scripted_s3([{"Key": KEYS[0], "Code": "AccessDenied", "Message": "Access Denied"}])
    with stub, pytest.raises(RuntimeError, match="1 object.*_money-10-0.json: AccessDenied Access Denied"):
        AnalyticsMirror(s3, BUCKET).forget_stream("acme", "bank")


def test_a_delete_s3_did_whole_passes():
    s3, stub = scripted_s3([])
    with stub:
        AnalyticsMirror(s3, BUCKET).forget_stream("acme", "bank")
        stub.assert_no_pending_responses()
