"""Every invariant of the envelope contract, fed a violating envelope, names the field."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from pydantic import ValidationError

from tests.support import fixtures
from toolsafe.adapters.envelope import (
    ToolError,
    ToolSuccess,
    flagged_fields,
    parse_result,
    parse_result_json,
    to_wire,
)

NOT_BEFORE = "2026-11-30T09:16:00+00:00"


def error_wire(**changes: Any) -> dict[str, Any]:
    """The article's OUTCOME_UNKNOWN as wire JSON, with fields replaced."""
    wire = to_wire(fixtures.outcome_unknown())
    wire.update(changes)
    return wire


def retry(directive: str, remaining: int = 1, not_before: str | None = None) -> dict[str, Any]:
    data: dict[str, Any] = {"directive": directive, "max_attempts_remaining": remaining}
    if not_before is not None:
        data["not_before"] = not_before
    return data


def rejects(wire: dict[str, Any], *needles: str) -> str:
    with pytest.raises(ValidationError) as caught:
        parse_result(wire)
    text = str(caught.value)
    for needle in needles:
        assert needle in text, f"{needle!r} not named in: {text}"
    return text


# --- wire shape ----------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(fixtures.ARTICLE_EXAMPLES))
def test_article_examples_round_trip(name: str) -> None:
    envelope = fixtures.ARTICLE_EXAMPLES[name]()
    wire = to_wire(envelope)
    assert wire["code"] == name
    assert parse_result(wire) == envelope
    assert set(wire) == {
        "ok",
        "code",
        "category",
        "commit_state",
        "retry",
        "next_action",
        "operation_ref",
        "safe_details",
        "agent_message",
        "user_message",
    }


def test_success_wire_shape_and_evidence() -> None:
    wire = to_wire(fixtures.invoice_created())
    assert wire == {
        "ok": True,
        "operation_ref": "run_81/step_4",
        "commit_state": "committed",
        "result": {"invoice_id": "inv_1001", "amount_cents": 12500, "currency": "EUR"},
        "verification": {"checked_at": "2026-11-30T09:15:02Z", "evidence_ref": "invoice:inv_1001"},
    }
    parsed = parse_result(wire)
    assert isinstance(parsed, ToolSuccess)


def test_the_article_examples_have_their_documented_values() -> None:
    invalid = fixtures.invalid_recipient_address()
    assert flagged_fields(invalid) == ("recipient_email",)
    assert invalid.retry.max_attempts_remaining == 1
    assert invalid.retry.directive == "after_input_fix"
    unknown = fixtures.outcome_unknown()
    assert (unknown.commit_state, unknown.retry.directive, unknown.next_action) == (
        "unknown",
        "never",
        "verify_operation",
    )
    assert unknown.retry.max_attempts_remaining == 0
    transient = fixtures.dependency_unavailable()
    assert transient.retry.not_before == fixtures.NOT_BEFORE
    assert fixtures.version_conflict().category == "conflict"
    assert fixtures.missing_approval().next_action == "request_approval"


def test_not_before_is_iso_8601_with_an_offset() -> None:
    wire = to_wire(fixtures.dependency_unavailable())
    text = wire["retry"]["not_before"]
    parsed = datetime.fromisoformat(text)
    assert parsed.utcoffset() == timedelta(0)
    shifted = error_wire(
        commit_state="not_committed",
        next_action="wait_and_retry",
        retry=retry("after_delay", 2, "2026-11-30T10:16:00+01:00"),
    )
    envelope = parse_result(shifted)
    assert isinstance(envelope, ToolError)
    assert envelope.retry.not_before == datetime(2026, 11, 30, 9, 16, tzinfo=UTC)
    assert envelope.retry.not_before.utcoffset() == timezone(timedelta(hours=1)).utcoffset(None)


def test_absent_not_before_is_omitted_from_the_wire() -> None:
    assert "not_before" not in to_wire(fixtures.outcome_unknown())["retry"]


def test_json_text_parses_too() -> None:
    envelope = fixtures.invalid_recipient_address()
    assert parse_result_json(envelope.model_dump_json()) == envelope


# --- invariants, one violation each -----------------------------------------------------


def test_extra_top_level_field_is_refused() -> None:
    rejects(error_wire(retryable=True), "retryable", "Extra inputs are not permitted")


def test_unknown_requires_directive_never() -> None:
    rejects(
        error_wire(retry=retry("after_delay", 1, NOT_BEFORE)),
        "commit_state: unknown requires retry.directive: never",
    )


@pytest.mark.parametrize("action", ["correct_input", "wait_and_retry", "request_approval"])
def test_unknown_requires_verify_or_escalate(action: str) -> None:
    rejects(error_wire(next_action=action), "next_action verify_operation or escalate")


def test_wait_and_retry_requires_after_delay() -> None:
    rejects(
        error_wire(
            commit_state="not_committed", next_action="wait_and_retry", retry=retry("never")
        ),
        "wait_and_retry requires retry.directive: after_delay",
    )


def test_wait_and_retry_requires_not_committed() -> None:
    # unknown is caught first by its own rule; a committed ToolError is refused too
    rejects(
        error_wire(
            commit_state="committed",
            next_action="wait_and_retry",
            retry=retry("after_delay", 1, NOT_BEFORE),
        ),
        "commit_state",
    )


