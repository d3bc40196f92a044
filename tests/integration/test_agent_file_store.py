"""Agents' files in S3 (moto): the key layout, round trips, presigned URLs, and deleting an agent's
files without touching another agent's or another environment's."""
from __future__ import annotations

import uuid
from datetime import UTC, datetime
from urllib.parse import parse_qs, unquote, urlsplit

import boto3
import pytest
import requests
from botocore.config import Config

from chalicelib.adapters.agent_files import DELETE_BATCH, AgentFileStore, file_key
from chalicelib.domain.agents.files import AgentFile, FileTooLarge
from chalicelib.domain.errors import NotFound
from tests.conftest import REGION

BUCKET = "agent-files-test"
AGENT = "0f8fad5b-d9cb-469f-a165-70867728950e"
OTHER_AGENT = "7c9e6679-7425-40de-944b-e07fc1f90ae7"
T0 = datetime(2026, 5, 9, 8, 0, tzinfo=UTC)


def a_file(filename="report.csv", environment="acme", agent_id=AGENT, run_id=None, content_type="text/csv"):
    return AgentFile(environment=environment, agent_id=agent_id, id=str(uuid.uuid4()), filename=filename,
                     byte_size=None, content_type=content_type, created_at=T0, run_id=run_id)


@pytest.fixture
def s3(moto_aws):
    client = boto3.client("s3", region_name=REGION)
    client.create_bucket(Bucket=BUCKET)
    return client


@pytest.fixture
def store(s3):
    return AgentFileStore(s3, BUCKET, url_seconds=900)


def keys(s3) -> set[str]:
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET)
    return {o["Key"] for page in pages for o in page.get("Contents", [])}


def test_input_and_output_files_are_kept_under_their_agent(s3, store):
    given = a_file("in put.csv")
    written = a_file("out.csv", run_id="42")
    store.put(given, b"a,b\n1,2\n")
    store.put(written, b"x\n")
    assert keys(s3) == {f"agents/acme/{AGENT}/input/{given.id}/in put.csv",
                        f"agents/acme/{AGENT}/runs/42/{written.id}/out.csv"}
    head = s3.head_object(Bucket=BUCKET, Key=file_key(written))
    assert head["ContentType"] == "text/csv"


def test_a_file_reads_back_byte_for_byte(store):
    file = a_file("bytes.bin", content_type="application/octet-stream")
    body = bytes(range(256)) * 40
    store.put(file, body)
    assert store.read(file, max_bytes=len(body)) == body
    assert store.read(file, max_bytes=len(body) + 100) == body


def test_an_empty_file_reads_as_empty(store):
    file = a_file("empty.csv")
    store.put(file, b"")
    assert store.read(file, max_bytes=10) == b""
    assert store.landed_size(file) == 0


def test_a_file_above_the_reader_s_limit_is_refused_not_cut(store):
    file = a_file()
    store.put(file, b"0123456789")
    with pytest.raises(FileTooLarge) as refused:
        store.read(file, max_bytes=9)
    assert (refused.value.byte_size, refused.value.limit) == (10, 9)


def test_reading_a_file_that_never_landed_is_not_found(store):
    with pytest.raises(NotFound, match="report.csv"):
        store.read(a_file(), max_bytes=100)


def test_the_landed_size_is_none_until_the_upload_lands(store):
    file = a_file()
    assert store.landed_size(file) is None
    store.put(file, b"12345")
    assert store.landed_size(file) == 5


def test_a_deleted_file_is_gone_and_deleting_again_is_no_error(s3, store):
    file, kept = a_file(), a_file()
    store.put(file, b"x")
    store.put(kept, b"y")
    store.delete(file)
    store.delete(file)
    assert store.landed_size(file) is None
    assert keys(s3) == {file_key(kept)}


def test_deleting_an_agent_deletes_its_input_and_output_files_and_nothing_else(s3, store):
    mine = [a_file(f"in-{n}.csv") for n in range(3)] + [a_file(f"out-{n}.csv", run_id=str(n)) for n in range(3)]
    others = [
        a_file(agent_id=OTHER_AGENT), a_file(agent_id=OTHER_AGENT, run_id="1"),
        a_file(environment="globex"), a_file(environment="globex", run_id="1"),  # the same agent id elsewhere
        a_file(environment="acme-eu"),  # an environment whose name starts with this one's
    ]
    for file in mine + others:
        store.put(file, b"x")
    s3.put_object(Bucket=BUCKET, Key=f"agents/acme/{AGENT}-copy/input/x/y.csv", Body=b"x")  # an id it prefixes
    s3.put_object(Bucket=BUCKET, Key="runs/acme/1/open.parquet", Body=b"x")
    before = keys(s3)
    store.delete_agent("acme", AGENT)
    assert keys(s3) == before - {file_key(f) for f in mine}
    assert all(store.landed_size(f) == 1 for f in others)


