"""The call flow every integration shares, as pure logic: how a step's state ends a tool
call, what the model is told at each, and the correction argument. No I/O."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from toolsafe.adapters.envelope import parse_result
from toolsafe.adapters.errors import InvalidInput
from toolsafe.integrations import _calls
from toolsafe.integrations._calls import Turn
from toolsafe.recovery.states import StepState
from toolsafe.tasks.views import StepView

S = StepState
NEEDS_INPUT_ENVELOPE: dict[str, Any] = {
    "ok": False,
    "code": "INVALID_RECIPIENT_ADDRESS",
    "category": "validation",
    "commit_state": "not_committed",
    "retry": {"directive": "after_input_fix", "max_attempts_remaining": 1},
    "next_action": "correct_input",
    "operation_ref": "openai:run_1:call_1",
    "safe_details": {"field": "recipient_email"},
    "agent_message": "The recipient address in recipient_email is not deliverable.",
    "user_message": "The e-mail address needs correcting.",
}


def view(state: StepState, envelope: dict[str, Any] | None = None, **extra: Any) -> StepView:
    fields: dict[str, Any] = {
        "operation_ref": "openai:run_1:call_1",
        "tool": "send_email",
        "state": state,
        "ui_group": "x",
        "commit_state": None,
        "attempts": 1,
        "max_attempts": 5,
        "due_at": None,
        "reason": None,
        "fields": (),
        "envelope": None if envelope is None else parse_result(envelope),
        "text": f"{state} text",
    }
    return StepView(**{**fields, **extra})


@pytest.mark.parametrize(
    ("state", "turn"),
    [
        (S.SUCCEEDED, Turn.FINAL), (S.FAILED, Turn.FINAL), (S.ESCALATED, Turn.FINAL),
        (S.CANCELLED, Turn.FINAL), (S.NEEDS_INPUT, Turn.NEEDS_INPUT),
        (S.AWAITING_APPROVAL, Turn.AWAITING_APPROVAL), (S.PENDING, Turn.IN_PROGRESS),
        (S.IN_FLIGHT, Turn.IN_PROGRESS), (S.WAITING_RETRY, Turn.IN_PROGRESS),
        (S.VERIFYING, Turn.IN_PROGRESS),
    ],
)  # fmt: skip
def test_every_state_ends_a_call_one_way(state: StepState, turn: Turn) -> None:
    assert _calls.turn_of(view(state)) is turn


def test_work_toolsafe_finishes_is_in_progress_with_not_before_never_an_error() -> None:
    due = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    answer = _calls.model_output(view(S.WAITING_RETRY, NEEDS_INPUT_ENVELOPE, due_at=due))
    assert answer["in_progress"] is True and "ok" not in answer
    assert answer["state"] == "waiting_retry"
    assert datetime.fromisoformat(answer["not_before"]) == due
    assert answer["operation_ref"] == "openai:run_1:call_1"


def test_a_step_with_an_outcome_answers_with_its_envelope() -> None:
    assert _calls.model_output(view(S.NEEDS_INPUT, NEEDS_INPUT_ENVELOPE)) == NEEDS_INPUT_ENVELOPE


def test_the_retry_prompt_carries_only_the_safe_text_and_the_flagged_fields() -> None:
    prompt = _calls.retry_prompt(
        view(S.NEEDS_INPUT, NEEDS_INPUT_ENVELOPE, fields=("recipient_email",))
    )
    assert prompt.startswith(NEEDS_INPUT_ENVELOPE["agent_message"])
    assert "Flagged: recipient_email" in prompt
    assert "user_message" not in prompt and "e-mail address needs" not in prompt


def test_the_correction_argument_is_optional_and_must_name_a_ref() -> None:
    schema = _calls.with_ref_argument("t", {"type": "object", "properties": {"a": {}}})
    assert set(schema["properties"]) == {"a", _calls.REF_ARGUMENT}
    with pytest.raises(ValueError, match="operation_ref"):
        _calls.with_ref_argument("t", {"properties": {"operation_ref": {}}})
    assert _calls.split_ref("t", {"a": 1}) == (None, {"a": 1})
    assert _calls.split_ref("t", {"a": 1, "operation_ref": "r/1"}) == ("r/1", {"a": 1})
    with pytest.raises(InvalidInput):
        _calls.split_ref("t", {"operation_ref": 7})


def test_a_refusal_says_what_to_correct_and_that_nothing_was_sent() -> None:
    answer = _calls.refusal_output(InvalidInput("t", (("currency", "STRING_PATTERN_MISMATCH"),)))
    assert answer["status"] == "refused" and answer["fields"] == ["currency"]
    assert "nothing was sent" in answer["message"]
    with pytest.raises(RuntimeError):
        _calls.refusal_output(RuntimeError("not a refusal"))
