"""Payloads (S3 objects), run files (a run's frames and rules) and the work queue."""
from __future__ import annotations

from datetime import date

import polars as pl
import pytest
from botocore.exceptions import ClientError
from polars.testing import assert_frame_equal

from chalicelib.domain.runs import RunInputsLost
from tests.contract.builders import ENV, rule


def error_code(raised: pytest.ExceptionInfo) -> str:
    return raised.value.response["Error"]["Code"]


class TestPayloadStore:
    def test_json_is_stored_compact_and_read_back(self, payloads):
        payloads.put_json("bulk/acme/1.json", {"records": [{"amount": 5, "tags": ("a", "b")}], "note": "é"})
        assert payloads.get_json("bulk/acme/1.json") == {"records": [{"amount": 5, "tags": ["a", "b"]}], "note": "é"}
        assert payloads.get_bytes("bulk/acme/1.json") == \
            b'{"records":[{"amount":5,"tags":["a","b"]}],"note":"\\u00e9"}'

    def test_head_bytes_and_size(self, payloads):
        payloads.put_json("drops/a.json", ["0123456789"])
        assert payloads.size("drops/a.json") == 14
        assert payloads.head_bytes("drops/a.json", 4) == b'["01'
        assert payloads.head_bytes("drops/a.json", 100) == b'["0123456789"]'

    def test_a_missing_object_fails_as_s3_does(self, payloads):
        assert not payloads.exists("nothing.json")
        with pytest.raises(ClientError) as raised:
            payloads.get_bytes("nothing.json")
        assert error_code(raised) == "NoSuchKey"
        with pytest.raises(ClientError) as raised:
            payloads.get_json("nothing.json")
        assert error_code(raised) == "NoSuchKey"
        with pytest.raises(ClientError) as raised:
            payloads.size("nothing.json")
        assert error_code(raised) == "404"

    def test_exists_is_for_the_exact_key(self, payloads):
        payloads.put_json("files/acme/12/chunk-000001.json", {})
        assert payloads.exists("files/acme/12/chunk-000001.json")
        assert not payloads.exists("files/acme/12/chunk")
        assert not payloads.exists("files/acme/1")

    def test_list_objects_under_a_prefix_in_key_order(self, payloads):
        for key in ("files/b.json", "files/a/2.json", "other/x.json", "files/a/1.json"):
            payloads.put_json(key, [key])
        listed = list(payloads.list_objects("files/"))
        assert [(o["Key"], o["Size"]) for o in listed] == [
            ("files/a/1.json", 18), ("files/a/2.json", 18), ("files/b.json", 16)]
        assert all(o["LastModified"] is not None for o in listed)
        assert list(payloads.list_objects("none/")) == []

    def test_upload_url_is_an_https_url_naming_the_key(self, payloads):
        url = payloads.upload_url("uploads/acme/7/file.csv", 900)
        assert url.startswith("https://")
        assert "uploads/acme/7/file.csv" in url
        assert payloads.bucket in url


class TestRunFiles:
    FRAME = pl.DataFrame({
        "id": pl.Series([1, 2, 3, 4], dtype=pl.Int64), "chunk": pl.Series([0, 1, 0, 2], dtype=pl.Int32),
        "description": ["a", None, "c", "d"], "date": [date(2024, 1, d) for d in (1, 2, 3, 4)],
    })

    def test_a_frame_reads_back_equal(self, run_files):
        run_files.write_frame(ENV, 5, "side_a", self.FRAME)
        assert_frame_equal(run_files.read_frame(ENV, 5, "side_a"), self.FRAME)

    def test_read_frame_of_one_chunk(self, run_files):
        run_files.write_frame(ENV, 5, "matches-100", self.FRAME, row_group_size=2)
        assert run_files.read_frame(ENV, 5, "matches-100", chunk=0)["id"].to_list() == [1, 3]
        assert run_files.read_frame(ENV, 5, "matches-100", chunk=2)["id"].to_list() == [4]
        empty = run_files.read_frame(ENV, 5, "matches-100", chunk=7)
        assert (empty.height, empty.schema) == (0, self.FRAME.schema)

    def test_a_chunk_of_a_frame_without_chunks_is_an_error(self, run_files):
        run_files.write_frame(ENV, 5, "side_b", self.FRAME.drop("chunk"))
        with pytest.raises(pl.exceptions.ColumnNotFoundError):
            run_files.read_frame(ENV, 5, "side_b", chunk=0)

    def test_rules_read_back_as_the_run_applies_them(self, run_files):
        rules = [rule(3, 10, reconciliation_id=2), rule(1, 20, reconciliation_id=2)]
        run_files.write_rules(ENV, 5, rules)
        read = run_files.read_rules(ENV, 5, 9)
        assert [(r.id, r.reconciliation_id, r.created_at, r.definition) for r in read] == [
            (3, 9, None, rules[0].definition), (1, 9, None, rules[1].definition)]

    def test_json_reads_back_and_its_location_is_where_it_was_written(self, run_files):
        written = run_files.write_json(ENV, 5, "partitions/0/manifest", [{"round": 0, "partition": 3}])
        assert run_files.read_json(ENV, 5, "partitions/0/manifest") == [{"round": 0, "partition": 3}]
        assert run_files.json_location(ENV, 5, "partitions/0/manifest") == written
        assert written["Key"].endswith(f"/{ENV}/5/partitions/0/manifest.json")

    def test_exists_answers_for_a_name_prefix(self, run_files):
        run_files.write_frame(ENV, 5, "matches-100", self.FRAME)
        run_files.write_rules(ENV, 5, [])
        assert run_files.exists(ENV, 5, "matches-100")
        assert run_files.exists(ENV, 5, "matches")  # any file whose name starts so
        assert run_files.exists(ENV, 5, "rules.json")
        assert not run_files.exists(ENV, 5, "members")
        assert not run_files.exists(ENV, 50, "matches")
        assert run_files.read_rules(ENV, 5, 1) == []

    def test_a_missing_file_is_an_input_the_run_lost(self, run_files):
        """Not S3's ClientError, which the state machine would retry: RunInputsLost, named by the run and the file."""
        with pytest.raises(RunInputsLost, match="run 5's working file side_a.parquet is gone"):
            run_files.read_frame(ENV, 5, "side_a")
        with pytest.raises(RunInputsLost, match="members-100.parquet"):
            run_files.read_frame(ENV, 5, "members-100", chunk=0)
        with pytest.raises(RunInputsLost, match="rules.json"):
            run_files.read_rules(ENV, 5, 1)


class TestWorkQueue:
    def test_messages_arrive_as_json_in_the_order_sent(self, backend, queue):
        queue.send({"environment": ENV, "job_id": 1})
        queue.send({"environment": ENV, "job_id": 2, "streams": ("bank", "fees")})
        assert backend.received() == [{"environment": ENV, "job_id": 1},
                                      {"environment": ENV, "job_id": 2, "streams": ["bank", "fees"]}]

    def test_a_message_json_cannot_carry_is_refused_and_not_sent(self, backend, queue):
        with pytest.raises(TypeError):
            queue.send({"environment": ENV, "at": date(2024, 1, 1)})
        assert backend.received() == []

    def test_nothing_sent_nothing_received(self, backend, queue):
        assert backend.received() == []
        queue.send({})
        assert backend.received() == [{}]
