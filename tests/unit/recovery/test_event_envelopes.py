"""``with_envelopes``: every envelope an event names in its step read back as recorded,
backwards from the step's envelope through the replaced ones the changes kept."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from toolsafe.recovery.records import EventRecord
from toolsafe.recovery.states import StepState
from toolsafe.recovery.store.shared import (
    REPLACED_ENVELOPE,
    envelope_in_step,
    needs_step,
    with_envelopes,
)

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
LIMITED = {"ok": False, "code": "RATE_LIMITED", "commit_state": "not_committed"}
WRONG = {"ok": False, "code": "INVALID_RECIPIENT_ADDRESS", "commit_state": "not_committed"}
DONE = {"ok": True, "commit_state": "committed"}


def _event(number: int, kind: str, **detail: Any) -> EventRecord:
    return EventRecord(
        id=number,
        operation_ref="run_81/step_4",
        at=T0,
        kind=kind,
        from_state=StepState.IN_FLIGHT,
        to_state=StepState.PENDING,
        label=kind,
        detail=detail,
    )


def test_each_named_envelope_is_the_one_held_until_the_next_replacement() -> None:
    """limited (named) → input provided (the step's envelope cleared, the limited one
    kept) → wrong input (named) → success (named, the wrong-input one kept)."""
    stored = [
        _event(1, "submitted", tool="t"),
        _event(2, "executed", envelope=envelope_in_step(LIMITED), action="wait"),
        _event(3, "input_provided", **{REPLACED_ENVELOPE: LIMITED}),
        _event(4, "executed", envelope=envelope_in_step(WRONG), action="correct"),
        _event(5, "executed", envelope=envelope_in_step(DONE), **{REPLACED_ENVELOPE: WRONG}),
    ]
    assert [needs_step(event) for event in stored] == [False, True, True, True, True]
    read = with_envelopes(stored, DONE)
    assert [event.detail.get("envelope") for event in read] == [None, LIMITED, None, WRONG, DONE]
    assert all(REPLACED_ENVELOPE not in event.detail for event in read)
    assert read[0] is stored[0]  # an event with nothing to fill in comes back as it is


def test_an_event_with_its_own_copy_is_left_alone() -> None:
    """An adapter's envelope the step does not hold (an unknown outcome) stays a copy."""
    unknown = {"ok": False, "code": "OUTCOME_UNKNOWN", "commit_state": "unknown"}
    stored = [_event(1, "executed", envelope=unknown)]
    assert with_envelopes(stored, {"ok": False, "code": "VERIFYING"}) == stored
    assert envelope_in_step({"ok": True}) == {"in_step": True}
