"""The envelope the model sees after each Decision (DESIGN §6): its code, next_action,
retry, commit_state and messages agree with the step's new state.

The adapter's envelope is shown as it is only while it still describes the state (a
correction, an approval, a wait, a verification it asked for); otherwise the runtime
builds one from the code catalogue (``toolsafe.adapters.codes``). The adapter's own
envelope always stays in the step's events. Pure: no I/O, no clock reads.
"""

from __future__ import annotations

from datetime import datetime
from typing import Final

from pydantic import ValidationError

from toolsafe.adapters import codes
from toolsafe.adapters.envelope import (
    AnySuccess,
    CommitState,
    Retry,
    ToolError,
    ToolSuccess,
    Verification,
    parse_result,
)
from toolsafe.adapters.protocol import LookupFound
from toolsafe.adapters.redaction import safe_detail_value, safe_text
from toolsafe.recovery.outcomes import (
    Cancelled,
    Decision,
    Executed,
    LeaseExpired,
    LookedUp,
    Outcome,
    Rejected,
    Resolved,
    StepSnapshot,
)
from toolsafe.recovery.states import NO_OUTCOME_YET, WAITING_ON_THE_AGENT_OR_A_HUMAN, StepState

S = StepState
Shown = AnySuccess | ToolError | None


# Escalations whose category is the last error's (a limit spent on validation errors is
# not a dependency problem).
_CATEGORY_OF_LAST: Final = frozenset(
    {codes.ATTEMPTS_EXHAUSTED, codes.LOOP_GUARD, codes.NOT_BEFORE_TOO_FAR}
)
_FOREIGN_ESCALATE: Final = (
    "The call ended with {code} and was handed to an operator; do not retry it."
)


def shown_envelope(
    step: StepSnapshot, outcome: Outcome, decision: Decision, now: datetime
) -> Shown:
    """The envelope that agrees with ``decision`` for ``step`` after ``outcome``."""
    state = decision.state
    if state in NO_OUTCOME_YET:
        return None
    observed = outcome.envelope if isinstance(outcome, Executed) else None
    if observed is not None and observed.operation_ref != step.operation_ref:
        observed = None  # an answer for another operation says nothing about this one
    limit = decision.max_attempts if decision.max_attempts is not None else step.max_attempts
    left = max(limit - step.attempts, 0)
    if state is S.SUCCEEDED:
        return _success(step, outcome, observed, now)
    if state in WAITING_ON_THE_AGENT_OR_A_HUMAN:
        if not isinstance(observed, ToolError):  # pragma: no cover - decide's contract
            raise AssertionError(f"{state} is only reached from an adapter's error")
        # A correction is retried once fixed; an approval request waits for a human only.
        # Attempts left is what the person's decision gives: the tool's whole budget
        # again (``decide.fresh_budget``), not the adapter's count for the next call.
        directive = "after_input_fix" if state is S.NEEDS_INPUT else "never"
        return _with_retry(observed, directive, left, None)
    if state is S.WAITING_RETRY:
        return _waiting(step, outcome, observed, decision, left)
    if state is S.VERIFYING:
        return _verifying(step, outcome, observed)
    return _closed(step, outcome, observed, decision)


def _with_retry(
    envelope: ToolError, directive: str, left: int, not_before: datetime | None
) -> ToolError:
    """The adapter's envelope with the runtime's own counts (it may only lower them)."""
    retry = Retry.model_validate(
        {"directive": directive, "not_before": not_before, "max_attempts_remaining": left}
    )
    if retry == envelope.retry:
        return envelope
    return ToolError.model_validate({**envelope.model_dump(), "retry": retry})


def _tool_details(step: StepSnapshot, **details: object) -> dict[str, object]:
    return {"tool": step.tool, **details}


def _success(
    step: StepSnapshot, outcome: Outcome, observed: AnySuccess | ToolError | None, now: datetime
) -> AnySuccess:
    if isinstance(observed, ToolSuccess):
        return observed
    if isinstance(outcome, LookedUp) and isinstance(outcome.result, LookupFound):
        return verified_success(step.operation_ref, outcome.result)
    if isinstance(outcome, Resolved):
        # Closed by an operator, not verified by toolsafe: the result says who closed it,
        # why, and the downstream reference they checked (the evidence).
        return AnySuccess(
            operation_ref=step.operation_ref,
            result=operator_resolution(outcome),
            verification=Verification(
                checked_at=now, evidence_ref=(outcome.evidence or "").strip() or None
            ),
        )
    raise AssertionError("succeeded without an adapter success, a lookup or an operator")


def operator_resolution(outcome: Resolved) -> dict[str, str | bool]:
    """What an operator's resolution tells the model: ``resolved_by: operator``, who, why
    and the evidence (``docs/lifecycle.md``, "Operator resolutions")."""
    operator = safe_detail_value(outcome.operator)
    shown: dict[str, str | bool] = {
        "resolved_by": "operator",
        "operator": operator if isinstance(operator, str) else "unnamed",
        "reason": safe_text(outcome.reason),
    }
    if outcome.evidence is not None and outcome.evidence.strip():
        shown["evidence"] = outcome.evidence.strip()
    if outcome.confirm_not_written:
        shown["confirm_not_written"] = True
    return shown


def verified_success(operation_ref: str, found: LookupFound) -> AnySuccess:
    """The ToolSuccess a successful verification stands for."""
    verification = Verification(checked_at=found.checked_at, evidence_ref=found.evidence_ref)
    try:
        return AnySuccess(
            operation_ref=operation_ref, result=found.result, verification=verification
        )
    except ValidationError:
        # A lookup result that is not plain JSON still proves the commit; keep the proof.
        return AnySuccess(operation_ref=operation_ref, result=None, verification=verification)


