"""Helpers for the store tests: envelopes of each kind, traits, and a row crafted by hand."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, Final

from sqlalchemy import update

from toolsafe.adapters.envelope import AnySuccess, Retry, ToolError, ToolSuccess, Verification
from toolsafe.recovery.policy import Policy, RetryPolicy, ToolTraits
from toolsafe.recovery.schema import steps
from toolsafe.recovery.store import StepStore

T0: Final = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
LEASE: Final = timedelta(seconds=30)
WRITE: Final = ToolTraits(writes=True, has_lookup=True, consistency_window=timedelta(seconds=10))
BLIND_WRITE: Final = ToolTraits(writes=True, has_lookup=False)
READ: Final = ToolTraits(writes=False, has_lookup=False)
POLICY: Final = Policy(retry=RetryPolicy(max_attempts=3), loop_guard=3)
INPUT: Final[dict[str, Any]] = {"recipient_email": "a@example.com", "amount": 120}


def success(ref: str, evidence: str = "inv_1") -> AnySuccess:
    return ToolSuccess(
        operation_ref=ref,
        result={"invoice_id": evidence},
        verification=Verification(checked_at=T0, evidence_ref=evidence),
    )


def _error(ref: str, **fields: Any) -> ToolError:
    fields.setdefault("safe_details", {})
    return ToolError(
        operation_ref=ref, agent_message="factual note", user_message="status", **fields
    )


def unknown(ref: str) -> ToolError:
    return _error(
        ref,
        code="OUTCOME_UNKNOWN",
        category="dependency",
        commit_state="unknown",
        retry=Retry(directive="never", max_attempts_remaining=0),
        next_action="verify_operation",
    )


def retry_later(ref: str, not_before: datetime, remaining: int = 3) -> ToolError:
    return _error(
        ref,
        code="RATE_LIMITED",
        category="dependency",
        commit_state="not_committed",
        retry=Retry(
            directive="after_delay", not_before=not_before, max_attempts_remaining=remaining
        ),
        next_action="wait_and_retry",
    )


def correct_input(ref: str, field: str = "recipient_email") -> ToolError:
    return _error(
        ref,
        code="INVALID_RECIPIENT_ADDRESS",
        category="validation",
        commit_state="not_committed",
        retry=Retry(directive="after_input_fix", max_attempts_remaining=1),
        next_action="correct_input",
        safe_details={"field": field},
    )


def needs_approval(ref: str) -> ToolError:
    return _error(
        ref,
        code="MISSING_APPROVAL",
        category="authorization",
        commit_state="not_committed",
        retry=Retry(directive="never", max_attempts_remaining=1),
        next_action="request_approval",
    )


def escalate(ref: str) -> ToolError:
    return _error(
        ref,
        code="VERSION_CONFLICT",
        category="conflict",
        commit_state="not_committed",
        retry=Retry(directive="never", max_attempts_remaining=0),
        next_action="escalate",
    )


def force(store: StepStore, operation_ref: str, **values: Any) -> None:
    """Set columns directly: rows that only old data or another writer could produce."""
    with store.engine.begin() as conn:
        conn.execute(update(steps).where(steps.c.operation_ref == operation_ref).values(**values))


# ------------------------------------------------------------------ other processes


def contend(url: str, refs: list[str], barrier: Any, results: Any, name: str) -> None:
    """Run in a spawned process, racing the others on one database.

    First everyone claims each of ``refs`` at the same moment; then everyone drains due
    work, then expired leases, in small batches until nothing is left.
    """
    from toolsafe.recovery.db import make_engine

    engine = make_engine(url)
    store = StepStore(engine)
    won: list[str] = []
    try:
        for ref in refs:
            barrier.wait()
            if store.claim_execution(ref, name, LEASE, T0) is not None:
                won.append(f"claimed:{ref}")
        barrier.wait()
        while batch := store.due_work(T0, limit=5, republish_after=timedelta(hours=1)):
            won.extend(f"due:{step.operation_ref}" for step in batch)
        barrier.wait()
        later = T0 + timedelta(hours=1)
        while expired := store.expire_leases(later, lambda _: WRITE, lambda _: POLICY, 5):
            won.extend(f"expired:{r.step.operation_ref}" for r in expired)
        results.put((name, won))
    finally:
        engine.dispose()
