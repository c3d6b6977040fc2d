"""Submitting a tool call and reading its step: ``POST /v1/tools/{tool}/calls``,
``GET /v1/calls/{operation_ref}`` (``?wait=``)."""

from __future__ import annotations

from typing import Annotated, Any, Final
from urllib.parse import quote

from fastapi import APIRouter, Depends, Header, Query, Response

from toolsafe.gateway.auth import Caller, Principal
from toolsafe.gateway.models import CallRequest, CallView
from toolsafe.gateway.problems import WAIT_OR_KEY_LIMIT, documented
from toolsafe.gateway.state import Gateway, gateway
from toolsafe.recovery.store import new_operation_ref

router = APIRouter(tags=["calls"])

WAIT_BOUND: Final = 86_400
"""The longest ``?wait=`` the route accepts; it holds at most TOOLSAFE_GATEWAY_MAX_WAIT."""

PROBLEMS: Final[dict[int | str, dict[str, Any]]] = {
    401: documented("no key, or an unknown or revoked one"),
    404: documented("no such tool or step (another namespace's steps are not found)"),
    422: documented("the request or the tool's input is invalid; every field is listed"),
    431: documented("the headers are over the limit"),
    503: documented("the store or the broker cannot be reached; retry after Retry-After"),
}


def location(operation_ref: str) -> str:
    return "/v1/calls/" + quote(operation_ref, safe="/:")


def idempotency_key(raw: str | None) -> str | None:
    """The header's value; a structured-field string (``"abc"``) loses its quotes."""
    if raw is None:
        return None
    value = raw.strip()
    if len(value) >= 2 and value[0] == value[-1] == '"':
        value = value[1:-1]
    return value


@router.post(
    "/tools/{tool}/calls",
    status_code=201,
    response_model=CallView,
    summary="Submit a tool call (idempotent by Idempotency-Key = operation_ref)",
    responses={
        200: {"model": CallView, "description": "a repeat of the same key and input"},
        409: documented("the key exists with another input"),
        413: documented("the body is over the limit"),
        **PROBLEMS,
    },
)
def submit(
    tool: str,
    body: CallRequest,
    principal: Caller,
    state: Annotated[Gateway, Depends(gateway)],
    key: Annotated[
        str | None,
        Header(
            alias="Idempotency-Key",
            description="the operation_ref; one is made and returned when absent",
            max_length=200,
        ),
    ] = None,
) -> Response:
    given = idempotency_key(key)
    ref = principal.scoped(given if given else new_operation_ref())
    submission = state.client.submit_call(tool, body.input, ref, actor=principal.actor)
    return CallView.of(submission.view).response(
        201 if submission.created else 200,
        {"Location": location(submission.view.operation_ref)},
    )


@router.get(
    "/calls/{operation_ref:path}",
    response_model=CallView,
    summary="A step's view; with ?wait= held until it needs the agent or is terminal",
    responses={429: documented(WAIT_OR_KEY_LIMIT), **PROBLEMS},
)
async def view(
    operation_ref: str,
    principal: Caller,
    state: Annotated[Gateway, Depends(gateway)],
    wait: Annotated[
        float,
        Query(
            ge=0,
            le=WAIT_BOUND,
            description="seconds to hold the request (at most TOOLSAFE_GATEWAY_MAX_WAIT)",
        ),
    ] = 0,
) -> Response:
    return await answer_view(state, principal, operation_ref, wait)


async def answer_view(
    state: Gateway, principal: Principal, operation_ref: str, wait: float
) -> Response:
    """The view of ``operation_ref``, held up to ``wait`` seconds (``GET /v1/calls/...``)."""
    ref = principal.existing(operation_ref)
    if wait <= 0:
        return CallView.of(await state.views.view(ref)).response()
    if await state.alive_workers() == []:
        current = await state.views.view(ref)
        if not current.needs_agent:
            # Nobody would move it within the wait: say so now instead of holding it.
            return CallView.of(current).model_copy(update={"hint": "no_worker"}).response()
    async with state.waiting():
        return CallView.of(await state.views.settle(ref, state.wait_for(wait))).response()
