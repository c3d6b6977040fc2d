"""The sweeper's statements (R4, R7): expired leases through ``decide``, due work handed
out once however many sweepers run at the same time, and parked delays released a
lookahead before they fall due."""

from __future__ import annotations

import random
from collections.abc import Callable, Collection, Sequence
from datetime import datetime
from typing import Any, Final

from sqlalchemy import (
    Connection,
    Integer,
    Row,
    and_,
    any_,
    bindparam,
    case,
    literal,
    null,
    or_,
    select,
    text,
    update,
)
from sqlalchemy.dialects import postgresql

from toolsafe.recovery.policy import Policy, ToolTraits
from toolsafe.recovery.schema import (
    LEASED_STATE_PREDICATE,
    PARKED_STATE_PREDICATE,
    WORK_STATE_PREDICATE,
    steps,
)
from toolsafe.recovery.states import StepState as S
from toolsafe.recovery.store import plan
from toolsafe.recovery.store.sql.ops import Decided
from toolsafe.recovery.store.sql.statements import bookkeeping, cas_update


def expire_leases(
    conn: Connection,
    *,
    now: datetime,
    traits_for: Callable[[str], ToolTraits],
    policy_for: Callable[[str], Policy],
    limit: int,
    rng: random.Random,
) -> list[Decided]:
    """Expired leases through ``decide`` (R4): in_flight → verifying (or what the tool's
    traits allow), an abandoned verification due again."""
    query = (
        select(steps)
        .where(text(LEASED_STATE_PREDICATE), steps.c.lease_expires_at <= now)
        .order_by(steps.c.lease_expires_at, steps.c.id)
        .limit(limit)
    )
    if conn.dialect.name == "postgresql":
        query = query.with_for_update(skip_locked=True)
    decided: list[Decided] = []
    for current in conn.execute(query).all():
        moved = expire_one(
            conn,
            current,
            now=now,
            traits=traits_for(current.tool),
            policy=policy_for(current.tool),
            rng=rng,
        )
        if moved is not None:  # None: someone else moved it first, theirs
            decided.append(moved)
    return decided


def expire_one(
    conn: Connection,
    current: Row[Any],
    *,
    now: datetime,
    traits: ToolTraits,
    policy: Policy,
    rng: random.Random,
    owner_gone: bool = False,
) -> Decided | None:
    """The one guarded transition of a lost lease (R4), through ``decide``: a
    compare-and-set on state, version and the lease owner, so a lease renewed, recorded
    or taken over meanwhile is left alone. ``owner_gone`` marks an owner proven dead
    before its lease ran out (the event says so)."""
    planned = plan.lease_expired(
        current, traits=traits, policy=policy, now=now, rng=rng, owner_gone=owner_gone
    )
    row = cas_update(
        conn,
        current,
        planned.values,
        now,
        lease_owner=current.lease_owner,
        change=planned.change,
    )
    return None if row is None else (row, planned.decision)


def due_work(conn: Connection, *, now: datetime, limit: int, cutoff: datetime) -> list[Row[Any]]:
    """Due, unleased work not published since ``cutoff``, marked published at ``now``.

    One ``WITH due AS (SELECT … [FOR UPDATE SKIP LOCKED]) UPDATE … WHERE id IN due AND
    <the same guard>``:
    the outer guard is a compare-and-set on ``published_at``, so two sweepers never both
    return a step, with or without ``SKIP LOCKED`` (the SQLite fallback).
    """
    guard = and_(
        text(WORK_STATE_PREDICATE),
        steps.c.due_at <= now,
        or_(steps.c.lease_expires_at.is_(None), steps.c.lease_expires_at <= now),
        or_(steps.c.published_at.is_(None), steps.c.published_at <= cutoff),
    )
    return hand_out(conn, guard, limit=limit, published_at=now, name="due_candidates")


def hand_out(
    conn: Connection,
    guard: Any,
    *,
    limit: int,
    published_at: Any,
    name: str,
    returning: Sequence[Any] = (),
) -> list[Row[Any]]:
    """The steps ``guard`` holds, oldest due first, stamped ``published_at``: locked
    candidates (``SKIP LOCKED`` on PostgreSQL), then a compare-and-set on the same guard,
    so two callers never both return a step (``due_work``, ``release_parked``). Each
    row has every column, or only ``returning`` (with ``due_at`` and ``id``)."""
    statement = hand_out_statement(
        guard,
        limit=limit,
        published_at=published_at,
        name=name,
        returning=returning,
        postgres=conn.dialect.name == "postgresql",
    )
    return oldest_due_first(conn.execute(statement).all())


