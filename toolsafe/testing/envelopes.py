"""An envelope of every kind the runtime tells apart, for tests: each takes the
operation_ref it answers for first, so a scripted adapter can answer with one directly
(``adapter.answers.append(envelopes.unknown)``), and any field by keyword (``error``'s).
The article's own examples, with its messages, are in ``ARTICLE_EXAMPLES``."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from pydantic import JsonValue

from toolsafe.adapters.envelope import (
    AnySuccess,
    Category,
    CommitState,
    Directive,
    NextAction,
    Retry,
    SafeValue,
    ToolError,
    ToolSuccess,
    Verification,
)
from toolsafe.testing.runtime import Script

REF: Final = "run_81/step_4"
"""The article's operation_ref."""


def now() -> datetime:
    return datetime.now(UTC)


def success(
    operation_ref: str = REF,
    evidence: str | None = "inv_1",
    *,
    checked_at: datetime | None = None,
    result: JsonValue = None,
) -> AnySuccess:
    """The write happened and was checked: ``evidence`` is the downstream's reference
    (``result`` defaults to ``{"invoice_id": evidence}``)."""
    return ToolSuccess(
        operation_ref=operation_ref,
        result=result if result is not None else {"invoice_id": evidence},
        verification=Verification(checked_at=checked_at or now(), evidence_ref=evidence),
    )


def error(
    operation_ref: str = REF,
    *,
    code: str = "UPSTREAM_ERROR",
    category: Category = "validation",
    commit_state: CommitState = "not_committed",
    directive: Directive = "never",
    next_action: NextAction = "escalate",
    remaining: int = 3,
    not_before: datetime | None = None,
    details: Mapping[str, SafeValue] | None = None,
    agent_message: str = "factual note",
    user_message: str = "status",
) -> ToolError:
    """A ``ToolError`` of any kind: its fields by name, ``retry`` from ``directive``,
    ``remaining`` and ``not_before``, ``safe_details`` from ``details``."""
    return ToolError(
        code=code,
        category=category,
        commit_state=commit_state,
        retry=Retry(directive=directive, not_before=not_before, max_attempts_remaining=remaining),
        next_action=next_action,
        operation_ref=operation_ref,
        safe_details=dict(details or {}),
        agent_message=agent_message,
        user_message=user_message,
    )


def unknown(operation_ref: str = REF, **overrides: Any) -> ToolError:
    """The write may have happened: verify before anything else (class 4)."""
    fields: dict[str, Any] = {
        "code": "OUTCOME_UNKNOWN",
        "category": "dependency",
        "commit_state": "unknown",
        "next_action": "verify_operation",
        "remaining": 0,
    }
    return error(operation_ref, **{**fields, **overrides})


def retry_later(
    operation_ref: str = REF,
    not_before: datetime | None = None,
    remaining: int = 3,
    **overrides: Any,
) -> ToolError:
    """Provably nothing written; try again from ``not_before`` (a minute from now when
    not given) (class 2)."""
    fields: dict[str, Any] = {
        "code": "RATE_LIMITED",
        "category": "dependency",
        "directive": "after_delay",
        "next_action": "wait_and_retry",
        "not_before": not_before or now() + timedelta(seconds=60),
        "remaining": remaining,
    }
    return error(operation_ref, **{**fields, **overrides})


def retry_in(seconds: float) -> Script:
    """A scripted answer: a rate limit whose not_before is ``seconds`` from when it is
    given."""

    def answer(operation_ref: str) -> ToolError:
        return retry_later(operation_ref, now() + timedelta(seconds=seconds))

    return answer


def correct_input(
    operation_ref: str = REF, field: str = "recipient_email", remaining: int = 1, **overrides: Any
) -> ToolError:
    """The input is wrong in ``field`` (several: comma-separated); a corrected input may
    go out (class 1)."""
    fields: dict[str, Any] = {
        "code": "INVALID_RECIPIENT_ADDRESS",
        "directive": "after_input_fix",
        "next_action": "correct_input",
        "remaining": remaining,
        "details": {"field": field},
    }
    return error(operation_ref, **{**fields, **overrides})


def needs_approval(operation_ref: str = REF, **overrides: Any) -> ToolError:
    """A human must approve first (class 3)."""
    fields: dict[str, Any] = {
        "code": "MISSING_APPROVAL",
        "category": "authorization",
        "next_action": "request_approval",
        "remaining": 1,
    }
    return error(operation_ref, **{**fields, **overrides})


def escalate(operation_ref: str = REF, **overrides: Any) -> ToolError:
    """A version conflict: no retry, a new plan from fresh facts (class 3)."""
    fields: dict[str, Any] = {"code": "VERSION_CONFLICT", "category": "conflict", "remaining": 0}
    return error(operation_ref, **{**fields, **overrides})


conflict = escalate


# ------------------------------------------------------------------ the article's examples

CHECKED_AT: Final = datetime(2026, 11, 30, 9, 15, 2, tzinfo=UTC)
NOT_BEFORE: Final = datetime(2026, 11, 30, 9, 16, 0, tzinfo=UTC)
"""Fixed times, so the examples (and the JSON written from them) are reproducible."""


def invalid_recipient_address() -> ToolError:
    """Class 1, correctable input: the flagged field must change before a retry."""
    return correct_input(
        agent_message="The recipient address was rejected. Correct recipient_email and retry.",
        user_message="The e-mail address needs to be corrected.",
    )


def dependency_unavailable() -> ToolError:
    """Class 2, transient dependency: provably nothing was written; wait until not_before."""
    return retry_later(
        REF,
        NOT_BEFORE,
        code="DEPENDENCY_UNAVAILABLE",
        details={"reason": "dns_failure"},
        agent_message="The service could not be reached; nothing was sent. Retry is scheduled.",
        user_message="The service is temporarily unavailable; we will retry automatically.",
    )


def version_conflict() -> ToolError:
    """Class 3, conflict: no parameter fiddling; a new plan from fresh facts."""
    return escalate(
        details={"resource": "invoice"},
        agent_message="The record changed since it was read. Re-read it and plan again.",
        user_message="The record was changed by someone else.",
    )


def missing_approval() -> ToolError:
    """Class 3, authorization block: a human must approve first."""
    return needs_approval(
        details={"approval": "finance"},
        agent_message="This action needs approval before it can run.",
        user_message="Waiting for approval.",
    )


def outcome_unknown() -> ToolError:
    """Class 4, unknown write outcome: never write again before verification."""
    return unknown(
        details={"lookup": "get_invoice_by_operation_ref"},
        agent_message="The request timed out after it was sent. The result is being verified.",
        user_message="We are checking whether the invoice was created.",
    )


def invoice_created() -> AnySuccess:
    """A success with evidence: the target state was checked."""
    return success(
        evidence="invoice:inv_1001",
        checked_at=CHECKED_AT,
        result={"invoice_id": "inv_1001", "amount_cents": 12500, "currency": "EUR"},
    )


ARTICLE_EXAMPLES: Final = {
    "INVALID_RECIPIENT_ADDRESS": invalid_recipient_address,
    "DEPENDENCY_UNAVAILABLE": dependency_unavailable,
    "VERSION_CONFLICT": version_conflict,
    "MISSING_APPROVAL": missing_approval,
    "OUTCOME_UNKNOWN": outcome_unknown,
}
"""The article's four failure classes, by code, as named examples tests and docs share."""
