"""What "the envelope agrees with the state" means, as one check the property tests and
the store tests share (DESIGN §6): written from the lifecycle, not from the runtime's code."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from toolsafe.adapters.codes import CATALOGUE
from toolsafe.adapters.envelope import ToolError, flagged_fields, parse_result
from toolsafe.recovery.states import StepState

S = StepState

# Phrases that promise what only one state does.
PROMISES: dict[StepState, tuple[str, ...]] = {
    S.WAITING_RETRY: ("retry automatically", "retries after", "sends it again"),
    S.VERIFYING: ("checking whether", "will be verified"),
    S.AWAITING_APPROVAL: ("waiting for approval", "request approval"),
    S.NEEDS_INPUT: ("correct the flagged", "needs corrected input"),
}


def assert_agrees(
    *,
    state: StepState,
    commit_state: str | None,
    attempts: int,
    max_attempts: int,
    due_at: datetime | None,
    reason: str | None,
    flagged: tuple[str, ...],
    operation_ref: str,
    shown: Mapping[str, Any] | None,
) -> None:
    """``shown`` (the envelope a view gives the model) agrees with the step's state."""
    if state in (S.PENDING, S.IN_FLIGHT):
        assert shown is None, f"{state} has no outcome yet, but shows {shown}"
        return
    assert shown is not None, f"{state} shows no envelope"
    envelope = parse_result(dict(shown))  # the contract holds
    assert envelope.operation_ref == operation_ref
    if state is S.SUCCEEDED:
        assert envelope.ok is True and commit_state == "committed"
        return
    assert isinstance(envelope, ToolError), f"{state} shows a success"
    assert envelope.commit_state == commit_state, (envelope.commit_state, commit_state)
    left = max_attempts - attempts
    retry = envelope.retry
    text = f"{envelope.agent_message} {envelope.user_message}".casefold()
    for other, phrases in PROMISES.items():
        if other is not state:
            for phrase in phrases:
                assert phrase not in text, f"{state} says {phrase!r}: {text}"
    if state is S.NEEDS_INPUT:
        assert (envelope.next_action, retry.directive) == ("correct_input", "after_input_fix")
        assert retry.max_attempts_remaining == left >= 1
        assert flagged_fields(envelope) == flagged
    elif state is S.AWAITING_APPROVAL:
        assert (envelope.next_action, retry.directive) == ("request_approval", "never")
        assert retry.max_attempts_remaining == left >= 1
    elif state is S.WAITING_RETRY:
        assert (envelope.next_action, retry.directive) == ("wait_and_retry", "after_delay")
        assert retry.not_before == due_at
        assert retry.max_attempts_remaining == left >= 1
        assert commit_state == "not_committed"
    elif state is S.VERIFYING:
        assert (envelope.next_action, retry.directive) == ("verify_operation", "never")
        assert retry.max_attempts_remaining == 0 and commit_state == "unknown"
    else:  # escalated, failed, cancelled: nothing is offered, the code says why
        assert (envelope.next_action, retry.directive) == ("escalate", "never")
        assert retry.max_attempts_remaining == 0
        assert envelope.code == reason, (envelope.code, reason)
    if envelope.code in CATALOGUE:
        assert "unspecified" not in envelope.agent_message, envelope
