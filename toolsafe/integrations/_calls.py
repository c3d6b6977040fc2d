"""What every agent-stack integration does with one model tool call, whatever the SDK:
submit under a stable operation_ref, wait up to a bound, and tell the model the truth.

No SDK is imported here, and no client: every flow takes any client of the contract
(``toolsafe.tasks.calls``), in process or over the gateway. A step ends one call in one
of four ways (:class:`Turn`): with its envelope (terminal), asking for corrected input,
waiting for a human approval, or still being worked on by toolsafe (queued, running,
waiting to retry, verifying). The last is never reported as an error: the model is
given ``toolsafe.agents.shared``'s in-progress answer (the operation_ref, the state,
``not_before``).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from enum import StrEnum
from typing import Any, Final

from toolsafe.adapters.envelope import ToolError
from toolsafe.adapters.errors import INVALID_INPUT, InvalidInput
from toolsafe.agents.shared import in_progress
from toolsafe.recovery.outcomes import TransitionRefused
from toolsafe.recovery.states import TERMINAL, StepState
from toolsafe.recovery.store import OperationRefConflict, StepNotFound
from toolsafe.tasks.calls import AsyncCalls, Calls
from toolsafe.tasks.views import StepView

DEFAULT_WAIT: Final = 30.0
"""Seconds a tool call waits for its step to settle before it answers "in progress"."""

REFUSED: Final = "refused"
REF_ARGUMENT: Final = "operation_ref"
"""The argument a model sets, on the stacks where a tool is called afresh to correct a
step (OpenAI Agents, Anthropic), to the operation_ref the envelope asking for it named."""
_REF_PROPERTY: Final = {
    "type": "string",
    "description": (
        "Leave out, except to correct a call whose result asked for corrected input "
        "(next_action correct_input): then that result's operation_ref, with the "
        "corrected fields."
    ),
}

NOT_THIS_CALL: Final = "NOT_THIS_CALL"
INTEGRATION_CODES: Final[dict[str, str]] = {
    NOT_THIS_CALL: (
        "the operation_ref a tool call names is not a step of this tool in this run, "
        "thread or session"
    ),
}
"""The integrations' own refusal codes (catalogued with the package's vocabularies)."""


class Turn(StrEnum):
    """How a step ends one model tool call."""

    FINAL = "final"
    NEEDS_INPUT = "needs_input"
    AWAITING_APPROVAL = "awaiting_approval"
    IN_PROGRESS = "in_progress"


def turn_of(view: StepView) -> Turn:
    if view.state in TERMINAL:
        return Turn.FINAL
    if view.state is StepState.NEEDS_INPUT:
        return Turn.NEEDS_INPUT
    if view.state is StepState.AWAITING_APPROVAL:
        return Turn.AWAITING_APPROVAL
    return Turn.IN_PROGRESS


def model_output(view: StepView) -> dict[str, Any]:
    """What the model is given for a step: its envelope once it has one that agrees with
    the state (terminal, needs input, awaiting approval), else the in-progress answer."""
    envelope = view.envelope_json()
    if turn_of(view) is not Turn.IN_PROGRESS and envelope is not None:
        return envelope
    if view.needs_agent:
        # A runtime envelope agrees with every such state; this is a defence only.
        return {"operation_ref": view.operation_ref, "state": str(view.state),
                "message": view.text}  # fmt: skip
    answer: dict[str, Any] = in_progress(view).model_dump(mode="json")
    return answer


def refused(code: str, message: str, *, operation_ref: str | None = None) -> dict[str, Any]:
    """A call toolsafe did not take (nothing was stored or sent), in the model's terms."""
    answer: dict[str, Any] = {"status": REFUSED, "code": code, "message": message}
    if operation_ref is not None:
        answer["operation_ref"] = operation_ref
    return answer


def invalid_input(error: InvalidInput) -> dict[str, Any]:
    fields = [field for field, _ in error.errors]
    return {
        **refused(error.code, f"nothing was sent; correct {', '.join(fields) or 'the input'}"),
        "fields": fields,
    }


def as_text(output: Mapping[str, Any]) -> str:
    """Compact JSON, the form text-only tool channels carry."""
    return json.dumps(output, separators=(",", ":"), ensure_ascii=False)


def retry_prompt(view: StepView) -> str:
    """For a step that needs input: the adapter's redacted agent text and the flagged
    fields, nothing else (no input values, no upstream text)."""
    envelope = view.envelope
    agent_message = envelope.agent_message.strip() if isinstance(envelope, ToolError) else ""
    fields = ", ".join(view.fields) or "the flagged fields"
    return f"{agent_message} Flagged: {fields}; an identical input is refused.".strip()


