"""Agents' files: the input files attached to an agent (every run reads them) and the output files a
run writes, some of which its delivery mails. Names come from clients and from the model, so each
is made safe before it names an S3 object, a download or an attachment."""
from __future__ import annotations

import mimetypes
import re
import unicodedata
from dataclasses import dataclass
from datetime import datetime

from chalicelib.domain.errors import shown

MAX_FILENAME = 120
MAX_EXTENSION = 16  # a longer "extension" is part of the name, not a type
MAX_INLINE_BYTES = 5 * 1024 * 1024
DEFAULT_CONTENT_TYPE = "application/octet-stream"

# Characters Windows refuses in names; a downloaded file must save anywhere.
_RESERVED = re.compile(r'[<>:"|?*]')
_SPACES = re.compile(r"\s+")
# What agents commonly write that Python's own table lacks (or has only on some systems: the
# module's global table also reads /etc/mime.types, so it differs between a laptop and Lambda).
_EXTRA_TYPES = {
    ".md": "text/markdown", ".markdown": "text/markdown", ".jsonl": "application/x-ndjson",
    ".ndjson": "application/x-ndjson", ".parquet": "application/vnd.apache.parquet",
    ".yaml": "application/yaml", ".yml": "application/yaml", ".log": "text/plain",
    ".xlsx": "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
}
_COMPRESSED_TYPES = {"gzip": "application/gzip", "bzip2": "application/x-bzip2", "xz": "application/x-xz",
                     "br": "application/x-brotli", "compress": "application/x-compress"}
_BUILTIN_TYPES = mimetypes.MimeTypes()  # Python's built-in table only: the same answer everywhere


class BadFilename(ValueError):
    """A file name that leaves nothing usable once made safe; the message says why."""


class FileTooLarge(ValueError):
    """A file bigger than a reader takes (a run reading it, a message attaching it)."""

    def __init__(self, filename: str, byte_size: int, limit: int) -> None:
        super().__init__(f"{filename} is {byte_size} bytes, more than the {limit} bytes allowed")
        self.filename = filename
        self.byte_size = byte_size
        self.limit = limit


@dataclass(frozen=True)
class AgentFile:
    """A file's record (its bytes are in S3). Input files have no run_id; output files their run's."""
    environment: str
    agent_id: str
    id: str  # a UUID
    filename: str
    byte_size: int | None  # None until an upload lands
    content_type: str
    created_at: datetime
    run_id: str | None = None

    @property
    def is_output(self) -> bool:
        return self.run_id is not None


def safe_filename(name: str) -> str:
    """The name as a file may be called: its last path component (`/` and `\\` both separate, so
    `C:\\x\\y.csv` is `y.csv` and `../../etc/passwd` is `passwd`), NFKC-normalised first (so that a
    full-width slash separates too), without control or format characters (bidi overrides
    included), Windows-reserved characters as `_`, whitespace runs as one space, no leading dots
    (no hidden files, no `.` or `..`) nor trailing dots or spaces, at most MAX_FILENAME characters
    with the extension kept. BadFilename when nothing usable remains."""
    if not isinstance(name, str) or not name.strip():
        raise BadFilename("the file name is empty")
    text = unicodedata.normalize("NFKC", name).replace("\\", "/")
    if text.rstrip().endswith("/"):
        raise BadFilename(f"the file name {shown(name)!r} ends with a path separator: it names a folder")
    text = text.rsplit("/", 1)[-1]
    text = "".join(" " if c.isspace() else c for c in text if c.isspace() or unicodedata.category(c)[0] != "C")
    text = _SPACES.sub(" ", _RESERVED.sub("_", text)).lstrip(". ").rstrip(". ")
    if not text:
        raise BadFilename(f"the file name {shown(name)!r} has no usable characters (a file name needs letters "
                          "or digits beside dots, spaces and path separators)")
    return _shortened(text)


def _shortened(name: str) -> str:
    if len(name) <= MAX_FILENAME:
        return name
    stem, dot, extension = name.rpartition(".")
    if not dot or not stem or len(extension) + 1 > MAX_EXTENSION:
        return name[:MAX_FILENAME].rstrip(". ")
    return stem[:MAX_FILENAME - len(extension) - 1].rstrip(". ") + "." + extension


def content_type_for(filename: str) -> str:
    """The MIME type a file's name suggests; text types say UTF-8 (what agents write), so that a
    browser or mail client shows accented text right. A compressed file is its compression's type."""
    lower = filename.lower()
    base, dot, extension = lower.rpartition(".")
    # "./" first: guess_type reads a leading `word:` as a URL scheme (`data:text/html,...`).
    kind, encoding = _BUILTIN_TYPES.guess_type("./" + lower)
    if encoding is not None:
        return _COMPRESSED_TYPES.get(encoding, DEFAULT_CONTENT_TYPE)
    if dot and base:
        kind = _EXTRA_TYPES.get("." + extension, kind)
    if kind is None:
        return DEFAULT_CONTENT_TYPE
    return f"{kind}; charset=utf-8" if kind.startswith("text/") else kind