def hand_out_statement(
    guard: Any,
    *,
    limit: Any,
    published_at: Any,
    name: str,
    returning: Sequence[Any] = (),
    postgres: bool,
) -> Any:
    """``hand_out``'s statement (``limit`` and the guard's values may be bound
    parameters, so that it can be built once)."""
    # Oldest due first; the id breaks ties, so equal due times hand out the same steps
    # in the same order on every database and every run.
    candidates = select(steps.c.id).where(guard).order_by(steps.c.due_at, steps.c.id).limit(limit)
    if postgres:
        # Locked rows are skipped (another sweeper or relay has them): no waits, so no
        # deadlock between callers taking overlapping sets in different orders.
        candidates = candidates.with_for_update(skip_locked=True)
    chosen = candidates.cte(name)
    if postgres:
        # Evaluated once: as a plain IN (subquery) PostgreSQL may rescan it per row,
        # and rows this statement already updated then drop out of the locked LIMIT.
        chosen = chosen.prefix_with("MATERIALIZED")
    return (
        update(steps)
        .where(steps.c.id.in_(select(chosen.c.id)), guard, *bookkeeping(postgres))
        .values(published_at=published_at)
        .returning(*(returning or steps.c), *((steps.c.due_at, steps.c.id) if returning else ()))
    )


def oldest_due_first(rows: Sequence[Row[Any]]) -> list[Row[Any]]:
    """Handed-out rows in due order (RETURNING follows none)."""
    return sorted(rows, key=lambda row: (row.due_at, row.id))


def parked_guard(now: datetime, horizon: datetime) -> Any:
    """A waiting step due by ``horizon``, unleased, with no hint out for its due time."""
    return and_(
        text(PARKED_STATE_PREDICATE),
        steps.c.due_at <= horizon,
        or_(steps.c.lease_expires_at.is_(None), steps.c.lease_expires_at <= now),
        or_(steps.c.published_at.is_(None), steps.c.published_at < steps.c.due_at),
    )


def any_parked(conn: Connection, *, now: datetime, horizon: datetime) -> bool:
    """Whether ``release_parked`` would find anything (a read: SQLite's timer takes the
    database's write lock only when there is something to release)."""
    found = conn.execute(select(steps.c.id).where(parked_guard(now, horizon)).limit(1)).first()
    return found is not None


def release_parked(
    conn: Connection, *, now: datetime, horizon: datetime, limit: int
) -> list[Row[Any]]:
    """Waiting steps (``waiting_retry``, ``verifying``) due by ``horizon`` whose hint for
    that due time is not out yet, marked published at their ``due_at``.

    A step's ``published_at`` is the time its latest hint arrives (``carry_out`` stamps
    an ETA hint with its due time), so ``published_at < due_at`` says no hint for this
    due time has gone out: the delay is parked here, not in the broker. Stamping
    ``due_at`` makes ``due_work``'s rule (re-publish ``republish_after`` past the
    stamp) cover a released hint that gets lost. Two releasers never both return a step
    (``hand_out``).
    """
    return hand_out(
        conn,
        parked_guard(now, horizon),
        limit=limit,
        published_at=steps.c.due_at,
        name="parked_candidates",
    )


def lost_guard(now: datetime, since: datetime | None, until: datetime, eta_until: datetime) -> Any:
    """Unleased work whose latest hint went out inside a broker's loss window: sent in
    ``[since, until)`` (``since`` None: from the beginning), or an ETA hint (stamped with
    its due time) due before ``eta_until`` and so sent before ``until`` at the latest."""
    sent = steps.c.published_at
    eta_hint = and_(text(PARKED_STATE_PREDICATE), sent == steps.c.due_at, sent < eta_until)
    guard = and_(
        text(WORK_STATE_PREDICATE),
        or_(steps.c.lease_expires_at.is_(None), steps.c.lease_expires_at <= now),
        sent.is_not(None),
        or_(sent < until, eta_hint),
    )
    return guard if since is None else and_(guard, sent >= since)


