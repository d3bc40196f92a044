"""Messages name things as the caller knows them: the resource they asked for, the directory looked in."""
from chalicelib.cli import main


def test_an_unknown_bulk_request_or_file_import_is_named_as_asked_for(api):
    # Given no job 999999; When asked for through each of its routes; Then each names its own resource
    assert api.get("/v1/bulk_requests/999999").json_body["message"] == "bulk request '999999' not found"
    assert api.get("/v1/file_imports/999999").json_body["message"] == "file import 999999 not found"
    cancelled = api.post("/v1/file_imports/999999/cancel")
    assert (cancelled.status_code, cancelled.json_body["message"]) == (404, "file import 999999 not found")


def test_the_command_line_says_which_data_directory_had_no_local_stack_and_how_to_point_it(
        tmp_path, monkeypatch, capsys):
    # Given no local stack in the data directory given, and no AWS that answers
    monkeypatch.setenv("RECON_DYNAMODB_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    # When a command runs
    code = main(["--data-dir", str(tmp_path), "keys", "list"])
    # Then it names the directory it looked in and both ways to point it elsewhere
    error = capsys.readouterr().err
    assert code == 1
    assert f"No local stack runs in the data directory {tmp_path.resolve()}" in error
    assert "--data-dir" in error and "RECON_DATA_DIR" in error
