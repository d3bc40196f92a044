"""The bytes of agents' files in the data bucket (their records are the agents repository's):

    agents/<environment>/<agent_id>/input/<file_id>/<filename>          an input file
    agents/<environment>/<agent_id>/runs/<run_id>/<file_id>/<filename>  an output file of a run

The file's own name ends the key, so that a listing or a presigned URL shows what it is; its id
before it keeps two files of one name apart."""
from __future__ import annotations

from urllib.parse import quote

from chalicelib.domain.agents.files import AgentFile, FileTooLarge
from chalicelib.domain.errors import NotFound

PREFIX = "agents"
DELETE_BATCH = 1000  # what one DeleteObjects call takes
_MISSING = {"404", "NoSuchKey", "NotFound"}


def agent_prefix(environment: str, agent_id: str) -> str:
    return f"{PREFIX}/{_segment(environment)}/{_segment(agent_id)}/"


def file_key(file: AgentFile) -> str:
    where = "input" if file.run_id is None else f"runs/{_segment(file.run_id)}"
    return f"{agent_prefix(file.environment, file.agent_id)}{where}/{_segment(file.id)}/{_segment(file.filename)}"


def _segment(part: str) -> str:
    """One level of a key: an empty part or one holding `/` would let a key (or a prefix deleted
    whole) reach past its agent."""
    if not part or "/" in part or part in (".", ".."):
        raise ValueError(f"{part!r} cannot be one level of an agent file's key")
    return part


def attachment_disposition(filename: str) -> str:
    """`Content-Disposition: attachment` naming the file (RFC 6266): an ASCII fallback for old
    clients, and the exact name UTF-8-encoded for the others."""
    fallback = "".join(c if 32 <= ord(c) < 127 and c not in '"\\' else "_" for c in filename)
    return f"attachment; filename=\"{fallback}\"; filename*=UTF-8''{quote(filename, safe='')}"


class AgentFileStore:
    def __init__(self, s3, bucket: str, url_seconds: int = 3600, delete_batch: int = DELETE_BATCH) -> None:
        self._s3 = s3
        self.bucket = bucket
        self.url_seconds = url_seconds
        self._delete_batch = delete_batch  # S3's most; a test's smaller pages need fewer files

    def put(self, file: AgentFile, body: bytes) -> None:
        self._s3.put_object(Bucket=self.bucket, Key=file_key(file), Body=body, ContentType=file.content_type)

    def read(self, file: AgentFile, max_bytes: int) -> bytes:
        """The whole file. FileTooLarge above `max_bytes` (a cut file would pass for the whole one:
        a truncated attachment, a CSV missing rows); NotFound when nothing landed."""
        try:
            answer = self._s3.get_object(Bucket=self.bucket, Key=file_key(file))
        except self._s3.exceptions.ClientError as error:
            if error.response["Error"]["Code"] in _MISSING:
                raise NotFound(f"file {file.filename} has no content (not uploaded, or deleted)") from None
            raise
        stream = answer["Body"]
        try:
            if answer["ContentLength"] > max_bytes:  # refused from the headers: no byte of it is read
                raise FileTooLarge(file.filename, answer["ContentLength"], max_bytes)
            body: bytes = stream.read()
        finally:
            stream.close()
        return body

    def download_url(self, file: AgentFile) -> str:
        """A presigned GET that saves the file under its own name rather than showing it in the tab."""
        return self._s3.generate_presigned_url(
            "get_object", ExpiresIn=self.url_seconds,
            Params={"Bucket": self.bucket, "Key": file_key(file),
                    "ResponseContentDisposition": attachment_disposition(file.filename)})

    def upload_url(self, file: AgentFile) -> str:
        """A presigned PUT; the content type is signed, so the client sends `Content-Type` as the
        file's record has it."""
        return self._s3.generate_presigned_url(
            "put_object", ExpiresIn=self.url_seconds,
            Params={"Bucket": self.bucket, "Key": file_key(file), "ContentType": file.content_type})

    def landed_size(self, file: AgentFile) -> int | None:
        """The uploaded file's size; None while the client has not put it yet."""
        try:
            return int(self._s3.head_object(Bucket=self.bucket, Key=file_key(file))["ContentLength"])
        except self._s3.exceptions.ClientError as error:
            if error.response["Error"]["Code"] in _MISSING:
                return None
            raise

    def delete(self, file: AgentFile) -> None:
        """Idempotent: S3 answers a delete of a missing key as a success."""
        self._s3.delete_object(Bucket=self.bucket, Key=file_key(file))

    def delete_agent(self, environment: str, agent_id: str) -> None:
        """Every file of the agent, input and output, a page of the listing at a time."""
        pages = self._s3.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=agent_prefix(environment, agent_id),
            PaginationConfig={"PageSize": self._delete_batch})
        for page in pages:
            keys = [obj["Key"] for obj in page.get("Contents", [])]
            for start in range(0, len(keys), self._delete_batch):
                answer = self._s3.delete_objects(Bucket=self.bucket, Delete={
                    "Objects": [{"Key": key} for key in keys[start:start + self._delete_batch]], "Quiet": True})
                if answer.get("Errors"):  # DeleteObjects answers 200 with the keys it could not delete
                    first = answer["Errors"][0]
                    raise RuntimeError(f"{len(answer['Errors'])} files of agent {agent_id} were not deleted, "
                                       f"e.g. {first.get('Key')}: {first.get('Code')} {first.get('Message')}")
