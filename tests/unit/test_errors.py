import json

import pytest
from pydantic import BaseModel, ValidationError

from chalicelib.api import errors as api_errors
from chalicelib.api.errors import ERROR_STATUSES, error_body, field_path, status_of, validation_failed
from chalicelib.domain import errors as domain_errors
from chalicelib.domain.approvals import ApprovalRequired
from chalicelib.domain.errors import DomainError, FieldError, NotFound, ValidationFailed, failure_reason


def _all_error_types():
    found = set()
    for module in (domain_errors, api_errors):
        for value in vars(module).values():
            if isinstance(value, type) and issubclass(value, DomainError) and value is not DomainError:
                found.add(value)
    return found


def test_every_error_type_has_exactly_one_status_in_the_table_a_client_error_unless_a_service_is_down():
    for error_type in _all_error_types() - {ApprovalRequired}:
        error = error_type([FieldError("f", "m")]) if error_type is ValidationFailed else error_type("m")
        expected = range(503, 504) if error_type is api_errors.ServiceUnavailable else range(400, 500)
        assert status_of(error) in expected, error_type


def test_the_table_maps_the_statuses_of_the_conventions_and_the_health_checks_503():
    assert sorted(ERROR_STATUSES.values()) == [202, 400, 401, 403, 404, 409, 413, 415, 422, 503]


def test_the_one_answer_that_is_no_error_is_an_action_held_for_an_approver():
    """ApprovalRequired stops an action as an error does, but the route answers 202 with the approval."""
    assert [t for t, status in ERROR_STATUSES.items() if status < 400] == [ApprovalRequired]


def test_field_paths_read_like_the_conventions():
    assert field_path(("records", 3, "amount")) == "records[3].amount"
    assert field_path(("name",)) == "name"
    assert field_path(()) == ""


def test_a_validation_error_body_lists_each_field_with_its_message():
    class Item(BaseModel):
        amount: int

    class Body(BaseModel):
        records: list[Item]

    with pytest.raises(ValidationError) as caught:
        Body.model_validate({"records": [{"amount": 1}, {}]})
    body = error_body(validation_failed(caught.value))
    assert body["errors"] == [{"field": "records[1].amount", "message": "is required"}]
    assert "records[1].amount" in body["message"]


def test_a_not_found_body_is_only_a_message():
    assert error_body(NotFound("data stream 'x' not found")) == {"message": "data stream 'x' not found"}



ACCESS_DENIED = ("An error occurred (AccessDeniedException) when calling the PutItem operation: User: "
                 "arn:aws:sts::123456789012:assumed-role/recon-prod-api/recon-prod is not authorized to perform: "
                 "dynamodb:PutItem on resource: arn:aws:dynamodb:eu-west-1:123456789012:table/recon-prod")


def test_a_failure_reason_hides_the_arns_and_account_id_an_aws_error_names():
    lambda_error = {"Error": "ClientError", "Cause": json.dumps({
        "errorMessage": ACCESS_DENIED, "errorType": "ClientError", "stackTrace": ["  File \"/var/task/app.py\""]})}
    reason = failure_reason(lambda_error)
    assert reason == ("ClientError: An error occurred (AccessDeniedException) when calling the PutItem operation: "
                      "User: <hidden> is not authorized to perform: dynamodb:PutItem on resource: <hidden>")
    assert "123456789012" not in failure_reason(f"account 123456789012 of {ACCESS_DENIED}")
    assert failure_reason(RuntimeError("bucket arn:aws:s3:::recon-prod-files gone")) == (
        "RuntimeError: bucket <hidden> gone")


def test_a_failure_reason_keeps_what_a_person_needs():
    assert failure_reason({"Error": "States.Timeout", "Cause": "the worker timed out"}) == (
        "States.Timeout: the worker timed out")
    assert failure_reason({"Error": "Sandbox.Timedout"}) == "Sandbox.Timedout"
    assert failure_reason({}, otherwise="the run failed") == "the run failed"
    assert failure_reason(None, otherwise="the run failed") == "the run failed"
    # amounts and record ids are not account ids: only a 12-digit number standing alone is
    assert failure_reason("record 1234567890123 holds 100000000000.00, 1,100000000000") == (
        "record 1234567890123 holds 100000000000.00, 1,100000000000")
    assert failure_reason("account 123456789012.") == "account <hidden>."
    assert failure_reason("x" * 600).endswith("...") and len(failure_reason("x" * 600)) == 503
