"""An envelope of every kind the runtime tells apart, for tests: each takes the
operation_ref it answers for, so a scripted adapter can answer with one directly
(``adapter.answers.append(envelopes.unknown)``)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, Final

from toolsafe.adapters.envelope import AnySuccess, Retry, ToolError, ToolSuccess, Verification
from toolsafe.testing.runtime import Script

REF: Final = "run_81/step_4"
"""The article's operation_ref."""


def now() -> datetime:
    return datetime.now(UTC)


def success(
    operation_ref: str = REF, evidence: str = "inv_1", *, checked_at: datetime | None = None
) -> AnySuccess:
    """The write happened and was checked: ``evidence`` is the downstream's reference."""
    return ToolSuccess(
        operation_ref=operation_ref,
        result={"invoice_id": evidence},
        verification=Verification(checked_at=checked_at or now(), evidence_ref=evidence),
    )


def error(operation_ref: str = REF, **fields: Any) -> ToolError:
    """A ``ToolError`` with neutral messages and the given fields."""
    fields.setdefault("safe_details", {})
    return ToolError(
        operation_ref=operation_ref,
        agent_message=fields.pop("agent_message", "factual note"),
        user_message=fields.pop("user_message", "status"),
        **fields,
    )


def unknown(operation_ref: str = REF) -> ToolError:
    """The write may have happened: verify before anything else (class 4)."""
    return error(
        operation_ref,
        code="OUTCOME_UNKNOWN",
        category="dependency",
        commit_state="unknown",
        retry=Retry(directive="never", max_attempts_remaining=0),
        next_action="verify_operation",
    )


def retry_later(operation_ref: str, not_before: datetime, remaining: int = 3) -> ToolError:
    """Provably nothing written; try again from ``not_before`` (class 2)."""
    return error(
        operation_ref,
        code="RATE_LIMITED",
        category="dependency",
        commit_state="not_committed",
        retry=Retry(
            directive="after_delay", not_before=not_before, max_attempts_remaining=remaining
        ),
        next_action="wait_and_retry",
    )


def retry_in(seconds: float) -> Script:
    """A scripted answer: a rate limit whose not_before is ``seconds`` from when it is
    given."""

    def answer(operation_ref: str) -> ToolError:
        return retry_later(operation_ref, now() + timedelta(seconds=seconds))

    return answer


def correct_input(operation_ref: str = REF, field: str = "recipient_email") -> ToolError:
    """The input is wrong in ``field``; a corrected input may go out (class 1)."""
    return error(
        operation_ref,
        code="INVALID_RECIPIENT_ADDRESS",
        category="validation",
        commit_state="not_committed",
        retry=Retry(directive="after_input_fix", max_attempts_remaining=1),
        next_action="correct_input",
        safe_details={"field": field},
    )


def needs_approval(operation_ref: str = REF) -> ToolError:
    """A human must approve first (class 3)."""
    return error(
        operation_ref,
        code="MISSING_APPROVAL",
        category="authorization",
        commit_state="not_committed",
        retry=Retry(directive="never", max_attempts_remaining=1),
        next_action="request_approval",
    )


def escalate(operation_ref: str = REF) -> ToolError:
    """A version conflict: no retry, a new plan from fresh facts (class 3)."""
    return error(
        operation_ref,
        code="VERSION_CONFLICT",
        category="conflict",
        commit_state="not_committed",
        retry=Retry(directive="never", max_attempts_remaining=0),
        next_action="escalate",
    )


conflict = escalate
