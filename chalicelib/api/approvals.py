"""Routes of four-eyes approvals: the list and detail, approve and reject, and a reconciliation's
approval policy (services/approvals.py, docs/approvals.md)."""
from __future__ import annotations

from chalicelib.api.routing import ApiRequest, Router, numeric_id
from chalicelib.api.schemas.approvals import (
    ApprovalOut,
    ApprovalPage,
    ApprovalPolicyOut,
    ApprovalsQuery,
    PutApprovalPolicy,
    RejectApproval,
)
from chalicelib.container import container
from chalicelib.domain.approvals import ANY_CURRENCY, Approval, ApprovalAction, ApprovalPolicy, ApprovalStatus
from chalicelib.domain.errors import ValidationFailed
from chalicelib.services import approvals as service

router = Router("approvals")


def approval_out(approval: Approval) -> ApprovalOut:
    return ApprovalOut.from_entity(approval, url=f"/v1/approvals/{approval.id}", action=approval.action.value,
                                   status=approval.status.value)


def policy_out(policy: ApprovalPolicy) -> ApprovalPolicyOut:
    return ApprovalPolicyOut.from_entity(policy, actions=sorted(a.value for a in policy.actions),
                                         thresholds=dict(policy.thresholds), threshold=policy.threshold)


def thresholds_of(body: PutApprovalPolicy) -> dict[str, int]:
    """`thresholds`, with `threshold` as its "*" (422 when both give "*" differently); neither: {"*": 0}."""
    thresholds = dict(body.thresholds or {})
    if body.threshold is not None:
        if thresholds.get(ANY_CURRENCY, body.threshold) != body.threshold:
            raise ValidationFailed.on("threshold", "is thresholds[\"*\"]: give one or the other")
        thresholds[ANY_CURRENCY] = body.threshold
    if body.thresholds is None and body.threshold is None:
        thresholds[ANY_CURRENCY] = 0
    return thresholds


@router.route("GET", "/approvals", summary="Approvals of the environment, newest first (a pending one past its "
              "expiry reads as expired)", query=ApprovalsQuery, response=ApprovalPage, errors=(422,))
def list_approvals(request: ApiRequest) -> ApprovalPage:
    query: ApprovalsQuery = request.query
    found, cursor = service.list_page(container().ports, request.environment, query.limit, query.cursor,
                                      status=ApprovalStatus(query.status) if query.status else None,
                                      reconciliation_id=query.reconciliation_id, requested_by=query.requested_by)
    return ApprovalPage(data=[approval_out(a) for a in found], next_cursor=cursor, limit=query.limit)


@router.route("GET", "/approvals/{id}", summary="An approval", response=ApprovalOut, errors=(404,))
def get_approval(request: ApiRequest, id: str) -> ApprovalOut:
    return approval_out(service.current(container().ports, request.environment, numeric_id(id, "approval")))


@router.route("POST", "/approvals/{id}/approve", summary="Approve: the action runs now, once (approved, or failed "
              "with the reason when it no longer holds); never by its requester", response=ApprovalOut,
              errors=(404, 409))
def approve(request: ApiRequest, id: str) -> ApprovalOut:
    return approval_out(service.approve(container().ports, request.environment, numeric_id(id, "approval"),
                                        request.principal.actor))


@router.route("POST", "/approvals/{id}/reject", summary="Reject with a reason: nothing of the action is done; never "
              "by its requester", body=RejectApproval, response=ApprovalOut, errors=(404, 409))
def reject(request: ApiRequest, id: str) -> ApprovalOut:
    body: RejectApproval = request.body
    return approval_out(service.reject(container().ports, request.environment, numeric_id(id, "approval"),
                                       request.principal.actor, body.reason))


@router.route("GET", "/reconciliations/{id}/approval_policy", summary="The reconciliation's approval policy: which "
              "actions above which amount wait for a second person", response=ApprovalPolicyOut, errors=(404,))
def get_approval_policy(request: ApiRequest, id: str) -> ApprovalPolicyOut:
    return policy_out(service.policy(container().ports, request.environment, numeric_id(id, "reconciliation")))


@router.route("PUT", "/reconciliations/{id}/approval_policy", summary="Set the reconciliation's approval policy "
              "(whole); approvals already pending keep theirs", body=PutApprovalPolicy, response=ApprovalPolicyOut,
              errors=(404,))
def put_approval_policy(request: ApiRequest, id: str) -> ApprovalPolicyOut:
    body: PutApprovalPolicy = request.body
    return policy_out(service.set_policy(
        container().ports, request.environment, numeric_id(id, "reconciliation"),
        actions=[ApprovalAction(a) for a in dict.fromkeys(body.actions)], thresholds=thresholds_of(body),
        threshold_decimal_places=body.threshold_decimal_places, expires_after_minutes=body.expires_after_minutes,
        actor=request.principal.actor if request.principal else None))
