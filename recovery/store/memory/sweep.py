"""The in-memory store's side of the sweeper and the heartbeat: lease renewal and
expiry (R4), due work (R7), parked delays released, publish stamps; the same guards as
``sql/sweep.py`` and ``sql/leases.py`` in SQL (``MemoryStore`` mixes it in)."""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import replace
from datetime import datetime, timedelta

from toolsafe.recovery.policy import Policy, ToolTraits
from toolsafe.recovery.records import Recorded, StepRecord
from toolsafe.recovery.states import DUE_LATER, LEASED, WORK_STATES, StepState
from toolsafe.recovery.store import plan
from toolsafe.recovery.store.errors import StepNotFound
from toolsafe.recovery.store.memory.tables import Tables, utc
from toolsafe.recovery.store.shared import Jitter


class MemorySweeper:
    """The sweeper's and the heartbeat's methods over the in-memory tables."""

    _tables: Tables
    _rng: Jitter

    def renew_lease(
        self, held: StepRecord, owner: str, lease: timedelta, now: datetime
    ) -> StepRecord | None:
        """A running call's heartbeat (as in SQL: a compare-and-set on state, version and
        owner that moves the version on and writes no event)."""
        with self._tables.transaction():
            return self._tables.cas(held, {"lease_expires_at": now + lease}, now, lease_owner=owner)

    def expire_lease_of_dead_owner(
        self,
        operation_ref: str,
        owner: str,
        now: datetime,
        traits_for: Callable[[str], ToolTraits],
        policy_for: Callable[[str], Policy],
    ) -> Recorded | None:
        """The expired lease's transition (R4) for an owner the caller proved dead."""
        with self._tables.transaction():
            current = self._tables.steps.get(operation_ref)
            if current is None or current.lease_owner != owner or current.state not in LEASED:
                return None
            return self._expire_one(
                current, now, traits_for(current.tool), policy_for(current.tool), self._rng,
                owner_gone=True,
            )  # fmt: skip

    def leases_held_by(self, prefix: str) -> list[StepRecord]:
        """Leased steps whose owner name starts with ``prefix`` (``host:pid:``)."""
        with self._tables.transaction():
            return sorted(
                (
                    step
                    for step in self._tables.steps.values()
                    if step.state in LEASED
                    and step.lease_owner is not None
                    and step.lease_owner.startswith(prefix)
                ),
                key=lambda step: step.id,
            )

    def _expire_one(
        self,
        current: StepRecord,
        now: datetime,
        traits: ToolTraits,
        policy: Policy,
        rng: Jitter,
        *,
        owner_gone: bool = False,
    ) -> Recorded | None:
        """The one guarded transition of a lost lease (R4), planned by ``plan.lease_expired``:
        a compare-and-set on state, version and the lease owner."""
        planned = plan.lease_expired(
            current, traits=traits, policy=policy, now=now, rng=rng, owner_gone=owner_gone
        )
        moved = self._tables.cas(
            current,
            planned.values,
            now,
            lease_owner=current.lease_owner,
            change=planned.change,
        )
        return None if moved is None else Recorded(moved, planned.decision)

    def expire_leases(
        self,
        now: datetime,
        traits_for: Callable[[str], ToolTraits],
        policy_for: Callable[[str], Policy],
        limit: int = 100,
        rng: Jitter | None = None,
    ) -> list[Recorded]:
        jitter = rng or self._rng
        decided: list[Recorded] = []
        with self._tables.transaction():
            expired = sorted(
                (
                    step
                    for step in self._tables.steps.values()
                    if step.state in LEASED
                    and step.lease_expires_at is not None
                    and step.lease_expires_at <= now
                ),
                key=lambda step: (step.lease_expires_at, step.id),
            )
            for current in expired[: max(limit, 0)]:
                recorded = self._expire_one(
                    current, now, traits_for(current.tool), policy_for(current.tool), jitter
                )
                if recorded is not None:
                    decided.append(recorded)
        return decided

    def due_work(self, now: datetime, limit: int, republish_after: timedelta) -> list[StepRecord]:
        if republish_after <= timedelta(0):
            raise ValueError("republish_after must be positive, or every sweep republishes")
        cutoff = now - republish_after
        stamp = utc(now)
        return self._hand_out(
            lambda step: (
                step.state in WORK_STATES
                and step.due_at is not None
                and step.due_at <= now
                and (step.lease_expires_at is None or step.lease_expires_at <= now)
                and (step.published_at is None or step.published_at <= cutoff)
            ),
            lambda _step: stamp,
            limit,
        )

    def lost_hints(
        self,
        now: datetime,
        since: datetime | None,
        until: datetime,
        eta_until: datetime,
        limit: int,
    ) -> list[StepRecord]:
        if until > now or eta_until < until or (since is not None and since > until):
            raise ValueError("a loss window runs since <= until <= now, eta_until >= until")

        def lost(step: StepRecord) -> bool:
            sent = step.published_at
            if step.state not in WORK_STATES or sent is None:
                return False
            if step.lease_expires_at is not None and step.lease_expires_at > now:
                return False
            if since is not None and sent < since:
                return False
            eta_hint = step.state in DUE_LATER and sent == step.due_at and sent < eta_until
            return sent < until or eta_hint

        stamp = utc(now)
        return self._hand_out(
            lost,
            lambda step: stamp if step.due_at is not None and step.due_at <= now else None,
            limit,
        )

    def release_parked(self, now: datetime, horizon: datetime, limit: int) -> list[StepRecord]:
        if horizon < now:
            raise ValueError("horizon must not be before now")
        return self._hand_out(
            lambda step: (
                step.state in DUE_LATER
                and step.due_at is not None
                and step.due_at <= horizon
                and (step.lease_expires_at is None or step.lease_expires_at <= now)
                and (step.published_at is None or step.published_at < step.due_at)
            ),
            lambda step: step.due_at,
            limit,
        )

    def _hand_out(
        self,
        chosen: Callable[[StepRecord], bool],
        stamp: Callable[[StepRecord], datetime | None],
        limit: int,
    ) -> list[StepRecord]:
        """The steps ``chosen`` holds, oldest due first, each stamped ``published_at``
        (bookkeeping: no version, no event), as ``sweep.hand_out`` in SQL."""
        with self._tables.transaction():
            due = sorted(
                (step for step in self._tables.steps.values() if chosen(step)),
                key=lambda step: (step.due_at, step.id),
            )
            marked = [replace(step, published_at=stamp(step)) for step in due[: max(limit, 0)]]
            for step in marked:
                self._tables.put(step)
        return marked

    def mark_published(self, operation_ref: str, now: datetime) -> None:
        with self._tables.transaction():
            step = self._tables.steps.get(operation_ref)
            if step is None:
                raise StepNotFound(operation_ref)
            self._tables.put(replace(step, published_at=utc(now)))

    def take_hints(
        self, now: datetime, limit: int, operation_refs: Collection[str] | None = None
    ) -> list[tuple[str, str]]:
        wanted = None if operation_refs is None else set(operation_refs)
        marked = self._hand_out(
            lambda step: (
                step.state is StepState.PENDING
                and step.published_at is None
                and (step.lease_expires_at is None or step.lease_expires_at <= now)
                and (wanted is None or step.operation_ref in wanted)
            ),
            lambda _step: utc(now),
            limit,
        )
        return [(step.operation_ref, step.tool) for step in marked]

    def hints_not_sent(self, operation_refs: Collection[str], stamp: datetime) -> None:
        sent = utc(stamp)
        with self._tables.transaction():
            for operation_ref in operation_refs:
                step = self._tables.steps.get(operation_ref)
                if (
                    step is not None
                    and step.state is StepState.PENDING
                    and step.published_at == sent
                ):
                    self._tables.put(replace(step, published_at=None))
