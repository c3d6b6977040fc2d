"""The store's statements, each working inside a transaction the caller owns.

Every state change is a compare-and-set on (id, state, version) that appends its event
row in the same transaction; zero rows updated is an answer the caller turns into
``None`` or a refusal.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, Row, Update, bindparam, insert, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite

from adapters.protocol import LookupFound
from recovery.decide import decide
from recovery.outcomes import Decision, Executed, LookedUp, Outcome
from recovery.policy import Policy, ToolTraits
from recovery.records import StepRecord
from recovery.rows import (
    CLAIMABLE,
    decision_detail,
    decision_values,
    execution_refusal,
    json_ready,
    outcome_detail,
    snapshot,
    verification_refusal,
    verified_success,
)
from recovery.schema import step_events, steps
from recovery.states import LABELS, StepState

S = StepState
Decided = tuple[Row[Any], Decision]

CLAIM_LABEL_VERIFY = "claimed for verification"


# The hot statements are built once with bind parameters: building and cache-keying a
# Core statement per call costs more than the database round trip it describes.
_BY_REF = select(steps).where(steps.c.operation_ref == bindparam("ref"))
_BY_REF_LOCKED = _BY_REF.with_for_update()
_BY_ID = select(steps).where(steps.c.id == bindparam("id"))
_EVENT = insert(step_events)
_CAS: dict[tuple[tuple[str, ...], bool], Update] = {}


def fetch(conn: Connection, operation_ref: str, *, lock: bool = False) -> Row[Any] | None:
    query = _BY_REF_LOCKED if lock and conn.dialect.name == "postgresql" else _BY_REF
    return conn.execute(query, {"ref": operation_ref}).first()


def fetch_by_id(conn: Connection, step_id: int) -> Row[Any] | None:
    return conn.execute(_BY_ID, {"id": step_id}).first()


def append_event(
    conn: Connection,
    *,
    step_id: int | None,
    operation_ref: str,
    at: datetime,
    kind: str,
    from_state: str | None,
    to_state: str | None,
    label: str,
    detail: Mapping[str, Any],
) -> None:
    conn.execute(
        _EVENT,
        {
            "step_id": step_id,
            "operation_ref": operation_ref,
            "at": at,
            "kind": kind,
            "from_state": from_state,
            "to_state": to_state,
            "label": label,
            "detail": json_ready(detail),
        },
    )


def _cas_statement(columns: tuple[str, ...], owned: bool) -> Update:
    statement = _CAS.get((columns, owned))
    if statement is None:
        guard = [
            steps.c.id == bindparam("cas_id"),
            steps.c.state == bindparam("cas_state"),
            steps.c.version == bindparam("cas_version"),
        ]
        if owned:
            guard.append(steps.c.lease_owner == bindparam("cas_owner"))
        values: dict[str, Any] = {
            column: bindparam(f"set_{column}", type_=steps.c[column].type) for column in columns
        }
        statement = (
            update(steps)
            .where(*guard)
            .values(
                **values,
                version=steps.c.version + 1,
                updated_at=bindparam("set_updated_at", type_=steps.c.updated_at.type),
            )
            .returning(*steps.c)
        )
        _CAS[(columns, owned)] = statement
    return statement


def cas_update(
    conn: Connection,
    row: Row[Any] | StepRecord,
    values: Mapping[str, Any],
    now: datetime,
    *,
    lease_owner: str | None = None,
) -> Row[Any] | None:
    """``UPDATE … WHERE id AND state AND version [AND lease_owner]``; None when it lost."""
    columns = tuple(sorted(values))
    parameters = {f"set_{column}": values[column] for column in columns}
    parameters.update(
        cas_id=row.id, cas_state=str(row.state), cas_version=row.version, set_updated_at=now
    )
    if lease_owner is not None:
        parameters["cas_owner"] = lease_owner
    statement = _cas_statement(columns, lease_owner is not None)
    return conn.execute(statement, parameters).first()


# ------------------------------------------------------------------ create


def insert_step(
    conn: Connection,
    *,
    tool: str,
    input: Mapping[str, Any],
    input_hash: str,
    operation_ref: str,
    max_attempts: int,
    now: datetime,
) -> tuple[Row[Any], bool]:
    """Insert the pending step unless its operation_ref exists; (row, created)."""
    values: dict[str, Any] = {
        "operation_ref": operation_ref,
        "tool": tool,
        "input": dict(input),
        "input_hash": input_hash,
        "state": S.PENDING.value,
        "commit_state": None,
        "attempts": 0,
        "max_attempts": max_attempts,
        "verification_attempts": 0,
        "lookups_unavailable": 0,
        "due_at": now,
        "flagged_fields": [],
        "fingerprint_repeats": 0,
        "version": 1,
        "created_at": now,
        "updated_at": now,
    }
    dialect = postgresql if conn.dialect.name == "postgresql" else sqlite
    # ON CONFLICT DO NOTHING: two submissions of one operation_ref racing both succeed,
    # one of them as "already there" (R2), instead of one failing on the unique index.
    statement = (
        dialect.insert(steps)
        .values(**values)
        .on_conflict_do_nothing(index_elements=[steps.c.operation_ref])
        .returning(*steps.c)
    )
    row = conn.execute(statement).first()
    if row is None:
        existing = fetch(conn, operation_ref)
        if existing is None:  # pragma: no cover - the conflicting row cannot vanish
            raise RuntimeError(f"operation_ref {operation_ref!r} conflicted but is not there")
        return existing, False
    append_event(
        conn,
        step_id=row.id,
        operation_ref=operation_ref,
        at=now,
        kind="submitted",
        from_state=None,
        to_state=S.PENDING.value,
        label="submitted",
        detail={"tool": tool, "input_hash": input_hash, "max_attempts": max_attempts},
    )
    return row, True


# ------------------------------------------------------------------ claims


def _claim_values(row: Row[Any], owner: str, lease: timedelta, now: datetime) -> dict[str, Any]:
    return {
        "state": S.IN_FLIGHT.value,
        "lease_owner": owner,
        "lease_expires_at": now + lease,
        "attempts": row.attempts + 1,  # the version guard makes this exact
        "last_sent_at": now,
    }


def _claim_fast_statement() -> Update:
    prior_steps = steps.alias("prior_steps")
    prior = (
        select(prior_steps.c.id, prior_steps.c.state.label("prior_state"))
        .where(prior_steps.c.operation_ref == bindparam("ref"))
        .subquery("prior")
    )
    now = bindparam("now", type_=steps.c.updated_at.type)
    return (
        update(steps)
        .where(
            steps.c.id == prior.c.id,
            steps.c.state.in_(CLAIMABLE),
            steps.c.due_at <= now,
            steps.c.attempts < steps.c.max_attempts,
            or_(steps.c.commit_state.is_(None), steps.c.commit_state != "unknown"),
        )
        .values(
            state=S.IN_FLIGHT.value,
            lease_owner=bindparam("owner"),
            lease_expires_at=bindparam("lease_expires_at", type_=steps.c.updated_at.type),
            attempts=steps.c.attempts + 1,
            last_sent_at=now,
            version=steps.c.version + 1,
            updated_at=now,
        )
        .returning(*steps.c, prior.c.prior_state)
    )


_CLAIM_FAST = _claim_fast_statement()


def _claim_fast(
    conn: Connection, operation_ref: str, owner: str, lease: timedelta, now: datetime
) -> tuple[Row[Any], str] | None:
    """PostgreSQL: one ``UPDATE … FROM … RETURNING`` that also returns the prior state.

    The guard is evaluated again on the newest row version if another transaction got
    there first, so of many concurrent claims exactly one matches.
    """
    parameters = {
        "ref": operation_ref,
        "owner": owner,
        "lease_expires_at": now + lease,
        "now": now,
    }
    found = conn.execute(_CLAIM_FAST, parameters).first()
    if found is None:
        return None
    return found, found.prior_state


def claim_execution(
    conn: Connection, operation_ref: str, owner: str, lease: timedelta, now: datetime
) -> Row[Any] | None:
    """pending / due waiting_retry → in_flight under a lease, attempt + 1 (R3)."""
    claimed: tuple[Row[Any], str] | None = None
    current: Row[Any] | None = None
    if conn.dialect.name == "postgresql":
        claimed = _claim_fast(conn, operation_ref, owner, lease, now)
    else:
        current = fetch(conn, operation_ref)
        if execution_refusal(current, now) is None and current is not None:
            row = cas_update(conn, current, _claim_values(current, owner, lease, now), now)
            if row is not None:
                claimed = (row, current.state)
    if claimed is not None:
        row, prior_state = claimed
        append_event(
            conn,
            step_id=row.id,
            operation_ref=operation_ref,
            at=now,
            kind="claimed",
            from_state=prior_state,
            to_state=S.IN_FLIGHT.value,
            label=LABELS[(S(prior_state), S.IN_FLIGHT)],
            detail={
                "claim": "execute",
                "owner": owner,
                "attempt": row.attempts,
                "lease_expires_at": row.lease_expires_at,
            },
        )
        return row
    current = fetch(conn, operation_ref)
    if (
        current is not None
        and current.state == S.IN_FLIGHT.value
        and current.lease_owner == owner
        and current.last_sent_at == now
    ):
        # This very claim committed before the connection dropped and the
        # infrastructure retry ran it again: it is ours.
        return current
    _noop(conn, operation_ref, current, now, "execute", execution_refusal(current, now))
    return None


def claim_verification(
    conn: Connection, operation_ref: str, owner: str, lease: timedelta, now: datetime
) -> Row[Any] | None:
    """A due ``verifying`` step with no live lease gets one; the state stays verifying."""
    current = fetch(conn, operation_ref)
    refusal = verification_refusal(current, now)
    if refusal is None and current is not None:
        row = cas_update(
            conn, current, {"lease_owner": owner, "lease_expires_at": now + lease}, now
        )
        if row is not None:
            append_event(
                conn,
                step_id=row.id,
                operation_ref=operation_ref,
                at=now,
                kind="claimed",
                from_state=current.state,
                to_state=row.state,
                label=CLAIM_LABEL_VERIFY,
                detail={
                    "claim": "verify",
                    "owner": owner,
                    "lease_expires_at": row.lease_expires_at,
                },
            )
            return row
        current = fetch(conn, operation_ref)
        refusal = verification_refusal(current, now)
    if (
        current is not None
        and current.state == S.VERIFYING.value
        and current.lease_owner == owner
        and current.lease_expires_at == now + lease
    ):
        return current  # the retried claim had committed: it is ours
    _noop(conn, operation_ref, current, now, "verify", refusal)
    return None


def _noop(
    conn: Connection,
    operation_ref: str,
    current: Row[Any] | None,
    now: datetime,
    claim: str,
    reason: str | None,
) -> None:
    """Record a claim that did not happen and why: duplicate writes prevented."""
    state = None if current is None else current.state
    append_event(
        conn,
        step_id=None if current is None else current.id,
        operation_ref=operation_ref,
        at=now,
        kind="noop",
        from_state=state,
        to_state=state,
        label=f"{claim} claim refused",
        # A guard that passed a moment ago and lost the race names the winner's state.
        detail={"claim": claim, "reason": reason or "claimed"},
    )


# ------------------------------------------------------------------ outcomes


def record(
    conn: Connection,
    *,
    claimed: StepRecord,
    owner: str,
    outcome: Executed | LookedUp,
    traits: ToolTraits,
    policy: Policy,
    now: datetime,
    rng: random.Random,
) -> Decided | None:
    """Decide on the outcome and write it, if the claim still holds.

    No SELECT first: the row as claimed is the row as it is, or the compare-and-set on
    its version (and lease owner) matches nothing and the lease was lost (R4, R5).
    """
    current = claimed
    decision = decide(snapshot(current, traits), outcome, now, policy, rng)
    values = decision_values(decision)
    if isinstance(outcome, Executed):
        values["last_envelope"] = outcome_detail(outcome)["envelope"]
    elif decision.state is StepState.SUCCEEDED and isinstance(outcome.result, LookupFound):
        # The model must see the success that verification proved, not the stale
        # OUTCOME_UNKNOWN it was shown while the lookup ran.
        values["last_envelope"] = verified_success(current.operation_ref, outcome.result)
    row = cas_update(conn, current, values, now, lease_owner=owner)
    if row is None:
        return None
    append_event(
        conn,
        step_id=row.id,
        operation_ref=row.operation_ref,
        at=now,
        kind="executed" if isinstance(outcome, Executed) else "looked_up",
        from_state=current.state,
        to_state=row.state,
        label=decision.label,
        detail={**outcome_detail(outcome), **decision_detail(decision)},
    )
    return row, decision


def apply_action(
    conn: Connection,
    current: Row[Any],
    *,
    outcome_for: Callable[[Row[Any]], Outcome],
    kind: str,
    detail: Mapping[str, Any],
    traits: ToolTraits,
    policy: Policy,
    now: datetime,
    rng: random.Random,
    values_for: Callable[[Row[Any], Decision], Mapping[str, Any]] | None = None,
) -> Decided | None:
    """An agent's or operator's action on ``current`` (fetched with ``lock=True`` in this
    transaction); ``TransitionRefused`` from ``decide`` writes nothing. None when the
    step changed under it."""
    decision = decide(snapshot(current, traits), outcome_for(current), now, policy, rng)
    values = decision_values(decision)
    if values_for is not None:
        values.update(values_for(current, decision))
    row = cas_update(conn, current, values, now)
    if row is None:
        return None
    append_event(
        conn,
        step_id=row.id,
        operation_ref=row.operation_ref,
        at=now,
        kind=kind,
        from_state=current.state,
        to_state=row.state,
        label=decision.label,
        detail={**detail, **decision_detail(decision)},
    )
    return row, decision
