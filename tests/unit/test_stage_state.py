"""What `make deploy` and `make destroy` keep in the account (infra/stage_state.py): the stage's lock and
Chalice's record of the app; what a failed `chalice deploy` records (infra/chalice_run.py); and the
committed Chalice configuration, which a plain `chalice deploy` refuses. The whole of it, `make deploy`
run from several checkouts, is proven in tests/deploy/test_make_deploy.py."""
from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import boto3
import pytest
from moto import mock_aws

from infra import chalice_run, deploy, stage_state

REGION = "us-east-1"
BUCKET = "recon-prod-artifacts-123456789012-us-east-1"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def s3():
    with mock_aws():
        client = boto3.client("s3", region_name=REGION)
        client.create_bucket(Bucket=BUCKET)
        yield client


def _holder(**given) -> dict:
    return {**stage_state.holder("prod", "make deploy", "arn:aws:iam::123456789012:user/ada"), **given}


# --- the lock -----------------------------------------------------------------------------------------

def test_one_holder_at_a_time_and_the_refusal_names_who_holds_it_and_how_to_break_it(s3):
    since = (datetime.now(UTC) - timedelta(minutes=42)).isoformat(timespec="seconds")
    first = stage_state.acquire(s3, BUCKET, _holder(user="ada", host="laptop", pid=7, since=since))
    with pytest.raises(stage_state.StageLocked) as refused:
        stage_state.acquire(s3, BUCKET, _holder(user="ci", host="runner"))
    said = str(refused.value)
    assert said.startswith(f"stage prod is locked: make deploy by arn:aws:iam::123456789012:user/ada (ada@laptop, pid 7) "
                           f"since {since} (42 min ago).")
    assert said.endswith("break the lock: make deploy-unlock STAGE=prod")
    stage_state.release(s3, first)
    assert stage_state.read_lock(s3, BUCKET) is None
    second = stage_state.acquire(s3, BUCKET, _holder(user="ci"))  # free again
    assert stage_state.read_lock(s3, BUCKET)["user"] == "ci"
    stage_state.release(s3, second)


def test_the_lock_is_released_however_the_block_ends(s3):
    with pytest.raises(RuntimeError, match="the deploy failed"), stage_state.locked(s3, BUCKET, _holder()):
        assert stage_state.read_lock(s3, BUCKET) is not None
        raise RuntimeError("the deploy failed")
    assert stage_state.read_lock(s3, BUCKET) is None


def test_a_lock_broken_and_taken_by_another_is_left_to_it(s3):
    notes = []
    mine = stage_state.acquire(s3, BUCKET, _holder(user="ada"))
    assert stage_state.break_lock(s3, BUCKET)["user"] == "ada"  # make deploy-unlock, as ada's deploy still runs
    stage_state.acquire(s3, BUCKET, _holder(user="ci", command="make destroy"))
    stage_state.release(s3, mine, notes.append)
    assert stage_state.read_lock(s3, BUCKET)["user"] == "ci"
    assert "was broken while this make deploy ran, and is now make destroy by" in notes[0]


def test_releasing_a_lock_whose_bucket_destroy_deleted_is_done(s3):
    lock = stage_state.acquire(s3, BUCKET, _holder(command="make destroy"))
    s3.delete_object(Bucket=BUCKET, Key=stage_state.LOCK_KEY)
    s3.delete_bucket(Bucket=BUCKET)
    stage_state.release(s3, lock)


def test_unlocking_a_free_stage_says_so(s3):
    assert stage_state.break_lock(s3, BUCKET) is None


@pytest.mark.parametrize(("seconds", "said"), [(5, "5 s"), (600, "10 min"), (3 * 3600, "3 h"), (5 * 86400, "5 days")])
def test_the_age_of_a_lock_reads_in_a_unit_that_says_whether_it_is_stale(seconds, said):
    now = datetime(2026, 11, 28, 12, 0, tzinfo=UTC)
    held = _holder(since=(now - timedelta(seconds=seconds)).isoformat())
    assert stage_state.describe(held, now).endswith(f"({said} ago)")


