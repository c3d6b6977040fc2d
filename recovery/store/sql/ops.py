"""The store's statements, each working inside a transaction the caller owns.

Every state change is a compare-and-set on (id, state, version) that appends its event
row in the same transaction; zero rows updated is an answer the caller turns into
``None`` or a refusal.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import (
    Connection,
    Insert,
    Row,
    Select,
    bindparam,
    case,
    func,
    literal_column,
    select,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite

from toolsafe.recovery.guards import EXECUTION
from toolsafe.recovery.outcomes import Decision
from toolsafe.recovery.records import ClaimKind, EventRecord, Refused, StepRecord, step_record
from toolsafe.recovery.rows import (
    claim_refused,
    execution_refusal,
    json_ready,
    updated_record,
    verification_refusal,
)
from toolsafe.recovery.schema import step_events, steps
from toolsafe.recovery.states import LABELS, StepState
from toolsafe.recovery.store import plan
from toolsafe.recovery.store.shared import CLAIM_LABEL_VERIFY, Change, submitted_change
from toolsafe.recovery.store.sql.compiled import compiled_for
from toolsafe.recovery.store.sql.statements import (
    append_event,
    cas_update,
    event_parameters,
    fetch,
    with_event,
)

S = StepState
Decided = tuple[Row[Any], Decision]


# ------------------------------------------------------------------ create


def _insert_statement(dialect_name: str) -> Select[Any] | Insert:
    dialect = postgresql if dialect_name == "postgresql" else sqlite
    columns = (
        "operation_ref",
        "tool",
        "input",
        "input_hash",
        "state",
        "commit_state",
        "attempts",
        "max_attempts",
        "verification_attempts",
        "lookups_unavailable",
        "due_at",
        "flagged_fields",
        "fingerprint_repeats",
        "published_at",
        "version",
        "created_at",
        "updated_at",
    )
    # ON CONFLICT DO NOTHING: two submissions of one operation_ref racing both succeed,
    # one of them as "already there" (R2), instead of one failing on the unique index.
    # The new row's id is all the caller does not know: it builds the record from the
    # values it inserted (``_inserted_record``), as it does after a record's CAS.
    statement: Insert = (
        dialect.insert(steps)
        .values({column: bindparam(column, type_=steps.c[column].type) for column in columns})
        .on_conflict_do_nothing(index_elements=[steps.c.operation_ref])
        .returning(steps.c.id, steps.c.operation_ref, steps.c.state)
    )
    if dialect_name != "postgresql":
        return statement
    return with_event(statement, event_id=True)


_INSERT: dict[str, Select[Any] | Insert] = {}


def inserts_in_one_statement(dialect_name: str) -> bool:
    """Whether ``insert_step`` writes the step and its event in ONE statement (so the
    statement may run as its own transaction: ``StepSubmits.submit``)."""
    return dialect_name == "postgresql"


def insert_step(
    conn: Connection,
    *,
    tool: str,
    input: Mapping[str, Any],
    input_hash: str,
    operation_ref: str,
    max_attempts: int,
    now: datetime,
    published_at: datetime | None = None,
    actor: str | None = None,
) -> tuple[StepRecord, EventRecord | None]:
    """Insert the pending step unless its operation_ref exists; (the step, its
    ``submitted`` event, or None when the step already existed: then the stored step).

    ``published_at`` stamps the hint the caller is about to publish, saving a second
    transaction; if that publish never happens, the sweeper republishes once
    ``republish_after`` has passed since the stamp.
    """
    name = conn.dialect.name
    statement = _INSERT.get(name)
    if statement is None:
        statement = _INSERT[name] = _insert_statement(name)
    change = submitted_change(tool, input_hash, max_attempts, actor)
    parameters: dict[str, Any] = {
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
        "published_at": published_at,
        "version": 1,
        "created_at": now,
        "updated_at": now,
    }
    one_statement = inserts_in_one_statement(name)
    if one_statement:
        parameters.update(event_parameters(change, None, now))
        row = compiled_for(statement, conn.dialect).first(conn, parameters)
    else:
        row = conn.execute(statement, parameters).first()
    if row is None:
        existing = fetch(conn, operation_ref)
        if existing is None:  # pragma: no cover - the conflicting row cannot vanish
            raise RuntimeError(f"operation_ref {operation_ref!r} conflicted but is not there")
        return step_record(existing), None
    if one_statement:
        event_id = int(row.event_id)
    else:
        event_id = append_event(
            conn,
            step_id=row.id,
            operation_ref=operation_ref,
            at=now,
            kind=change.kind,
            from_state=None,
            to_state=S.PENDING.value,
            label=change.label,
            detail=change.detail,
        )
    event = EventRecord(
        id=event_id,
        operation_ref=operation_ref,
        at=now.astimezone(UTC),  # as the database gives it back
        kind=change.kind,
        from_state=None,
        to_state=S.PENDING,
        label=change.label,
        detail=json_ready(change.detail),
    )
    return _inserted_record(row.id, parameters), event


def _inserted_record(step_id: int, inserted: Mapping[str, Any]) -> StepRecord:
    """The new step as reading its row back would give it: the inserted values (times
    in UTC, JSON as plain values: a copy through JSON, as the column gives it back), the
    columns the insert leaves NULL as None, and its id."""

    def utc(name: str) -> datetime | None:
        value = inserted[name]
        return None if value is None else value.astimezone(UTC)

    created_at, updated_at = utc("created_at"), utc("updated_at")
    if created_at is None or updated_at is None:  # pragma: no cover - insert_step sets both
        raise ValueError("a new step needs created_at and updated_at")
    return StepRecord(
        id=step_id,
        operation_ref=inserted["operation_ref"],
        tool=inserted["tool"],
        input=json.loads(json.dumps(inserted["input"])),
        input_hash=inserted["input_hash"],
        state=StepState(inserted["state"]),
        commit_state=inserted["commit_state"],
        attempts=inserted["attempts"],
        max_attempts=inserted["max_attempts"],
        verification_attempts=inserted["verification_attempts"],
        lookups_unavailable=inserted["lookups_unavailable"],
        due_at=utc("due_at"),
        lease_owner=None,
        lease_expires_at=None,
        last_sent_at=None,
        last_envelope=None,
        fingerprint=None,
        fingerprint_repeats=inserted["fingerprint_repeats"],
        flagged_fields=tuple(inserted["flagged_fields"]),
        approval_input_hash=None,
        reason=None,
        published_at=utc("published_at"),
        version=inserted["version"],
        created_at=created_at,
        updated_at=updated_at,
    )


# ------------------------------------------------------------------ claims


def _claim_values(row: Row[Any], owner: str, lease: timedelta, now: datetime) -> dict[str, Any]:
    return {
        "state": S.IN_FLIGHT.value,
        "lease_owner": owner,
        "lease_expires_at": now + lease,
        "attempts": row.attempts + 1,  # the version guard makes this exact
        "last_sent_at": now,
    }


def _claim_change(owner: str, attempt: int | None, lease_expires_at: datetime) -> Change:
    detail: dict[str, Any] = {"claim": "execute", "owner": owner}
    if attempt is not None:
        detail["attempt"] = attempt
    # As the row gives it back: UTC (``schema.UTCDateTime``).
    detail["lease_expires_at"] = lease_expires_at.astimezone(UTC)
    return Change("claimed", "", detail)


def _claim_event_columns(moved: Any) -> tuple[Any, Any, Any]:
    """The claim's event from the claimed row: the prior state names the lifecycle edge,
    and the attempt is the row's new count."""
    label = case(
        (moved.c.prior_state == S.PENDING.value, LABELS[(S.PENDING, S.IN_FLIGHT)]),
        else_=LABELS[(S.WAITING_RETRY, S.IN_FLIGHT)],
    )
    detail = bindparam("ev_detail", type_=step_events.c.detail.type).op("||")(
        func.jsonb_build_object(literal_column("'attempt'"), moved.c.attempts)
    )
    return moved.c.prior_state, label, detail