def _waiting(
    step: StepSnapshot,
    outcome: Outcome,
    observed: AnySuccess | ToolError | None,
    decision: Decision,
    left: int,
) -> ToolError:
    when = decision.due_at
    if isinstance(observed, ToolError) and observed.next_action == "wait_and_retry":
        return _with_retry(observed, "after_delay", left, when)
    if isinstance(observed, ToolError):
        # A read's dependency failure: retried whatever the adapter's directive said.
        code, details = codes.DEPENDENCY_UNAVAILABLE, {"reason": observed.code.lower()}
    elif isinstance(outcome, LookedUp):
        code, details = codes.OPERATION_NOT_FOUND, {}
    else:
        code, details = codes.WORKER_LOST, {}
    return codes.build_error(
        code,
        step.operation_ref,
        _tool_details(step, **details),
        not_before=when,
        attempts_remaining=left,
    )


def _stored(step: StepSnapshot) -> AnySuccess | ToolError | None:
    if not step.envelope:
        return None
    try:
        return parse_result(dict(step.envelope))
    except ValidationError:
        return None


def _unknown(step: StepSnapshot, reason: str) -> ToolError:
    return codes.build_error(
        codes.OUTCOME_UNKNOWN,
        step.operation_ref,
        _tool_details(step, reason=reason),
        commit_state="unknown",
        next_action="verify_operation",
    )


def _verifying(
    step: StepSnapshot, outcome: Outcome, observed: AnySuccess | ToolError | None
) -> ToolError:
    if isinstance(outcome, Executed):
        if not isinstance(observed, ToolError):
            return _unknown(step, "adapter_contract_violation")
        if observed.commit_state == "unknown" and observed.next_action == "verify_operation":
            return _with_retry(observed, "never", 0, None)
        if observed.code in codes.CATALOGUE:
            return codes.build_error(
                observed.code,
                step.operation_ref,
                {"reason": "unconfirmed", **_tool_details(step), **observed.safe_details},
                commit_state="unknown",
                next_action="verify_operation",
            )
        return _unknown(step, observed.code.lower())
    if isinstance(outcome, LeaseExpired) and step.state is S.IN_FLIGHT:
        return _unknown(step, "worker_lost")
    if isinstance(outcome, Resolved):
        return _unknown(step, "operator_redrive")
    # Still verifying (another lookup, or a lookup worker lost): what it showed still holds.
    stored = _stored(step)
    if (
        isinstance(stored, ToolError)
        and stored.commit_state == "unknown"
        and stored.next_action == "verify_operation"
    ):
        return stored
    return _unknown(step, "verifying")


def _closed(
    step: StepSnapshot,
    outcome: Outcome,
    observed: AnySuccess | ToolError | None,
    decision: Decision,
) -> ToolError:
    """escalated, failed, cancelled: the code is the decision's reason, nothing is offered."""
    code = decision.reason
    commit: CommitState = decision.commit_state or "not_committed"
    if code is None:  # pragma: no cover - decide always names why
        raise AssertionError(f"{decision.state} without a reason")
    last = observed if isinstance(observed, ToolError) else _stored(step)
    if (
        isinstance(observed, ToolError)
        and observed.code == code
        and observed.next_action == "escalate"
        and observed.retry.directive == "never"
        and observed.retry.max_attempts_remaining == 0
        and observed.commit_state == commit
    ):
        return observed  # the adapter's escalation, as it said it
    details = _tool_details(step)
    if isinstance(observed, ToolError) and observed.code == code:
        details = {**observed.safe_details, **details}
    if isinstance(observed, ToolError) and observed.code != code:
        details["last_code"] = observed.code
    elif isinstance(outcome, LookedUp):
        details["last_code"] = codes.OPERATION_NOT_FOUND  # verification: not written
    elif isinstance(outcome, LeaseExpired):
        details["last_code"] = codes.WORKER_LOST
    if isinstance(outcome, Cancelled):
        details["by"] = outcome.by
    elif isinstance(outcome, Rejected):
        details["approver"] = outcome.approver
    elif isinstance(outcome, Resolved):
        details["operator"] = outcome.operator
    if code == codes.LOOKUP_UNAVAILABLE and decision.lookups_unavailable is not None:
        details["lookups"] = decision.lookups_unavailable
    if code == codes.UNVERIFIABLE_UNKNOWN:
        reason = last.safe_details.get("reason") if isinstance(last, ToolError) else None
        details["reason"] = reason if isinstance(reason, str) else "worker_lost"
    if code in codes.CATALOGUE:
        category = (
            last.category if code in _CATEGORY_OF_LAST and isinstance(last, ToolError) else None
        )
        closed_by_operator = code == codes.OPERATOR_RESOLVED
        built = codes.build_error(
            code,
            step.operation_ref,
            details,
            # An operator's closing text holds whatever the commit_state is; only the
            # envelope's commit_state has to follow the step's.
            commit_state=None if closed_by_operator else commit,
            next_action="escalate",
            attempts_remaining=0,
            category=category,
        )
        if built.commit_state != commit:
            built = ToolError.model_validate({**built.model_dump(), "commit_state": commit})
        return built
    # A code of the adapter's own that toolsafe's catalogue does not know.
    category = observed.category if isinstance(observed, ToolError) else "internal"
    safe = dict(observed.safe_details) if isinstance(observed, ToolError) else {}
    return ToolError(
        code=code,
        category=category,
        commit_state=commit,
        retry=Retry(directive="never", max_attempts_remaining=0),
        next_action="escalate",
        operation_ref=step.operation_ref,
        safe_details=safe,
        agent_message=_FOREIGN_ESCALATE.format(code=code),
        user_message="The action could not be completed and was handed to an operator.",
    )