def test_a_second_first_deploy_of_a_stage_stops_saying_it_is_being_created(tmp_path):
    """The lock lives in the artifacts stack's bucket, which a new stage's first deploy creates unlocked: of
    two at once, CloudFormation creates the stack for one and refuses the other (AlreadyExists)."""
    with mock_aws():
        session = boto3.session.Session(region_name=REGION)

        def raced(cfn, name, *args, **kwargs):
            raise cfn.exceptions.AlreadyExistsException(
                {"Error": {"Code": "AlreadyExistsException", "Message": f"Stack [{name}] already exists"}}, "CreateStack")

        with pytest.raises(stage_state.StageLocked, match="stage prod is being created by another deploy"):
            deploy.deploy("prod", log=lambda _: None, options=deploy.StageOptions(mail_from="agents@acme.test"),
                          session=session, check=lambda *args, **kwargs: None, put_stack=raced, deployed_dir=tmp_path)


# --- the app's record -----------------------------------------------------------------------------------

RECORD = {"resources": [{"name": "rest_api", "resource_type": "rest_api", "rest_api_id": "abc123",
                         "rest_api_url": "https://abc123.execute-api.us-east-1.amazonaws.com/api/"}],
          "schema_version": "2.0", "backend": "api"}


def test_the_accounts_record_replaces_a_checkouts_stale_one_and_goes_back_after(s3, tmp_path):
    deployed = tmp_path / "deployed"
    deployed.mkdir()
    (deployed / "prod.json").write_text(json.dumps({"resources": [], "schema_version": "2.0", "backend": "api"}))
    s3.put_object(Bucket=BUCKET, Key="deploy/chalice/prod.json", Body=json.dumps(RECORD).encode())
    assert stage_state.fetch(s3, BUCKET, "prod", deployed) == "account"
    assert json.loads((deployed / "prod.json").read_text()) == RECORD
    changed = {**RECORD, "resources": []}
    (deployed / "prod.json").write_text(json.dumps(changed))
    assert stage_state.store(s3, BUCKET, "prod", deployed)
    assert json.loads(s3.get_object(Bucket=BUCKET, Key="deploy/chalice/prod.json")["Body"].read()) == changed


def test_a_checkout_that_deployed_before_the_record_was_kept_in_the_account_brings_its_own(s3, tmp_path):
    (tmp_path / "prod.json").write_text(json.dumps(RECORD))
    notes = []
    assert stage_state.fetch(s3, BUCKET, "prod", tmp_path, notes.append) == "checkout"
    assert "this checkout's prod.json is used, and kept there from now on" in notes[0]
    assert json.loads((tmp_path / "prod.json").read_text()) == RECORD


def test_a_new_stage_has_no_record_anywhere(s3, tmp_path):
    assert stage_state.fetch(s3, BUCKET, "prod", tmp_path / "deployed") == "none"
    assert not stage_state.store(s3, BUCKET, "prod", tmp_path / "deployed")


