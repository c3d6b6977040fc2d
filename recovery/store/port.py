"""The store port: the operations the pipeline, client, sweeper, CLI, metrics and chaos
run use, as a Protocol that every backend (``sql/``, ``memory/``, any a package adds)
satisfies. It stands on the ground floor: it imports the shared definitions, never a
backend.

Every method is one transaction; every state change a guarded compare-and-set that
appends its event in the same transaction (R10); zero rows changed is an answer (``None``
or a refusal). ``docs/store.md`` describes each operation.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Protocol

from toolsafe.recovery.outcomes import Executed, LookedUp
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
from toolsafe.recovery.states import StepState
from toolsafe.recovery.store.feed import Feed
from toolsafe.recovery.store.shared import Jitter, OutboxNotice, Validator

__all__ = ["CountSources", "EventSummary", "OutboxPort", "StepSummary", "StorePort"]


class OutboxPort(Protocol):
    """The escalation notices owed to handlers (at least once), beside the steps."""

    def notices(self, operation_ref: str, *, open_only: bool = False) -> list[OutboxNotice]:
        """The step's notices, oldest first (only the unacknowledged ones if asked)."""
        ...

    def acknowledge(self, notice_id: int, now: datetime, outcome: str = "delivered") -> bool:
        """Close an open notice; False when it was closed already."""
        ...

    def due(self, now: datetime, limit: int, resend_after: timedelta) -> list[OutboxNotice]:
        """Open notices due for a re-send, counted as sent again at ``now``."""
        ...


