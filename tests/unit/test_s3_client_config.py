"""The S3 client's presigned URLs: SigV4 everywhere, the bucket's own host on AWS (virtual-hosted
addressing), and path style against a custom endpoint (the local stack's s3rver on 127.0.0.1, where a
bucket subdomain would not resolve). Presigning signs locally: no call to AWS."""
from urllib.parse import parse_qs, urlsplit

from chalicelib.adapters.aws import AwsClients
from chalicelib.adapters.blobs import PayloadStore
from chalicelib.settings import Settings

BUCKET = "recon-test-uploads"


def _upload_url(settings: Settings) -> str:
    clients = AwsClients(settings)
    return PayloadStore(clients.client("s3"), BUCKET).upload_url("uploads/a.csv", 60)


def test_on_aws_the_upload_url_is_on_the_buckets_own_host_signed_with_sigv4(monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    url = urlsplit(_upload_url(Settings(region="eu-west-1", bucket_name=BUCKET)))
    # The region's endpoint (the global s3.amazonaws.com would redirect a PUT to a bucket outside us-east-1).
    assert (url.scheme, url.hostname) == ("https", f"{BUCKET}.s3.eu-west-1.amazonaws.com")
    assert url.path == "/uploads/a.csv"
    assert parse_qs(url.query)["X-Amz-Algorithm"] == ["AWS4-HMAC-SHA256"]


def test_against_a_custom_endpoint_the_upload_url_stays_path_style():
    settings = Settings(local_mode=True, region="us-east-1", bucket_name=BUCKET,
                        s3_endpoint="http://127.0.0.1:4569")
    url = urlsplit(_upload_url(settings))
    assert (url.scheme, url.netloc) == ("http", "127.0.0.1:4569")
    assert url.path == f"/{BUCKET}/uploads/a.csv"
    assert parse_qs(url.query)["X-Amz-Algorithm"] == ["AWS4-HMAC-SHA256"]