def approval_request(view: StepView) -> dict[str, Any]:
    """What an approver is shown: the step, its tool and the safe envelope."""
    return {
        "kind": Turn.AWAITING_APPROVAL.value,
        "operation_ref": view.operation_ref,
        "tool": view.tool,
        "message": view.text,
        "envelope": view.envelope_json() or {},
    }


def input_request(view: StepView) -> dict[str, Any]:
    """What whoever corrects the input is shown: the flagged fields and the safe text."""
    return {
        "kind": Turn.NEEDS_INPUT.value,
        "operation_ref": view.operation_ref,
        "tool": view.tool,
        "fields": list(view.fields),
        "message": retry_prompt(view),
        "envelope": view.envelope_json() or {},
    }


def with_ref_argument(tool: str, schema: Mapping[str, Any]) -> dict[str, Any]:
    """An input schema that also takes :data:`REF_ARGUMENT` (optional)."""
    extended = copy.deepcopy(dict(schema))
    properties = extended.setdefault("properties", {})
    if REF_ARGUMENT in properties:
        raise ValueError(f"tool {tool} has an input field named {REF_ARGUMENT}")
    properties[REF_ARGUMENT] = dict(_REF_PROPERTY)
    return extended


def split_ref(tool: str, args: Mapping[str, Any]) -> tuple[str | None, dict[str, Any]]:
    """The operation_ref a call corrects (if any) and the tool's own input."""
    payload = dict(args)
    correcting = payload.pop(REF_ARGUMENT, None)
    if correcting is not None and (not isinstance(correcting, str) or not correcting):
        raise InvalidInput(tool, ((REF_ARGUMENT, INVALID_INPUT),))
    return correcting, payload


# ---------------------------------------------------------------------------- async flow


async def submit_and_settle(
    client: AsyncCalls, tool: str, args: Mapping[str, Any], ref: str, wait: float
) -> StepView:
    """Submit (a repeat of the same ref returns the stored step, R2) and wait up to
    ``wait`` seconds for it to need the agent or end."""
    view = (await client.submit_call(tool, args, ref)).view
    if view.needs_agent:
        return view
    return await client.settle(ref, wait)


async def correct(
    client: AsyncCalls, tool: str, ref: str, new_input: Mapping[str, Any], wait: float
) -> StepView:
    """Corrected input for the step ``ref`` (the same operation_ref). A correction
    replayed after it was applied finds the step moved on and returns it as it is."""
    view = await client.view(ref)
    if view.tool != tool:
        raise StepNotFound(ref)
    if view.state is StepState.NEEDS_INPUT:
        view = await client.provide_input(ref, new_input)
    if view.needs_agent:
        return view
    return await client.settle(ref, wait)


# ----------------------------------------------------------------------------- sync flow


def correct_sync(
    client: Calls, tool: str, ref: str, new_input: Mapping[str, Any], wait: float
) -> StepView:
    """:func:`correct` for synchronous callers."""
    view = client.view(ref)
    if view.tool != tool:
        raise StepNotFound(ref)
    if view.state is StepState.NEEDS_INPUT:
        view = client.provide_input(ref, new_input)
    if view.needs_agent:
        return view
    return client.settle(ref, wait)


def submit_and_settle_sync(
    client: Calls, tool: str, args: Mapping[str, Any], ref: str, wait: float
) -> StepView:
    view = client.submit_call(tool, args, ref).view
    if view.needs_agent:
        return view
    return client.settle(ref, wait)


def refusal_output(error: Exception, ref: str | None = None) -> dict[str, Any]:
    """The model's answer for an expected refusal (no traceback, nothing sent)."""
    if isinstance(error, InvalidInput):
        return invalid_input(error)
    if isinstance(error, TransitionRefused):
        return refused(error.code, error.message, operation_ref=ref)
    if isinstance(error, OperationRefConflict):
        return refused("OPERATION_REF_CONFLICT", str(error), operation_ref=ref)
    if isinstance(error, StepNotFound):
        return refused(NOT_THIS_CALL, INTEGRATION_CODES[NOT_THIS_CALL], operation_ref=ref)
    raise error


EXPECTED: Final = (InvalidInput, TransitionRefused, OperationRefConflict, StepNotFound)
"""Refusals a tool call answers in-band instead of raising."""
