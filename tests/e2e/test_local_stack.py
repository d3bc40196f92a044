"""The local stack as a person uses it: `make run`, curl, the key CLI."""
import re
import shlex
import time
import uuid
from urllib.parse import quote

import pytest
import requests

from chalicelib.container import Container
from chalicelib.local.launcher import StackProcess as RunningStack
from chalicelib.local.processes import pid_alive
from chalicelib.local.stack import StackInfo
from chalicelib.settings import Settings


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_health_answers_without_a_key(stack):
    response = stack.request("GET", "/health", key=None)
    assert response.status_code == 200 and response.json() == {"status": "ok"}


def test_the_seeded_key_works_and_others_are_401(stack):
    assert stack.request("GET", "/data_streams").status_code == 200
    response = stack.request("GET", "/data_streams", key="rk_wrong")
    assert response.status_code == 401 and set(response.json()) == {"message"}
    bearer = stack.request("GET", "/data_streams", key=None, headers={"Authorization": f"Bearer {stack.api_key}"})
    assert bearer.status_code == 200


def test_streams_and_property_definitions_end_to_end(stack):
    key = unique("bank")
    created = stack.request("POST", "/data_streams", {"key": key, "name": "Bank", "type": "bank_feed",
                                                       "bank_account_id": "acct_1"})
    assert created.status_code == 201, created.text
    assert stack.request("POST", "/data_streams", {"key": key, "name": "again"}).status_code == 409
    assert stack.request("GET", f"/data_streams/{key}").json()["type"] == "bank_feed"
    renamed = stack.request("PATCH", f"/data_streams/{key}", {"name": "Operating account"})
    assert renamed.json()["name"] == "Operating account"

    definition = stack.request("POST", "/data_stream_property_definitions",
                               {"key": "payout_id", "name": "Payout", "type": "string", "data_stream_key": key})
    assert definition.status_code == 201, definition.text
    listed = stack.request("GET", "/data_stream_property_definitions", params={"data_stream_key": key}).json()
    assert [d["key"] for d in listed] == ["payout_id"]
    patched = stack.request("PATCH", f"/data_stream_property_definitions/{definition.json()['id']}",
                            {"optional": True})
    assert patched.json()["optional"] is True

    assert stack.request("DELETE", f"/data_streams/{key}").status_code == 204
    assert stack.request("GET", f"/data_streams/{key}").status_code == 404
    assert stack.request("GET", f"/data_stream_property_definitions/{definition.json()['id']}").status_code == 404