def test_deleting_an_agent_of_more_than_one_batch_deletes_every_page(s3):
    store = AgentFileStore(s3, BUCKET, delete_batch=100)  # S3's 1,000 would need 2,345 files here
    prefix = f"agents/acme/{AGENT}/runs/7/"
    for n in range(234):  # three pages of the listing, three DeleteObjects
        s3.put_object(Bucket=BUCKET, Key=f"{prefix}{n:05d}/f.csv", Body=b"")
    store.put(a_file(agent_id=OTHER_AGENT), b"kept")
    deletes = []
    original = s3.delete_objects

    def counted(**kwargs):
        deletes.append(len(kwargs["Delete"]["Objects"]))
        return original(**kwargs)

    s3.delete_objects = counted
    store.delete_agent("acme", AGENT)
    assert deletes == [100, 100, 34] and DELETE_BATCH == 1000  # the most keys one DeleteObjects takes
    assert [k for k in keys(s3) if k.startswith(f"agents/acme/{AGENT}/")] == []
    assert len(keys(s3)) == 1


def test_deleting_an_agent_without_files_is_no_error(s3, store):
    store.delete_agent("acme", AGENT)
    assert keys(s3) == set()


@pytest.mark.parametrize("environment, agent_id", [("", AGENT), ("acme", ""), ("a/b", AGENT), ("acme", "..")])
def test_a_key_cannot_reach_past_its_agent(store, environment, agent_id):
    with pytest.raises(ValueError):
        store.delete_agent(environment, agent_id)


def test_a_file_name_with_a_slash_is_refused_as_a_key(store):
    with pytest.raises(ValueError):
        store.put(a_file("../../other/secret.csv"), b"x")


def query(url: str) -> dict[str, str]:
    return {name: values[0] for name, values in parse_qs(urlsplit(url).query).items()}


@pytest.fixture
def sigv4_store(s3):
    """With SigV4, as S3 wants it (boto3 presigns with the deprecated SigV2 by default), whose
    query names what it signs."""
    return AgentFileStore(boto3.client("s3", region_name=REGION, config=Config(signature_version="s3v4")), BUCKET,
                          url_seconds=900)


def test_the_download_url_is_signed_and_saves_the_file_under_its_name(sigv4_store):
    store = sigv4_store
    file = a_file("Relevé août \"final\".csv", run_id="3")
    url = store.download_url(file)
    parts, signed = urlsplit(url), query(url)
    assert unquote(parts.path).endswith(f"/{file_key(file)}")
    assert signed["X-Amz-Expires"] == "900" and signed["X-Amz-Signature"]
    assert signed["response-content-disposition"] == (
        "attachment; filename=\"Relev_ ao_t _final_.csv\"; "
        "filename*=UTF-8''Relev%C3%A9%20ao%C3%BBt%20%22final%22.csv")
    assert "X-Amz-SignedHeaders" in signed and "X-Amz-Credential" in signed


def test_the_upload_url_is_a_signed_put_of_the_file_s_content_type(sigv4_store):
    store = sigv4_store
    file = a_file("in.csv", content_type="text/csv; charset=utf-8")
    url = store.upload_url(file)
    parts, signed = urlsplit(url), query(url)
    assert unquote(parts.path).endswith(f"/{file_key(file)}")
    assert signed["X-Amz-Expires"] == "900"
    assert "content-type" in signed["X-Amz-SignedHeaders"].split(";")


@pytest.fixture
def served_store(moto_aws):
    """The store against moto in server mode (same in-process state as the mock), so that a
    presigned URL can be fetched over HTTP."""
    from moto.server import ThreadedMotoServer

    from chalicelib.local import processes

    port = processes.free_port()
    server = ThreadedMotoServer(ip_address=processes.LOOPBACK, port=port, verbose=False)
    server.start()
    try:
        client = boto3.client("s3", region_name=REGION, endpoint_url=f"http://{processes.LOOPBACK}:{port}")
        client.create_bucket(Bucket=BUCKET)
        yield AgentFileStore(client, BUCKET)
    finally:
        server.stop()


def test_a_presigned_upload_then_download_round_trips_over_http(served_store):
    file = a_file("Relevé août.csv", content_type="text/csv; charset=utf-8")
    body = b"date,amount\n2026-05-01,12.50\n"
    put = requests.put(served_store.upload_url(file), data=body, headers={"Content-Type": file.content_type},
                       timeout=10)
    assert put.status_code == 200, put.text
    assert served_store.landed_size(file) == len(body)
    got = requests.get(served_store.download_url(file), timeout=10)
    assert got.status_code == 200 and got.content == body
    assert got.headers["Content-Disposition"] == (
        "attachment; filename=\"Relev_ ao_t.csv\"; filename*=UTF-8''Relev%C3%A9%20ao%C3%BBt.csv")
    assert got.headers["Content-Type"] == "text/csv; charset=utf-8"
