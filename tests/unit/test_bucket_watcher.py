"""The local stack's bucket watcher (chalicelib/local/runtime.py `watch_bucket`) delivers an object
only once it is written whole. s3rver lists a file while its PUT still writes it, with the MD5 of
the part written so far: listed as S3 lists it (an object only once complete), the watcher would
send an event naming a file that never was, then another for the real one (two imports of a drop,
the first failing as replaced). The listing is scripted as s3rver answers it during a slow PUT."""
import threading
import time
from datetime import UTC, datetime

from chalice import Chalice

from chalicelib.local.runtime import LocalRuntime

T = datetime(2026, 12, 2, 10, 0, 0, tzinfo=UTC)


class MidWriteListing:
    """`list_objects_v2` pages as s3rver gives them while a 30-byte PUT is written, then written."""

    def __init__(self) -> None:
        self.polls = 0
        self._lock = threading.Lock()
        self._script = [
            {"Key": "drops/acme/bank/a.csv", "ETag": '"md5-of-10"', "Size": 10, "LastModified": T},
            {"Key": "drops/acme/bank/a.csv", "ETag": '"md5-of-10"', "Size": 20, "LastModified": T},  # its .md5 stale
            {"Key": "drops/acme/bank/a.csv", "ETag": '"md5-of-30"', "Size": 30, "LastModified": T},  # written
        ]

    def get_paginator(self, operation):
        assert operation == "list_objects_v2"
        return self

    def paginate(self, Bucket, Prefix):  # noqa: N803 - boto3's parameter names
        with self._lock:
            listed = self._script[min(self.polls, len(self._script) - 1)]
            self.polls += 1
        return [{"Contents": [listed]}]


def test_an_object_listed_while_it_is_written_is_delivered_once_whole(tmp_path):
    app = Chalice(app_name="watch-test")
    delivered = []

    @app.on_cw_event({"source": ["aws.s3"], "detail-type": ["Object Created"]})
    def created(event):
        delivered.append((event.detail["object"]["etag"], event.detail["object"]["size"]))

    listing = MidWriteListing()
    runtime = LocalRuntime(app, None, "us-east-1", log=lambda _: None)
    runtime.watch_bucket(listing, "bucket", ("drops/",), tmp_path / "delivered.jsonl", interval_seconds=0.01)
    deadline = time.monotonic() + 30
    while listing.polls < 8:  # the write's three listings, then five of the file as written
        assert time.monotonic() < deadline
        time.sleep(0.01)
    runtime.stop()

    assert delivered == [("md5-of-30", 30)]