def test_pages_follow_the_cursor_over_http(stack):
    keys = [unique("page") for _ in range(3)]
    for key in keys:
        stack.request("POST", "/data_streams", {"key": key, "name": key})
    seen, cursor = [], None
    while True:
        params = {"limit": 2, **({"cursor": cursor} if cursor else {})}
        page = stack.request("GET", "/data_streams", params=params).json()
        seen += [s["key"] for s in page["data"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen.index(keys[2]) < seen.index(keys[1]) < seen.index(keys[0])
    assert stack.request("GET", "/data_streams", params={"cursor": "nonsense"}).status_code == 400


def test_client_errors_have_our_shape_over_http(stack):
    malformed = stack.request("POST", "/data_streams", key="default", data="{oops",
                              headers={"Content-Type": "application/json"})
    assert malformed.status_code == 400 and set(malformed.json()) == {"message"}
    wrong_type = stack.request("POST", "/data_streams", data="key=x", headers={"Content-Type": "text/plain"})
    assert wrong_type.status_code == 415
    invalid = stack.request("POST", "/data_streams", {"key": "BAD KEY"})
    assert invalid.status_code == 422
    assert {e["field"] for e in invalid.json()["errors"]} == {"key", "name"}
    unknown_route = stack.request("GET", "/no_such_thing")
    assert unknown_route.status_code == 404 and set(unknown_route.json()) == {"message"}


def test_cli_keys_create_list_revoke_against_the_running_stack(stack):
    environment = unique("env")
    created = stack.cli("keys", "create", "--environment", environment)
    assert created.returncode == 0, created.stderr
    secret = created.stdout.strip().splitlines()[-1]
    assert secret.startswith("rk_")

    key = unique("iso")
    assert stack.request("POST", "/data_streams", {"key": key, "name": "A's"}).status_code == 201
    assert stack.request("GET", f"/data_streams/{key}", key=secret).status_code == 404
    assert key not in [s["key"] for s in stack.request("GET", "/data_streams", key=secret).json()["data"]]

    listing = stack.cli("keys", "list")
    assert listing.returncode == 0 and environment in listing.stdout and secret not in listing.stdout
    [row] = [line for line in listing.stdout.splitlines() if environment in line]
    key_id = row.split()[0]
    assert stack.cli("keys", "revoke", key_id).returncode == 0
    assert stack.request("GET", "/data_streams", key=secret).status_code == 401


def test_note_changes_runs_against_the_running_stack_which_records_that_it_notes(stack):
    # The stack file says what the running service notes, whatever the command's own environment says
    assert stack.stack_info()["note_changed_blocks"] is True
    environment = unique("env")
    created = stack.cli("keys", "create", "--environment", environment)
    assert created.returncode == 0, created.stderr
    secret = created.stdout.strip().splitlines()[-1]
    key = unique("noted")
    assert stack.request("POST", "/data_streams", {"key": key, "name": "Noted"}, key=secret).status_code == 201

    # A stream this release made is noted from its creation: nothing to mark, no wait
    noted = stack.cli("streams", "note-changes", "--environment", environment)
    assert noted.returncode == 0, noted.stderr
    assert "marked" not in noted.stdout


def test_the_printed_admin_sign_in_gets_a_token_of_the_local_pool(stack):
    """What `make run` prints: the admin's email and password, and the CLI that signs them in at the
    embedded Cognito; the token verifies against the keys that pool serves over HTTP."""
    printed = re.findall(r"Admin sign-in \(local user pool\):\s+(\S+)\s+/\s+(\S+)", stack.log_path.read_text())
    assert printed, "make run printed no admin sign-in"
    email, password = printed[-1]
    # The printed command, as a shell splits it (a password may start with "-": it is written --password=...).
    [command] = re.findall(r"TOKEN=\$\(python -m chalicelib\.cli (token .*)\)$", stack.log_path.read_text(),
                           re.MULTILINE)[-1:]
    assert shlex.split(command) == ["token", "--email", email, f"--password={password}"]
    signed_in = stack.cli(*shlex.split(command))
    assert signed_in.returncode == 0, signed_in.stderr
    token = signed_in.stdout.strip()
    info = StackInfo(**stack.stack_info())
    verified = Container(info.settings(Settings(data_dir=stack.data_dir))).identity.verify(token)
    assert verified.email == email and verified.token_use == "id" and verified.subject
    refused = stack.cli("token", "--email", email, "--password", "Wrong-password-1")
    assert refused.returncode == 1 and "cannot sign in" in refused.stderr and password not in refused.stderr


def test_a_second_stack_runs_beside_keeps_its_data_and_stops_all_it_started(stack, tmp_path):
    other = RunningStack(tmp_path / "other", api_key="rk_other-stack").start()
    try:
        assert other.port != stack.port
        created = other.request("POST", "/data_streams", {"key": "kept", "name": "Kept"})
        assert created.status_code == 201
        assert stack.request("GET", "/data_streams/kept").status_code == 404
        children = other.stack_info()["child_pids"]
        assert all(pid_alive(pid) for pid in children)
    finally:
        other.stop()
    deadline = time.monotonic() + 10
    while any(pid_alive(pid) for pid in children) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(pid_alive(pid) for pid in children)
    assert not (other.data_dir / "stack.json").exists()
    with pytest.raises(requests.ConnectionError):
        requests.get(f"{other.url}/health", timeout=1)

    again = RunningStack(other.data_dir, api_key="rk_other-stack")
    again.start()
    try:
        assert again.request("GET", "/data_streams/kept").json()["name"] == "Kept"
    finally:
        again.stop()


def signed_in_token(stack) -> str:
    """The admin's token, from the sign-in `make run` printed."""
    [command] = re.findall(r"TOKEN=\$\(python -m chalicelib\.cli (token .*)\)$", stack.log_path.read_text(),
                           re.MULTILINE)[-1:]
    signed_in = stack.cli(*shlex.split(command))
    assert signed_in.returncode == 0, signed_in.stderr
    return signed_in.stdout.strip()


def as_person(stack, token: str, method: str, path: str, json_body=None):
    return stack.request(method, path, json_body, key=None, headers={"Authorization": f"Bearer {token}"})


def test_people_sign_in_at_the_embedded_provider_and_their_role_decides(stack):
    """Over HTTP with tokens the local pool signed: the admin `make run` made invites a viewer, who
    reads but may not write; once deactivated, the viewer's token is refused."""
    admin_token = signed_in_token(stack)
    listed, cursor = [], ""
    while cursor is not None:  # the shared stack holds other tests' people too: every page
        users = as_person(stack, admin_token, "GET", f"/users?limit=100{f'&cursor={quote(cursor)}' if cursor else ''}")
        assert users.status_code == 200, users.text
        listed += users.json()["data"]
        cursor = users.json()["next_cursor"]
    [admin] = [u for u in listed if u["role"] == "admin" and u["name"] == "Local admin"]
    assert admin["status"] == "active" and admin["last_sign_in_at"]

    email = f"{unique('viewer')}@example.com"
    invited = as_person(stack, admin_token, "POST", "/users", {"email": email, "name": "Vera", "role": "viewer"})
    assert invited.status_code == 201, invited.text
    viewer = invited.json()
    assert viewer["status"] == "invited" and viewer["idp_user_id"]
    # The invitation's temporary password (mailed on AWS; the embedded provider mails none), then the
    # person's first sign-in choosing their own.
    info = StackInfo(**stack.stack_info())
    services = Container(info.settings(Settings(data_dir=stack.data_dir)))
    services.aws.client("cognito-idp").admin_set_user_password(
        UserPoolId=services.settings.user_pool_id, Username=email, Password="Temporary-Pass-1", Permanent=False)
    signed_in = stack.cli("token", "--email", email, "--password=Temporary-Pass-1", "--new-password=Chosen-Pass-22")
    assert signed_in.returncode == 0, signed_in.stderr
    viewer_token = signed_in.stdout.strip()

    assert as_person(stack, viewer_token, "GET", "/data_streams").status_code == 200
    refused = as_person(stack, viewer_token, "POST", "/data_streams", {"key": unique("no"), "name": "No"})
    assert refused.status_code == 403 and "admin" in refused.json()["message"]
    assert as_person(stack, viewer_token, "GET", f"/users/{viewer['id']}").json()["status"] == "active"

    gone = as_person(stack, admin_token, "DELETE", f"/users/{viewer['id']}")
    assert gone.status_code == 200 and gone.json()["status"] == "deactivated"
    assert as_person(stack, viewer_token, "GET", "/data_streams").status_code == 401
    again = stack.cli("token", "--email", email, "--password=Chosen-Pass-22")
    assert again.returncode == 1  # the provider signs them in no more
    tampered = admin_token[:-6] + ("A" if admin_token[-6] != "A" else "B") + admin_token[-5:]
    assert as_person(stack, tampered, "GET", "/users").status_code == 401