def lost_hints(
    conn: Connection,
    *,
    now: datetime,
    since: datetime | None,
    until: datetime,
    eta_until: datetime,
    limit: int,
) -> list[Row[Any]]:
    """The steps whose hint a broker lost (``lost_guard``), handed out once: a step due
    now is stamped published at ``now`` (the caller sends it at once); one due later is
    un-parked (``published_at`` NULL), so the release timer sends it with its ETA."""
    stamp = case(
        (steps.c.due_at <= now, literal(now, steps.c.published_at.type)),
        else_=null(),
    )
    return hand_out(
        conn,
        lost_guard(now, since, until, eta_until),
        limit=limit,
        published_at=stamp,
        name="lost_candidates",
    )


def unsent_guard(now: Any, operation_refs: Collection[str] | None = None) -> Any:
    """A pending step, unleased, whose hint never went out (of ``operation_refs``, when
    given). Not compared with its ``due_at``: a pending step is due from the moment it
    is stored, and another process's estimate of the database's clock may lag it."""
    guard = and_(
        steps.c.state == S.PENDING.value,
        steps.c.published_at.is_(None),
        or_(steps.c.lease_expires_at.is_(None), steps.c.lease_expires_at <= now),
    )
    if operation_refs is None:
        return guard
    return and_(guard, steps.c.operation_ref.in_(sorted(operation_refs)))


def _unsent_of_refs(*, one: bool) -> Any:
    """PostgreSQL's ``take_hints`` for the steps heard of: ``hand_out``'s statement with
    the refs one parameter, so it is built and compiled once and runs as its own
    transaction. ``one``: a single ref, compared as a value rather than an array."""
    now = bindparam("now", type_=steps.c.published_at.type)
    if one:
        named = steps.c.operation_ref == bindparam("ref", type_=steps.c.operation_ref.type)
    else:
        refs = bindparam("refs", type_=postgresql.ARRAY(steps.c.operation_ref.type))
        named = steps.c.operation_ref == any_(refs)
    return hand_out_statement(
        and_(unsent_guard(now), named),
        limit=bindparam("limit", type_=Integer),
        published_at=now,
        name="heard_candidates",
        returning=(steps.c.operation_ref, steps.c.tool),
        postgres=True,
    )


# A prepared statement keeps a generic plan only when PostgreSQL estimates it no dearer
# than planning each call; with the refs as an array it assumes ten of them and never
# does, so the relay's usual round (one new step) has a statement of its own that keeps
# its plan.
UNSENT_OF_REF: Final = _unsent_of_refs(one=True)
UNSENT_OF_REFS: Final = _unsent_of_refs(one=False)


def take_heard_hints(
    conn: Connection, *, now: datetime, limit: int, operation_refs: Collection[str]
) -> list[tuple[str, str]]:
    """``take_hints`` of ``operation_refs`` on PostgreSQL: ``UNSENT_OF_REF`` for one,
    ``UNSENT_OF_REFS`` for several."""
    refs = sorted(operation_refs)
    if len(refs) == 1:
        parameters: dict[str, Any] = {"now": now, "limit": limit, "ref": refs[0]}
        statement = UNSENT_OF_REF
    else:
        parameters = {"now": now, "limit": limit, "refs": refs}
        statement = UNSENT_OF_REFS
    rows = oldest_due_first(conn.execute(statement, parameters).all())
    return [(row.operation_ref, row.tool) for row in rows]


def take_hints(
    conn: Connection, *, now: datetime, limit: int, operation_refs: Collection[str] | None
) -> list[tuple[str, str]]:
    """The hint relay's steps (``unsent_guard``), marked published at ``now``: each as
    (operation_ref, tool), oldest due first, to one caller however many relay at once."""
    rows = hand_out(
        conn,
        unsent_guard(now, operation_refs),
        limit=limit,
        published_at=now,
        name="unsent_candidates",
        returning=(steps.c.operation_ref, steps.c.tool),
    )
    return [(row.operation_ref, row.tool) for row in rows]


def hints_not_sent(conn: Connection, *, operation_refs: Collection[str], stamp: datetime) -> int:
    """The relay could not publish these: each pending step still stamped ``stamp`` is
    unsent again (``published_at`` NULL), for the relay's next round."""
    statement = (
        update(steps)
        .where(
            steps.c.operation_ref.in_(sorted(operation_refs)),
            steps.c.state == S.PENDING.value,
            steps.c.published_at == stamp,
            *bookkeeping(conn.dialect.name == "postgresql"),
        )
        .values(published_at=None)
    )
    return int(conn.execute(statement).rowcount)