def test_no_record_and_a_deployed_app_is_refused_before_anything_changes(tmp_path):
    with mock_aws():
        session = boto3.session.Session(region_name=REGION)
        session.client("s3").create_bucket(Bucket=BUCKET)
        assert deploy.fetch_app_record(session, BUCKET, "prod", deployed_dir=tmp_path) == "none"  # nothing deployed: a new stage
        iam = session.client("iam")
        role = iam.create_role(RoleName="r", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
        session.client("lambda").create_function(FunctionName="recon-prod", Runtime="python3.12", Role=role,
                                                  Handler="app.app", Code={"ZipFile": b"PK\x05\x06" + bytes(18)})
        with pytest.raises(deploy.DeployRefused, match=r"stage prod has its app deployed \(1 functions, such as "
                                                        r"recon-prod\) but no record"):
            deploy.fetch_app_record(session, BUCKET, "prod", deployed_dir=tmp_path)


# --- a failed `chalice deploy` ------------------------------------------------------------------------

def test_a_failed_deploy_records_what_it_made_over_what_was_recorded_before():
    previous = {"resources": [
        {"name": "api_handler", "resource_type": "lambda_function", "lambda_arn": "arn:...:recon-prod"},
        {"name": "bulk_worker-sqs-event-source", "resource_type": "sqs_event", "event_uuid": "old-uuid",
         "queue": "recon-prod-bulk", "lambda_arn": "arn:...:recon-prod-bulk_worker"},
        {"name": "retired", "resource_type": "lambda_function", "lambda_arn": "arn:...:recon-prod-retired"}],
        "schema_version": "2.0", "backend": "api"}
    recorded = [  # the failed run updated the API's function, made a new one and the REST API, then stopped
        {"name": "api_handler", "resource_type": "lambda_function", "lambda_arn": "arn:...:recon-prod"},
        {"name": "upgrade_marker", "resource_type": "lambda_function", "lambda_arn": "arn:...:recon-prod-upgrade_marker"},
        {"name": "rest_api", "resource_type": "rest_api", "rest_api_id": "abc123"}]
    merged = chalice_run.merge_state(previous, recorded)
    assert [r["name"] for r in merged["resources"]] == [
        "api_handler", "bulk_worker-sqs-event-source", "retired", "upgrade_marker", "rest_api"]
    assert merged["resources"][1]["event_uuid"] == "old-uuid"  # not reached: as it was
    assert merged["resources"][4] == recorded[2]
    assert (merged["schema_version"], merged["backend"]) == ("2.0", "api")
    assert chalice_run.merge_state(None, recorded)["resources"] == recorded  # a new stage's first deploy


def test_deleting_what_is_gone_already_is_done(monkeypatch):
    from chalice.awsclient import TypedAWSClient

    for name in ("delete_function", "delete_rest_api", "delete_rule", "remove_lambda_event_source"):
        monkeypatch.setattr(TypedAWSClient, name, getattr(TypedAWSClient, name))  # restored after the test
    with mock_aws():
        import botocore.session

        session = botocore.session.get_session()
        session.set_config_variable("region", REGION)
        client = TypedAWSClient(session)
        with pytest.raises(Exception, match="recon-prod-gone"):
            client.delete_function("recon-prod-gone")
        chalice_run.tolerate_gone()
        client.delete_function("recon-prod-gone")
        client.delete_rule("recon-prod-gone-event")


# --- the committed configuration ----------------------------------------------------------------------

def test_a_plain_chalice_deploy_stops_before_making_anything_for_a_stage_not_generated():
    """No stage of the committed file has a role, and Chalice manages none (manage_iam_role false), so
    its validation, before any package or AWS call, stops a plain `chalice deploy`."""
    from chalice.config import Config
    from chalice.deploy.validate import validate_configuration

    from app import app

    def as_chalice_reads_it(stage: str, config: dict) -> Config:  # as its command line does (CLIFactory)
        return Config(chalice_stage=stage, user_provided_params={"chalice_app": app}, config_from_disk=config,
                      default_params={"project_dir": str(ROOT), "api_gateway_stage": "api", "autogen_policy": True})

    committed = json.loads((ROOT / ".chalice" / "config.json").read_text())
    for stage in ("dev", "prod"):
        with pytest.raises(ValueError, match="you must provide an 'iam_role_arn'"):
            validate_configuration(as_chalice_reads_it(stage, committed))
    outputs = {**deploy._placeholder_outputs(), "ApiRoleArn": "arn:aws:iam::123456789012:role/api"}
    generated = deploy.stage_config("prod", outputs)
    assert generated["version"] == "2.0"
    validate_configuration(as_chalice_reads_it("prod", generated))  # what make deploy generates passes