def _claim_fast_statement() -> Select[Any]:
    prior_steps = steps.alias("prior_steps")
    prior = (
        select(prior_steps.c.id, prior_steps.c.state.label("prior_state"))
        .where(prior_steps.c.operation_ref == bindparam("ref"))
        # Locked, so the prior state read here is the row's newest version: a claim that
        # waited on another transaction must not label its event with a stale state.
        .with_for_update()
        .cte("prior")
    )
    now = bindparam("now", type_=steps.c.updated_at.type)
    claim = (
        update(steps)
        # By primary key: the row's id comes from the one-row ``prior`` CTE as a scalar,
        # evaluated once. A join (``UPDATE … FROM prior``) let a generic plan scan every
        # due step and look ``prior`` up once per step: a claim cost as many index scans
        # as there were steps waiting.
        .where(
            steps.c.id == select(prior.c.id).scalar_subquery(),
            # The guard that ``execution_refusal`` evaluates in Python, compiled (R3).
            *EXECUTION.where(steps, now),
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
        .returning(*steps.c, select(prior.c.prior_state).scalar_subquery().label("prior_state"))
    )
    return with_event(claim, _claim_event_columns)


_CLAIM_FAST = _claim_fast_statement()


def _claim_fast(
    conn: Connection, operation_ref: str, owner: str, lease: timedelta, now: datetime
) -> Row[Any] | None:
    """PostgreSQL: one statement that claims the row, returns it with its prior state,
    and appends the ``claimed`` event (R10).

    The guard is evaluated again on the newest row version if another transaction got
    there first, so of many concurrent claims exactly one matches.
    """
    lease_expires_at = now + lease
    parameters = {
        "ref": operation_ref,
        "owner": owner,
        "lease_expires_at": lease_expires_at,
        "now": now,
        **event_parameters(_claim_change(owner, None, lease_expires_at), None, now),
    }
    return compiled_for(_CLAIM_FAST, conn.dialect).first(conn, parameters)


def claim_execution(
    conn: Connection, operation_ref: str, owner: str, lease: timedelta, now: datetime
) -> Row[Any] | Refused:
    """pending / due waiting_retry → in_flight under a lease, attempt + 1 (R3); or why
    not, with a ``noop`` event."""
    if conn.dialect.name == "postgresql":
        claimed = _claim_fast(conn, operation_ref, owner, lease, now)
        if claimed is not None:
            return claimed
    else:
        current = fetch(conn, operation_ref)
        if execution_refusal(current, now) is None and current is not None:
            values = _claim_values(current, owner, lease, now)
            change = _claim_change(owner, values["attempts"], values["lease_expires_at"])
            label = LABELS[(S(current.state), S.IN_FLIGHT)]
            row = cas_update(conn, current, values, now, change=change._replace(label=label))
            if row is not None:
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
    return _noop(conn, operation_ref, current, now, "execute")


def claim_verification(
    conn: Connection, operation_ref: str, owner: str, lease: timedelta, now: datetime
) -> Row[Any] | Refused:
    """A due ``verifying`` step with no live lease gets one; the state stays verifying.
    Or why not, with a ``noop`` event."""
    current = fetch(conn, operation_ref)
    refusal = verification_refusal(current, now)
    if refusal is None and current is not None:
        lease_expires_at = now + lease
        change = Change(
            "claimed",
            CLAIM_LABEL_VERIFY,
            {
                "claim": "verify",
                "owner": owner,
                "lease_expires_at": lease_expires_at.astimezone(UTC),
            },
        )
        row = cas_update(
            conn,
            current,
            {"lease_owner": owner, "lease_expires_at": lease_expires_at},
            now,
            change=change,
        )
        if row is not None:
            return row
        current = fetch(conn, operation_ref)
    if (
        current is not None
        and current.state == S.VERIFYING.value
        and current.lease_owner == owner
        and current.lease_expires_at == now + lease
    ):
        return current  # the retried claim had committed: it is ours
    return _noop(conn, operation_ref, current, now, "verify")


def _noop(
    conn: Connection,
    operation_ref: str,
    current: Row[Any] | None,
    now: datetime,
    claim: ClaimKind,
) -> Refused:
    """Record a claim that did not happen and why (duplicate writes prevented); the why
    is the answer, with the due time of an early hint."""
    refused = claim_refused(claim, current, now)
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
        detail={"claim": claim, "reason": refused.reason},
    )
    return refused


# ------------------------------------------------------------------ outcomes


def record(
    conn: Connection,
    *,
    claimed: StepRecord,
    owner: str,
    planned: plan.Plan,
    now: datetime,
) -> tuple[StepRecord, Decision] | None:
    """Write the planned outcome (``plan.recorded``), if the claim still holds; the step
    as written (built from the claimed row and the values set: the statement returns only
    what proves it matched).

    No SELECT first: the row as claimed is the row as it is, or the compare-and-set on
    its version (and lease owner) matches nothing and the lease was lost (R4, R5).
    """
    values, decision = planned.values, planned.decision
    row = cas_update(
        conn, claimed, values, now, lease_owner=owner, change=planned.change, slim=True
    )
    if row is None:
        return None
    # ``published_at`` is bookkeeping written without a version: the row's, not the claim's.
    written = {**values, "published_at": row.published_at}
    return updated_record(claimed, written, now), decision