class StorePort(Protocol):
    """The durable step store as its callers see it (R1-R10)."""

    @property
    def feed(self) -> Feed:
        """The change feed: wakes a waiter when its step changed (push completion)."""
        ...

    @property
    def outbox(self) -> OutboxPort:
        """The escalation outbox: a notice is written in the same transaction as every
        move into ``escalated``."""
        ...

    # ---------------------------------------------------------------- submit and read

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
        """Commit a ``pending`` step due now with its ``submitted`` event (R2); the same
        operation_ref again returns the stored step and no event; another tool or input
        under it raises ``OperationRefConflict``; a malformed ref ``InvalidOperationRef``.
        ``input`` is stored as given (the client's canonical form); ``digest`` (its hash
        unless given), ``equivalent_hashes`` and ``same_input`` decide whether a repeat is
        the same call; ``actor`` (who submitted) goes into the ``submitted`` event."""
        ...

    def submit_many(
        self,
        calls: Sequence[NewStep],
        *,
        now: datetime,
        published_at: datetime | None = None,
        actor: str | None = None,
    ) -> list[Submitted]:
        """``submit`` for each call, in order, in ONE transaction (a ``Submitted`` per
        call; a repeat within the batch is the step the earlier call made). A refused
        call raises what ``submit`` would, with a note naming it, and nothing of the
        batch is committed."""
        ...

    def get(self, operation_ref: str) -> StepRecord:
        """The step; ``StepNotFound`` when there is none."""
        ...

    def events(self, operation_ref: str) -> list[EventRecord]:
        """Every event about the operation_ref, oldest first (noops about a missing step
        included), each envelope as it was recorded: an event that names its step's
        envelope comes back with it (``shared.with_envelopes``)."""
        ...

    def list_steps(
        self,
        states: Sequence[StepState] | None = None,
        limit: int = 100,
        *,
        tool: str | None = None,
        prefix: str | None = None,
    ) -> list[StepRecord]:
        """The newest steps first, optionally only those in ``states``, of ``tool``, or
        whose operation_ref starts with ``prefix``."""
        ...

    def step_summaries(self, prefix: str | None = None) -> list[StepSummary]:
        """Every step (or those whose operation_ref starts with ``prefix``), in no order."""
        ...

    def count_sources(self, prefix: str | None = None) -> CountSources:
        """Steps and events (optionally by operation_ref prefix) in one read transaction."""
        ...

    # ---------------------------------------------------------------- the worker's path

    def claim(
        self, kind: ClaimKind, operation_ref: str, owner: str, lease: timedelta, now: datetime
    ) -> Claim | Refused:
        """``claim_execution`` or ``claim_verification`` (``kind``), answering why when it
        may not run now: the ``noop`` event's reason and, for a step refused only for
        not being due yet, its ``due_at`` (``Refused``), so that a worker can wait out
        an early hint's last milliseconds instead of dropping it (``tasks/early.py``)."""
        ...

    def claim_execution(
        self, operation_ref: str, owner: str, lease: timedelta, now: datetime
    ) -> Claim | None:
        """pending / due waiting_retry → in_flight under a lease, attempt + 1 (R3); None
        and a ``noop`` event naming why when it may not run now."""
        ...

    def claim_verification(
        self, operation_ref: str, owner: str, lease: timedelta, now: datetime
    ) -> Claim | None:
        """A due ``verifying`` step with no live lease gets one; None and a ``noop``."""
        ...

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
        """Decide on the outcome and write it while the claim holds; None when the lease
        was lost (R4, R5). ``TransitionRefused`` (a stale outcome) writes nothing."""
        ...

    # ---------------------------------------------------------------- the sweeper

    def expire_leases(
        self,
        now: datetime,
        traits_for: Callable[[str], ToolTraits],
        policy_for: Callable[[str], Policy],
        limit: int = 100,
        rng: Jitter | None = None,
    ) -> list[Recorded]:
        """Expired leases through ``decide`` (R4): in_flight → verifying, an abandoned
        verification due again."""
        ...

    def renew_lease(
        self, held: StepRecord, owner: str, lease: timedelta, now: datetime
    ) -> StepRecord | None:
        """A running call's heartbeat: the lease runs to ``now + lease`` if ``owner`` still
        holds the step as ``held``; None when it was taken over (record nothing then)."""
        ...

    def expire_lease_of_dead_owner(
        self,
        operation_ref: str,
        owner: str,
        now: datetime,
        traits_for: Callable[[str], ToolTraits],
        policy_for: Callable[[str], Policy],
    ) -> Recorded | None:
        """The expired lease's transition (R4) now, for an owner the caller proved dead;
        None when ``owner`` no longer holds the step."""
        ...

    def leases_held_by(self, prefix: str) -> list[StepRecord]:
        """Leased steps whose owner name starts with ``prefix`` (``host:pid:``)."""
        ...

    def due_work(self, now: datetime, limit: int, republish_after: timedelta) -> list[StepRecord]:
        """Due, unleased work not published within ``republish_after``, marked published
        at ``now``; each step to one caller however many sweep at once (R7)."""
        ...

    def release_parked(self, now: datetime, horizon: datetime, limit: int) -> list[StepRecord]:
        """Waiting steps (``waiting_retry``, ``verifying``), unleased, due by ``horizon``,
        whose hint for their due time has not gone out, marked published at their due
        time; each step to one caller however many release at once (the release timer)."""
        ...

    def lost_hints(
        self,
        now: datetime,
        since: datetime | None,
        until: datetime,
        eta_until: datetime,
        limit: int,
    ) -> list[StepRecord]:
        """Unleased work whose latest hint went out while the broker lost what it held:
        sent in ``[since, until)`` (``since`` None: from the beginning), or an ETA hint
        (stamped with its due time) due before ``eta_until``. A step due now is marked
        published at ``now`` (the caller sends it); one due later is un-parked
        (``published_at`` None) for the release timer. Each step to one caller however
        many sweep at once."""
        ...

    def mark_published(self, operation_ref: str, now: datetime) -> None:
        """The step's hint went out at ``now`` (no version, no event); ``StepNotFound``."""
        ...

    def take_hints(
        self, now: datetime, limit: int, operation_refs: Collection[str] | None = None
    ) -> list[tuple[str, str]]:
        """Pending steps, unleased, whose hint never went out (``published_at`` None; of
        ``operation_refs`` when given), oldest due first, marked published at ``now``:
        each as (operation_ref, tool), to one caller however many take at once (the hint
        relay, ``TOOLSAFE_SUBMIT_HINTS=relay``)."""
        ...

    def hints_not_sent(self, operation_refs: Collection[str], stamp: datetime) -> None:
        """The caller of ``take_hints`` could not publish these: each one still pending
        and still stamped ``stamp`` is unsent again, for the next ``take_hints``."""
        ...

    # ---------------------------------------------------------------- agents and operators

    def provide_input(
        self,
        operation_ref: str,
        new_input: Mapping[str, Any],
        *,
        validate: Validator,
        traits: ToolTraits,
        policy: Policy,
        now: datetime,
        stored: Mapping[str, Any] | None = None,
        digest: str | None = None,
        open_stored: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
        actor: str | None = None,
    ) -> Recorded:
        """needs_input → pending with the new input, same operation_ref; with secret
        fields, ``stored`` is what to write (sealed), ``digest`` its hash and
        ``open_stored`` reads the row's sealed input for the comparison."""
        ...

    def approve(
        self,
        operation_ref: str,
        *,
        approver: str,
        reason: str,
        input_hash: str,
        traits: ToolTraits,
        policy: Policy,
        now: datetime,
    ) -> Recorded:
        """awaiting_approval → pending, bound to the input hash the request was for."""
        ...

    def reject(
        self,
        operation_ref: str,
        *,
        approver: str,
        reason: str,
        traits: ToolTraits,
        policy: Policy,
        now: datetime,
    ) -> Recorded:
        """awaiting_approval → failed."""
        ...

    def cancel(
        self,
        operation_ref: str,
        *,
        by: str,
        reason: str,
        traits: ToolTraits,
        policy: Policy,
        now: datetime,
    ) -> Recorded:
        """Any waiting state → cancelled."""
        ...

    def request_cancel(
        self, operation_ref: str, *, by: str, reason: str, now: datetime
    ) -> StepState:
        """Record a cancellation the step cannot take now (a ``cancel_requested`` event,
        no change of state); returns the step's state."""
        ...

    def resolve(
        self,
        operation_ref: str,
        *,
        operator: str,
        reason: str,
        to: StepState,
        traits: ToolTraits,
        policy: Policy,
        now: datetime,
        evidence: str | None = None,
        confirm_not_written: bool = False,
    ) -> Recorded:
        """An escalated step → pending (verifying first when the outcome is unknown),
        succeeded (with ``evidence``) or failed (with ``confirm_not_written`` when the
        write may have happened), with the operator's reason; refused otherwise."""
        ...
