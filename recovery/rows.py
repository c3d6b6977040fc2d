"""Translation between database rows and the runtime's values: rows to records and
snapshots, Decisions to column values, outcomes to redacted event details."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, cast

from sqlalchemy import Row

from toolsafe.adapters.envelope import CommitState, to_wire
from toolsafe.adapters.protocol import LookupFound, LookupNotFound, LookupUnavailable
from toolsafe.recovery import guards
from toolsafe.recovery.outcomes import Decision, Executed, LookedUp, StepSnapshot
from toolsafe.recovery.policy import ToolTraits
from toolsafe.recovery.reasons import NOOP_CLAIMED
from toolsafe.recovery.records import ClaimKind, Refused, StepRecord
from toolsafe.recovery.states import StepState


def iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def execution_refusal(row: Row[Any] | StepRecord | None, now: datetime) -> str | None:
    """Why this row may not be claimed for execution now; ``None`` when it may."""
    return guards.EXECUTION.refusal(row, now)


def verification_refusal(row: Row[Any] | StepRecord | None, now: datetime) -> str | None:
    """Why this row may not be claimed for verification now; ``None`` when it may."""
    return guards.VERIFICATION.refusal(row, now)


def claim_refused(kind: ClaimKind, row: guards.GuardedRow | None, now: datetime) -> Refused:
    """Why a claim of ``kind`` did nothing with ``row`` (as read after it) at ``now``: the
    guard's reason (a guard that passed and then lost the race: ``claimed``, the
    winner's), and the due time when only time stood in the way (an early hint)."""
    guard = guards.EXECUTION if kind == "execute" else guards.VERIFICATION
    reason = guard.refusal(row, now)
    if reason is None:
        return Refused(NOOP_CLAIMED)
    return Refused(reason, guard.due_later(row, now))


def snapshot(row: Row[Any] | StepRecord, traits: ToolTraits) -> StepSnapshot:
    """The step as ``decide`` sees it (from a row, or the record a claim returned)."""
    return StepSnapshot(
        operation_ref=row.operation_ref,
        tool=row.tool,
        traits=traits,
        state=StepState(row.state),
        commit_state=cast(CommitState | None, row.commit_state),
        attempts=row.attempts,
        max_attempts=row.max_attempts,
        verification_attempts=row.verification_attempts,
        lookups_unavailable=row.lookups_unavailable,
        input_hash=row.input_hash,
        last_sent_at=row.last_sent_at,
        fingerprint=row.fingerprint,
        fingerprint_repeats=row.fingerprint_repeats,
        flagged_fields=tuple(row.flagged_fields or ()),
        approval_input_hash=row.approval_input_hash,
        due_at=row.due_at,
        envelope=row.last_envelope,
    )


def decision_values(decision: Decision, envelope: Any = None) -> dict[str, Any]:
    """The columns a Decision sets; its ``None`` counters mean "unchanged".

    ``last_envelope`` is the envelope the model sees in the new state (None while there
    is no outcome yet); ``envelope`` passes it already serialised.
    """
    if envelope is None and decision.envelope is not None:
        envelope = to_wire(decision.envelope)
    values: dict[str, Any] = {
        "state": decision.state.value,
        "last_envelope": envelope,
        "commit_state": decision.commit_state,
        "due_at": decision.due_at,
        "reason": decision.reason,
        "flagged_fields": list(decision.fields),
        # Whatever the worker held is over: a new lease comes only with a new claim.
        "lease_owner": None,
        "lease_expires_at": None,
    }
    optional = {
        "max_attempts": decision.max_attempts,
        "verification_attempts": decision.verification_attempts,
        "lookups_unavailable": decision.lookups_unavailable,
        "fingerprint": decision.fingerprint,
        "fingerprint_repeats": decision.fingerprint_repeats,
        "input_hash": decision.input_hash,
        "approval_input_hash": decision.approval_input_hash,
    }
    values.update({key: value for key, value in optional.items() if value is not None})
    return values


def decision_detail(decision: Decision) -> dict[str, Any]:
    """What the event records about the Decision (codes, times, field names: no raw text)."""
    detail: dict[str, Any] = {"action": decision.action}
    if decision.due_at is not None:
        detail["due_at"] = iso(decision.due_at)
    if decision.reason is not None:
        detail["reason"] = decision.reason
    if decision.fields:
        detail["fields"] = list(decision.fields)
    if decision.evidence_ref is not None:
        detail["evidence_ref"] = decision.evidence_ref
    if decision.max_attempts is not None:
        detail["max_attempts"] = decision.max_attempts
    if decision.fingerprint is not None:
        detail["fingerprint"] = decision.fingerprint
        detail["fingerprint_repeats"] = decision.fingerprint_repeats
    detail.update(decision.extra)
    return detail


def outcome_detail(outcome: Executed | LookedUp) -> dict[str, Any]:
    """The redacted envelope of an execution, or a summary of a lookup (not its result)."""
    redacted = [item.as_json() for item in outcome.redactions]
    if isinstance(outcome, Executed):
        if redacted:
            return {"envelope": to_wire(outcome.envelope), "redactions": redacted}
        return {"envelope": to_wire(outcome.envelope)}
    result = outcome.result
    summary: dict[str, Any] = {"checked_at": iso(result.checked_at)}
    if isinstance(result, LookupFound):
        summary["found"] = True
        if result.evidence_ref is not None:
            summary["evidence_ref"] = result.evidence_ref
    elif isinstance(result, LookupNotFound):
        summary["found"] = False
    elif isinstance(result, LookupUnavailable):
        summary["unavailable"] = True
        summary["code"] = result.code
        if result.retry_after is not None:
            summary["retry_after_seconds"] = result.retry_after.total_seconds()
    if redacted:
        return {"lookup": summary, "redactions": redacted}
    return {"lookup": summary}


def updated_record(before: StepRecord, values: Mapping[str, Any], now: datetime) -> StepRecord:
    """``before`` with the column ``values`` a compare-and-set wrote (version + 1,
    ``updated_at`` = now), as reading the row back would give it: times in UTC, the
    state as a ``StepState``, the flagged fields as a tuple, JSON as plain values.

    Columns written without a new version must come in ``values`` from the row itself
    (``published_at``); the input is ``before``'s (a key rotation re-seals it without a
    version: the same plain input, under the old key's seal in this record)."""
    changed: dict[str, Any] = {}
    for name, value in values.items():
        if name == "state":
            value = StepState(value)
        elif name == "flagged_fields":
            value = tuple(value)
        elif isinstance(value, datetime):
            value = value.astimezone(UTC)
        changed[name] = value
    return replace(before, **changed, version=before.version + 1, updated_at=now.astimezone(UTC))


def json_ready(values: Mapping[str, Any]) -> dict[str, Any]:
    """Datetimes as ISO-8601 text, so a detail dict can go into a JSON column."""
    return {
        key: iso(value) if isinstance(value, datetime) else value for key, value in values.items()
    }
