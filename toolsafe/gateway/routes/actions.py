"""What agents and operators do to a step: corrected input and cancel (agent keys);
approve, reject, resolve, re-drive (operator keys). Each answers with the new view; a
repeat of an action that already took effect answers 200 with the step as it is
(``toolsafe.tasks.repeats``), as the CLI says "nothing to do"."""

from __future__ import annotations

from collections.abc import Callable
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
from toolsafe.recovery.outcomes import TransitionRefused
from toolsafe.recovery.states import REDRIVEN, StepState
from toolsafe.tasks.repeats import Action, repeat_of
from toolsafe.tasks.views import StepView

router = APIRouter(tags=["actions"])

CANCELLED = Action("cancelled", "cancelled")
APPROVED = Action("approved", "approved")
REJECTED = Action("rejected", "rejected")
REDRIVE = Action("resolved", "re-driven", REDRIVEN)

ACTION_PROBLEMS = {
    409: documented("refused by the runtime (the code says why)"),
    413: documented("the body is over the limit"),
    **PROBLEMS,
}
OPERATOR_PROBLEMS = {403: documented("needs an operator key"), **ACTION_PROBLEMS}
State = Annotated[Gateway, Depends(gateway)]


def _once(state: Gateway, ref: str, action: Action, call: Callable[[], StepView]) -> Response:
    try:
        view = call()
    except TransitionRefused as refused:
        repeat = repeat_of(refused, action, lambda: state.client.view(ref))
        if repeat is None:
            raise
        view = repeat[0]
    return CallView.of(view).response()


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
    by = principal.by(body.by)
    if body.when_possible:
        return CallView.of(state.client.request_cancel(ref, body.reason, by=by)).response()
    return _once(state, ref, CANCELLED, lambda: state.client.cancel(ref, body.reason, by=by))


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
    approver = principal.by(body.approver)
    return _once(state, ref, APPROVED, lambda: state.client.approve(ref, approver, body.reason))


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
    approver = principal.by(body.approver)
    return _once(state, ref, REJECTED, lambda: state.client.reject(ref, approver, body.reason))


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
    target = StepState(body.to)
    return _once(
        state,
        ref,
        Action("resolved", f"resolved as {target}", frozenset({target})),
        lambda: state.client.resolve(
            ref,
            body.to,
            principal.by(body.operator),
            body.reason,
            evidence=body.evidence,
            confirm_not_written=body.confirm_not_written,
        ),
    )


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
    operator = principal.by(body.operator)
    return _once(state, ref, REDRIVE, lambda: state.client.redrive(ref, operator, body.reason))
