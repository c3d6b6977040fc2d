"""The article's example envelopes, as named values that tests and docs share.

Times are fixed so the examples (and the JSON written from them) are reproducible.
"""

from __future__ import annotations

from datetime import UTC, datetime

from toolsafe.adapters.envelope import AnySuccess, Retry, ToolError, ToolSuccess, Verification

OPERATION_REF = "run_81/step_4"
CHECKED_AT = datetime(2026, 11, 30, 9, 15, 2, tzinfo=UTC)
NOT_BEFORE = datetime(2026, 11, 30, 9, 16, 0, tzinfo=UTC)


def invalid_recipient_address() -> ToolError:
    """Class 1, correctable input: the flagged field must change before a retry."""
    return ToolError(
        code="INVALID_RECIPIENT_ADDRESS",
        category="validation",
        commit_state="not_committed",
        retry=Retry(directive="after_input_fix", max_attempts_remaining=1),
        next_action="correct_input",
        operation_ref=OPERATION_REF,
        safe_details={"field": "recipient_email"},
        agent_message="The recipient address was rejected. Correct recipient_email and retry.",
        user_message="The e-mail address needs to be corrected.",
    )


def dependency_unavailable() -> ToolError:
    """Class 2, transient dependency: provably nothing was written; wait until not_before."""
    return ToolError(
        code="DEPENDENCY_UNAVAILABLE",
        category="dependency",
        commit_state="not_committed",
        retry=Retry(directive="after_delay", not_before=NOT_BEFORE, max_attempts_remaining=3),
        next_action="wait_and_retry",
        operation_ref=OPERATION_REF,
        safe_details={"reason": "dns_failure"},
        agent_message="The service could not be reached; nothing was sent. Retry is scheduled.",
        user_message="The service is temporarily unavailable; we will retry automatically.",
    )


def version_conflict() -> ToolError:
    """Class 3, conflict: no parameter fiddling; a new plan from fresh facts."""
    return ToolError(
        code="VERSION_CONFLICT",
        category="conflict",
        commit_state="not_committed",
        retry=Retry(directive="never", max_attempts_remaining=0),
        next_action="escalate",
        operation_ref=OPERATION_REF,
        safe_details={"resource": "invoice"},
        agent_message="The record changed since it was read. Re-read it and plan again.",
        user_message="The record was changed by someone else.",
    )


def missing_approval() -> ToolError:
    """Class 3, authorization block: a human must approve first."""
    return ToolError(
        code="MISSING_APPROVAL",
        category="authorization",
        commit_state="not_committed",
        retry=Retry(directive="never", max_attempts_remaining=1),
        next_action="request_approval",
        operation_ref=OPERATION_REF,
        safe_details={"approval": "finance"},
        agent_message="This action needs approval before it can run.",
        user_message="Waiting for approval.",
    )


def outcome_unknown() -> ToolError:
    """Class 4, unknown write outcome: never write again before verification."""
    return ToolError(
        code="OUTCOME_UNKNOWN",
        category="dependency",
        commit_state="unknown",
        retry=Retry(directive="never", max_attempts_remaining=0),
        next_action="verify_operation",
        operation_ref=OPERATION_REF,
        safe_details={"lookup": "get_invoice_by_operation_ref"},
        agent_message="The request timed out after it was sent. The result is being verified.",
        user_message="We are checking whether the invoice was created.",
    )


def invoice_created() -> AnySuccess:
    """A success with evidence: the target state was checked."""
    return ToolSuccess(
        operation_ref=OPERATION_REF,
        result={"invoice_id": "inv_1001", "amount_cents": 12500, "currency": "EUR"},
        verification=Verification(checked_at=CHECKED_AT, evidence_ref="invoice:inv_1001"),
    )


ARTICLE_EXAMPLES = {
    "INVALID_RECIPIENT_ADDRESS": invalid_recipient_address,
    "DEPENDENCY_UNAVAILABLE": dependency_unavailable,
    "VERSION_CONFLICT": version_conflict,
    "MISSING_APPROVAL": missing_approval,
    "OUTCOME_UNKNOWN": outcome_unknown,
}
