"""The store port in memory: the same guarded compare-and-set transitions, versions,
leases, due times and event log as the SQL store, behind one lock, with no I/O.

For unit tests of the pipeline and the client, and for anything that needs a store that
lives only as long as its process. The contract tests
(``tests/services/recovery/test_store_contract.py``) run the same functions against this store,
SQLite and PostgreSQL.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from toolsafe.recovery.outcomes import (
    Executed,
    LookedUp,
    Outcome,
)
from toolsafe.recovery.policy import Policy, ToolTraits
from toolsafe.recovery.records import (
    Claim,
    ClaimKind,
    CountSources,
    EventRecord,
    EventSummary,
    NewStep,
    Recorded,
    Refused,
    StepRecord,
    StepSummary,
    Submitted,
)
from toolsafe.recovery.rows import (
    execution_refusal,
    verification_refusal,
)
from toolsafe.recovery.states import LABELS, StepState
from toolsafe.recovery.store import plan
from toolsafe.recovery.store.actions import StepActions
from toolsafe.recovery.store.errors import OperationRefConflict, StepNotFound
from toolsafe.recovery.store.memory.feed import MemoryFeed
from toolsafe.recovery.store.memory.outbox import MemoryOutbox
from toolsafe.recovery.store.memory.sweep import MemorySweeper
from toolsafe.recovery.store.memory.tables import Tables, counted_detail, document, utc
from toolsafe.recovery.store.shared import (
    CLAIM_LABEL_VERIFY,
    Change,
    ClaimShortcuts,
    Jitter,
    submitted_change,
    with_envelopes,
)
from toolsafe.recovery.store.submission import (
    check_repeat,
    checked_batch,
    checked_submission,
    in_batch,
)

if TYPE_CHECKING:
    from toolsafe.recovery.store.plan import Step

__all__ = ["MemoryStore"]

S = StepState


class MemoryStore(MemorySweeper, StepActions, ClaimShortcuts):
    """Steps and events in dicts and lists; every method one "transaction" under a lock.

    A method that raises leaves nothing behind (its writes are undone), as a rolled-back
    transaction would; ids, like PostgreSQL's sequences, are not given back. The
    sweeper's and the heartbeat's methods are in ``memory_sweep``.
    """

    def __init__(self, *, rng: Jitter | None = None) -> None:
        self._rng = rng or random.Random()
        self._tables = Tables()
        self.outbox = MemoryOutbox(self._tables)
        self.feed = MemoryFeed()
        self._tables.on_event = self.feed.changed

    # -------------------------------------------------------------- transactions

    # -------------------------------------------------------------- submit and read

    def submit(
        self,
        tool: str,
        input: Mapping[str, Any],
        *,
        operation_ref: str | None,
        policy: Policy,
        now: datetime,
        published_at: datetime | None = None,
        digest: str | None = None,
        equivalent_hashes: Collection[str] = (),
        same_input: Callable[[dict[str, Any]], bool] | None = None,
        actor: str | None = None,
    ) -> Submitted:
        """A ``pending`` step due now and its ``submitted`` event; the same operation_ref
        returns the stored step (no event), or raises ``OperationRefConflict``. The input
        is stored as given; ``digest``, ``equivalent_hashes`` and ``same_input`` decide a
        repeat as in :meth:`StepStore.submit`."""
        ref, digest = checked_submission(tool, input, operation_ref, digest)
        max_attempts = policy.retry.max_attempts
        with self._tables.transaction():
            existing = self._tables.steps.get(ref)
            if existing is None:
                created = self._insert(
                    tool, input, ref, digest, max_attempts, now, published_at, actor
                )
        if existing is None:
            return created
        check_repeat(ref, existing, tool, digest, equivalent_hashes, same_input)
        return Submitted(existing, None)

    def submit_many(
        self,
        calls: Sequence[NewStep],
        *,
        now: datetime,
        published_at: datetime | None = None,
        actor: str | None = None,
    ) -> list[Submitted]:
        """``submit`` for many calls in one transaction, as :meth:`StepStore.submit_many`:
        a refused call raises, naming it, and nothing of the batch is kept."""
        checked = checked_batch(calls)
        submitted: list[Submitted] = []
        with self._tables.transaction():
            for index, (call, (ref, digest)) in enumerate(zip(calls, checked, strict=True)):
                existing = self._tables.steps.get(ref)
                if existing is None:
                    submitted.append(
                        self._insert(
                            call.tool,
                            call.input,
                            ref,
                            digest,
                            call.policy.retry.max_attempts,
                            now,
                            published_at,
                            actor,
                        )
                    )
                    continue
                try:
                    check_repeat(
                        ref, existing, call.tool, digest, call.equivalent_hashes, call.same_input
                    )
                except OperationRefConflict as error:
                    in_batch(error, index)
                    raise
                submitted.append(Submitted(existing, None))
        return submitted

    def _insert(
        self,
        tool: str,
        input: Mapping[str, Any],
        ref: str,
        digest: str,
        max_attempts: int,
        now: datetime,
        published_at: datetime | None,
        actor: str | None = None,
    ) -> Submitted:
        at = utc(now)
        step = StepRecord(
            id=self._tables.next_step_id(),
            operation_ref=ref,
            tool=tool,
            input=document(dict(input)),
            input_hash=digest,
            state=S.PENDING,
            commit_state=None,
            attempts=0,
            max_attempts=max_attempts,
            verification_attempts=0,
            lookups_unavailable=0,
            due_at=at,
            lease_owner=None,
            lease_expires_at=None,
            last_sent_at=None,
            last_envelope=None,
            fingerprint=None,
            fingerprint_repeats=0,
            flagged_fields=(),
            approval_input_hash=None,
            reason=None,
            published_at=None if published_at is None else utc(published_at),
            version=1,
            created_at=at,
            updated_at=at,
        )
        self._tables.put(step)
        change = submitted_change(tool, digest, max_attempts, actor)
        event = self._tables.append(
            operation_ref=ref,
            at=now,
            kind=change.kind,
            from_state=None,
            to_state=S.PENDING,
            label=change.label,
            detail=change.detail,
        )
        return Submitted(step, event)

    def get(self, operation_ref: str) -> StepRecord:
        with self._tables.lock:
            step = self._tables.steps.get(operation_ref)
        if step is None:
            raise StepNotFound(operation_ref)
        return step

    def events(self, operation_ref: str) -> list[EventRecord]:
        with self._tables.lock:
            found = list(self._tables.events_by_ref.get(operation_ref, ()))
            step = self._tables.steps.get(operation_ref)
        latest = None if step is None else step.last_envelope
        return with_envelopes(found, copy.deepcopy(latest))

    def list_steps(
        self,
        states: Sequence[StepState] | None = None,
        limit: int = 100,
        *,
        tool: str | None = None,
        prefix: str | None = None,
    ) -> list[StepRecord]:
        if limit < 0:
            raise ValueError(f"limit must be 0 or more, not {limit}")
        wanted = None if states is None else {StepState(state) for state in states}
        with self._tables.lock:
            found = [
                step
                for step in self._tables.steps.values()
                if (wanted is None or step.state in wanted)
                and (tool is None or step.tool == tool)
                and step.operation_ref.startswith(prefix or "")
            ]
        found.sort(key=lambda step: step.id, reverse=True)
        return found[:limit]

    def step_summaries(self, prefix: str | None = None) -> list[StepSummary]:
        with self._tables.lock:
            return self._summaries(prefix)

    def count_sources(self, prefix: str | None = None) -> CountSources:
        with self._tables.lock:
            steps = self._summaries(prefix)
            events = [
                EventSummary(
                    id=event.id,
                    operation_ref=event.operation_ref,
                    at=event.at,
                    kind=event.kind,
                    from_state=event.from_state,
                    to_state=event.to_state,
                    detail=counted_detail(event.detail),
                )
                for event in self._tables.events
                if not prefix or event.operation_ref.startswith(prefix)
            ]
        return CountSources(steps, events)

    def _summaries(self, prefix: str | None) -> list[StepSummary]:
        return [
            StepSummary(step.operation_ref, step.state, step.commit_state, step.reason)
            for ref, step in self._tables.steps.items()
            if not prefix or ref.startswith(prefix)
        ]

    # -------------------------------------------------------------- the worker's path

    def claim(
        self, kind: ClaimKind, operation_ref: str, owner: str, lease: timedelta, now: datetime
    ) -> Claim | Refused:
        claim_for = self._claim_execution if kind == "execute" else self._claim_verification
        return claim_for(operation_ref, owner, lease, now)

    def _claim_execution(
        self, operation_ref: str, owner: str, lease: timedelta, now: datetime
    ) -> Claim | Refused:
        with self._tables.transaction():
            current = self._tables.steps.get(operation_ref)
            if current is not None and execution_refusal(current, now) is None:
                lease_expires_at = utc(now + lease)
                attempt = current.attempts + 1
                change = Change(
                    "claimed",
                    LABELS[(current.state, S.IN_FLIGHT)],
                    {
                        "claim": "execute",
                        "owner": owner,
                        "attempt": attempt,
                        "lease_expires_at": lease_expires_at,
                    },
                )
                values = {
                    "state": S.IN_FLIGHT.value,
                    "lease_owner": owner,
                    "lease_expires_at": lease_expires_at,
                    "attempts": attempt,
                    "last_sent_at": now,
                }
                moved = self._tables.cas(current, values, now, change=change)
                if moved is not None:
                    return Claim("execute", owner, moved)
            current = self._tables.steps.get(operation_ref)
            if (
                current is not None
                and current.state is S.IN_FLIGHT
                and current.lease_owner == owner
                and current.last_sent_at == now
            ):
                return Claim("execute", owner, current)  # this very claim, asked again
            return self._tables.noop(operation_ref, current, now, "execute")

    def _claim_verification(
        self, operation_ref: str, owner: str, lease: timedelta, now: datetime
    ) -> Claim | Refused:
        with self._tables.transaction():
            current = self._tables.steps.get(operation_ref)
            refusal = verification_refusal(current, now)
            if refusal is None and current is not None:
                lease_expires_at = utc(now + lease)
                change = Change(
                    "claimed",
                    CLAIM_LABEL_VERIFY,
                    {"claim": "verify", "owner": owner, "lease_expires_at": lease_expires_at},
                )
                values = {"lease_owner": owner, "lease_expires_at": lease_expires_at}
                moved = self._tables.cas(current, values, now, change=change)
                if moved is not None:
                    return Claim("verify", owner, moved)
            if (
                current is not None
                and current.state is S.VERIFYING
                and current.lease_owner == owner
                and current.lease_expires_at == now + lease
            ):
                return Claim("verify", owner, current)  # this very claim, asked again
            return self._tables.noop(operation_ref, current, now, "verify")

    def record(
        self,
        claim: Claim,
        outcome: Executed | LookedUp,
        *,
        traits: ToolTraits,
        policy: Policy,
        now: datetime,
        rng: Jitter,
    ) -> Recorded | None:
        current = claim.step
        planned = plan.recorded(current, outcome, traits=traits, policy=policy, now=now, rng=rng)
        with self._tables.transaction():
            moved = self._tables.cas(
                current, planned.values, now, lease_owner=claim.owner, change=planned.change
            )
        return None if moved is None else Recorded(moved, planned.decision)

    # -------------------------------------------------------------- agents and operators

    def _act(
        self,
        operation_ref: str,
        outcome_for: Callable[[Step], Outcome],
        *,
        kind: str,
        detail: Mapping[str, Any],
        traits: ToolTraits,
        policy: Policy,
        now: datetime,
        extra: Mapping[str, Any] | None = None,
    ) -> Recorded:
        with self._tables.transaction():
            current = self._tables.steps.get(operation_ref)
            if current is None:
                raise StepNotFound(operation_ref)
            planned = plan.acted(
                current,
                outcome_for(current),
                kind=kind,
                detail=detail,
                traits=traits,
                policy=policy,
                now=now,
                rng=self._rng,
                extra=extra,
            )
            moved = self._tables.cas(current, planned.values, now, change=planned.change)
        if moved is None:  # pragma: no cover - the lock admits no change in between
            raise plan.changed_meanwhile(operation_ref, kind)
        return Recorded(moved, planned.decision)

    def _note(
        self, operation_ref: str, *, kind: str, label: str, detail: Mapping[str, Any], now: datetime
    ) -> StepState:
        with self._tables.transaction():
            current = self._tables.steps.get(operation_ref)
            if current is None:
                raise StepNotFound(operation_ref)
            self._tables.append(
                operation_ref=operation_ref,
                at=now,
                kind=kind,
                from_state=current.state,
                to_state=current.state,
                label=label,
                detail=detail,
            )
            return current.state