def test_wait_and_retry_requires_an_attempt_left() -> None:
    rejects(
        error_wire(
            commit_state="not_committed",
            next_action="wait_and_retry",
            retry=retry("after_delay", 0, NOT_BEFORE),
        ),
        "max_attempts_remaining >= 1",
    )


def test_after_delay_requires_not_before() -> None:
    rejects(
        error_wire(
            commit_state="not_committed", next_action="wait_and_retry", retry=retry("after_delay")
        ),
        "retry.not_before is required",
    )


def test_not_before_must_be_timezone_aware() -> None:
    rejects(
        error_wire(
            commit_state="not_committed",
            next_action="wait_and_retry",
            retry=retry("after_delay", 1, "2026-11-30T09:16:00"),
        ),
        "retry.not_before",
        "timezone",
    )


def test_not_before_absent_unless_after_delay() -> None:
    rejects(
        error_wire(retry=retry("never", 0, NOT_BEFORE)),
        "retry.not_before must be absent when retry.directive is never",
    )


def test_after_input_fix_requires_correct_input() -> None:
    rejects(
        error_wire(
            commit_state="not_committed", next_action="escalate", retry=retry("after_input_fix")
        ),
        "after_input_fix and next_action: correct_input go together",
    )


def test_correct_input_requires_after_input_fix() -> None:
    rejects(
        error_wire(commit_state="not_committed", next_action="correct_input", retry=retry("never")),
        "after_input_fix and next_action: correct_input go together",
    )


def test_after_input_fix_requires_not_committed() -> None:
    wire = to_wire(fixtures.invalid_recipient_address())
    wire["commit_state"] = "unknown"
    rejects(wire, "commit_state")


def test_max_attempts_remaining_is_not_negative() -> None:
    rejects(
        error_wire(retry=retry("never", -1)), "max_attempts_remaining", "greater than or equal to 0"
    )


@pytest.mark.parametrize(
    "code", ["outcome_unknown", "Outcome-Unknown", "_LEADING", "TRAILING_", "DOUBLE__UNDER", ""]
)
def test_code_is_upper_snake_case(code: str) -> None:
    rejects(error_wire(code=code), "code", "UPPER_SNAKE_CASE")


def test_code_is_at_most_63_characters() -> None:
    rejects(error_wire(code="A" * 64), "code", "at most 63")
    parse_result(error_wire(code="A" * 63))


@pytest.mark.parametrize("key", ["Field", "1field", "has space", "x" * 41, "dash-key"])
def test_safe_details_keys_are_short_identifiers(key: str) -> None:
    rejects(error_wire(safe_details={key: "v"}), "safe_details", "identifier")


@pytest.mark.parametrize("value", [None, [1, 2], {"nested": "x"}])
def test_safe_details_values_are_scalars(value: Any) -> None:
    rejects(
        error_wire(safe_details={"key": value}), "safe_details.key", "string, number or boolean"
    )


def test_safe_details_values_are_length_capped() -> None:
    rejects(error_wire(safe_details={"key": "x" * 201}), "safe_details.key", "longer than 200")


def test_safe_details_count_is_bounded() -> None:
    rejects(error_wire(safe_details={f"k{i}": i for i in range(17)}), "safe_details", "at most 16")


def test_messages_are_length_capped() -> None:
    rejects(error_wire(agent_message="x" * 501), "agent_message")


def test_operation_ref_shape() -> None:
    rejects(error_wire(operation_ref=""), "operation_ref")
    rejects(error_wire(operation_ref="has space"), "operation_ref")
    rejects(error_wire(operation_ref="x" * 201), "operation_ref")


def test_success_commit_state_is_literally_committed() -> None:
    wire = to_wire(fixtures.invoice_created())
    wire["commit_state"] = "unknown"
    rejects(wire, "commit_state", "committed")


def test_success_requires_checked_at() -> None:
    wire = to_wire(fixtures.invoice_created())
    wire["verification"] = {"evidence_ref": "invoice:1"}
    rejects(wire, "verification.checked_at", "Field required")
    wire["verification"] = {"checked_at": "2026-11-30T09:15:02"}
    rejects(wire, "checked_at", "timezone")


def test_success_without_verification_is_refused() -> None:
    wire = to_wire(fixtures.invoice_created())
    del wire["verification"]
    rejects(wire, "verification")


def test_error_cannot_claim_committed() -> None:
    rejects(error_wire(commit_state="committed"), "commit_state: committed is a success")


def test_ok_discriminates() -> None:
    wire = error_wire()
    wire["ok"] = "yes"
    rejects(wire, "ok")


def test_invariants_hold_on_construction_too() -> None:
    with pytest.raises(ValidationError, match="commit_state: unknown requires"):
        ToolError(
            code="OUTCOME_UNKNOWN",
            category="dependency",
            commit_state="unknown",
            retry={"directive": "after_input_fix", "max_attempts_remaining": 1},
            next_action="correct_input",
            operation_ref="run_81/step_4",
            agent_message="x",
            user_message="y",
        )


def test_envelopes_are_immutable() -> None:
    envelope = fixtures.outcome_unknown()
    with pytest.raises(ValidationError):
        envelope.code = "OTHER"  # type: ignore[misc]


def test_flagged_fields_reads_both_conventions() -> None:
    wire = to_wire(fixtures.invalid_recipient_address())
    wire["safe_details"] = {"fields": "b, a", "field": "c"}
    envelope = parse_result(wire)
    assert isinstance(envelope, ToolError)
    assert flagged_fields(envelope) == ("a", "b", "c")
