"""What agents and operators do to a step: corrected input and cancel (agent keys);
approve, reject, resolve, re-drive (operator keys). Each answers with the new view."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Response

from toolsafe.gateway.auth import Caller, Operator
from toolsafe.gateway.models import (
    ApprovalRequest,
    CallView,
    CancelRequest,
    CorrectedInput,
    RedriveRequest,
    ResolveRequest,
)
from toolsafe.gateway.problems import documented
from toolsafe.gateway.routes.calls import PROBLEMS
from toolsafe.gateway.state import Gateway, gateway

router = APIRouter(tags=["actions"])

ACTION_PROBLEMS = {
    409: documented("refused by the runtime (the code says why)"),
    413: documented("the body is over the limit"),
    **PROBLEMS,
}
OPERATOR_PROBLEMS = {403: documented("needs an operator key"), **ACTION_PROBLEMS}
State = Annotated[Gateway, Depends(gateway)]


@router.post(
    "/calls/{operation_ref:path}/input",
    response_model=CallView,
    summary="Corrected input for a step in needs_input (same operation_ref)",
    responses=ACTION_PROBLEMS,
)
def provide_input(
    operation_ref: str, body: CorrectedInput, principal: Caller, state: State
) -> Response:
    ref = principal.existing(operation_ref)
    return CallView.of(
        state.client.provide_input(ref, body.input, actor=principal.actor)
    ).response()


@router.post(
    "/calls/{operation_ref:path}/cancel",
    response_model=CallView,
    summary="Cancel a waiting step",
    responses=ACTION_PROBLEMS,
)
def cancel(operation_ref: str, body: CancelRequest, principal: Caller, state: State) -> Response:
    ref = principal.existing(operation_ref)
    return CallView.of(state.client.cancel(ref, body.reason, by=principal.by(body.by))).response()


@router.post(
    "/calls/{operation_ref:path}/approve",
    response_model=CallView,
    summary="Approve a step waiting for approval (operator keys)",
    responses=OPERATOR_PROBLEMS,
)
def approve(
    operation_ref: str, body: ApprovalRequest, principal: Operator, state: State
) -> Response:
    ref = principal.existing(operation_ref)
    return CallView.of(
        state.client.approve(ref, principal.by(body.approver), body.reason)
    ).response()


@router.post(
    "/calls/{operation_ref:path}/reject",
    response_model=CallView,
    summary="Reject a step waiting for approval; it fails (operator keys)",
    responses=OPERATOR_PROBLEMS,
)
def reject(
    operation_ref: str, body: ApprovalRequest, principal: Operator, state: State
) -> Response:
    ref = principal.existing(operation_ref)
    return CallView.of(
        state.client.reject(ref, principal.by(body.approver), body.reason)
    ).response()


@router.post(
    "/calls/{operation_ref:path}/resolve",
    response_model=CallView,
    summary="Close an escalated step as succeeded (with evidence) or failed (operator keys)",
    responses=OPERATOR_PROBLEMS,
)
def resolve(
    operation_ref: str, body: ResolveRequest, principal: Operator, state: State
) -> Response:
    ref = principal.existing(operation_ref)
    return CallView.of(
        state.client.resolve(
            ref,
            body.to,
            principal.by(body.operator),
            body.reason,
            evidence=body.evidence,
            confirm_not_written=body.confirm_not_written,
        )
    ).response()


@router.post(
    "/calls/{operation_ref:path}/redrive",
    response_model=CallView,
    summary="Send an escalated step back to pending (operator keys)",
    responses=OPERATOR_PROBLEMS,
)
def redrive(
    operation_ref: str, body: RedriveRequest, principal: Operator, state: State
) -> Response:
    ref = principal.existing(operation_ref)
    return CallView.of(
        state.client.redrive(ref, principal.by(body.operator), body.reason)
    ).response()
