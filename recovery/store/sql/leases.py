"""The lease statements besides the claim: a running call's heartbeat renewal, the
expiry of a lease whose owner is proven dead (R4 at once), and the leases of one process."""

from __future__ import annotations

import random
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, Row, bindparam, select, text

from toolsafe.recovery.policy import Policy, ToolTraits
from toolsafe.recovery.records import StepRecord
from toolsafe.recovery.schema import LEASED_STATE_PREDICATE, steps
from toolsafe.recovery.states import LEASED, StepState
from toolsafe.recovery.store.sql.ops import Decided
from toolsafe.recovery.store.sql.statements import cas_update, fetch
from toolsafe.recovery.store.sql.sweep import expire_one

_HELD_BY = (
    select(steps)
    .where(text(LEASED_STATE_PREDICATE), steps.c.lease_owner.startswith(bindparam("prefix")))
    .order_by(steps.c.id)
)


def renew(
    conn: Connection, held: StepRecord, owner: str, lease: timedelta, now: datetime
) -> Row[Any] | None:
    """Push the lease's expiry to ``now + lease`` if ``owner`` still holds the step as
    ``held`` (state, version, owner): a compare-and-set like every change, so a lease
    taken over (expired, recorded, re-claimed) is never renewed. The version moves on:
    every guard that read the row before the renewal loses. No event row: a heartbeat
    changes no state (R10 logs state changes), only how long the claim holds."""
    return cas_update(conn, held, {"lease_expires_at": now + lease}, now, lease_owner=owner)


def expire_dead_owner(
    conn: Connection,
    operation_ref: str,
    owner: str,
    *,
    now: datetime,
    traits_for: Callable[[str], ToolTraits],
    policy_for: Callable[[str], Policy],
    rng: random.Random,
) -> Decided | None:
    """The step ``owner`` leases goes through the same transition as an expired lease
    (R4: in_flight → verifying, never back to execution), before its expiry, because
    the caller proved the owner dead. None when ``owner`` no longer holds it."""
    current = fetch(conn, operation_ref, lock=True)
    if current is None or current.lease_owner != owner:
        return None
    if StepState(current.state) not in LEASED:
        return None
    return expire_one(
        conn,
        current,
        now=now,
        traits=traits_for(current.tool),
        policy=policy_for(current.tool),
        rng=rng,
        owner_gone=True,
    )


def held_by(conn: Connection, prefix: str) -> list[Row[Any]]:
    """The leased steps whose owner starts with ``prefix`` (one process: ``host:pid:``)."""
    rows = conn.execute(_HELD_BY, {"prefix": prefix}).all()
    # LIKE reads "_" and "%" in a hostname as wildcards: the exact test is here.
    return [row for row in rows if str(row.lease_owner).startswith(prefix)]
