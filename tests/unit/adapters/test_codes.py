"""The catalogue: every code builds a valid envelope, templates name only allowed keys,
and the article's codes carry the article's classification."""

from __future__ import annotations

import string
from datetime import UTC, datetime, timedelta

import pytest

from toolsafe.adapters import codes
from toolsafe.adapters.envelope import flagged_fields, parse_result, to_wire


@pytest.mark.parametrize("code", sorted(codes.CATALOGUE))
def test_every_code_builds_a_valid_envelope(code: str) -> None:
    spec = codes.spec_for(code)
    used = {name for _, name, _, _ in string.Formatter().parse(spec.agent_template) if name}
    assert used <= spec.allowed_keys, code
    assert "{" not in spec.user_template
    when = datetime.now(UTC) + timedelta(seconds=3)
    envelope = codes.build_error(
        code, "run_1/step_1", dict.fromkeys(spec.allowed_keys, "x"), not_before=when
    )
    assert parse_result(to_wire(envelope)) == envelope
    assert envelope.category == spec.category
    assert "unspecified" not in envelope.agent_message
    assert len(spec.meaning) > 10


def test_article_classifications() -> None:
    ref = "run_81/step_4"
    invalid = codes.build_error(codes.INVALID_RECIPIENT_ADDRESS, ref, {"field": "recipient_email"})
    assert (invalid.category, invalid.commit_state, invalid.retry.directive) == (
        "validation", "not_committed", "after_input_fix",
    )  # fmt: skip
    assert invalid.retry.max_attempts_remaining == 1
    assert flagged_fields(invalid) == ("recipient_email",)
    unknown = codes.build_error(codes.OUTCOME_UNKNOWN, ref, {"reason": "read_timeout"})
    assert (unknown.commit_state, unknown.retry.directive, unknown.next_action) == (
        "unknown", "never", "verify_operation",
    )  # fmt: skip
    assert unknown.retry.max_attempts_remaining == 0
    conflict = codes.build_error(codes.VERSION_CONFLICT, ref)
    assert (conflict.category, conflict.retry.directive, conflict.next_action) == (
        "conflict", "never", "escalate",
    )  # fmt: skip
    approval = codes.build_error(codes.MISSING_APPROVAL, ref)
    assert (approval.category, approval.next_action) == ("authorization", "request_approval")


def test_unknown_keys_and_unsafe_values_are_dropped() -> None:
    envelope = codes.build_error(
        codes.OUTCOME_UNKNOWN, "r1", {"reason": "Bearer abcdefghijklmnop", "body": "<html>"}
    )
    assert envelope.safe_details == {}
    assert "Bearer" not in envelope.agent_message
    assert "(unspecified)" in envelope.agent_message


def test_delay_without_time_or_attempts_escalates() -> None:
    assert codes.build_error(codes.RATE_LIMITED, "r1").next_action == "escalate"
    when = datetime.now(UTC)
    spent = codes.build_error(codes.RATE_LIMITED, "r1", not_before=when, attempts_remaining=0)
    assert (spent.retry.directive, spent.next_action) == ("never", "escalate")
    ok = codes.build_error(codes.RATE_LIMITED, "r1", not_before=when, attempts_remaining=2)
    assert (ok.retry.not_before, ok.retry.max_attempts_remaining) == (when, 2)


def test_any_code_can_be_made_unknown() -> None:
    envelope = codes.build_error(
        codes.UPSTREAM_ERROR, "r1", commit_state="unknown", next_action="verify_operation"
    )
    assert (envelope.commit_state, envelope.retry.directive, envelope.next_action) == (
        "unknown", "never", "verify_operation",
    )  # fmt: skip


def test_an_unknown_code_is_a_programming_error() -> None:
    with pytest.raises(KeyError, match="NOT_A_CODE"):
        codes.spec_for("NOT_A_CODE")
