"""The definitions every backend of the store shares, on the ground floor beside the
port: the jitter and validator types the port names, the event a state change appends
(and how it names the envelope the step holds instead of copying it), the ``submitted``
and verification-claim vocabulary, and the escalation notice with its dedup key and
re-send schedule, and the two claim shortcuts over ``claim``. Nothing here knows how a
backend keeps its rows.
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, Final, NamedTuple

from toolsafe.adapters.protocol import FieldError
from toolsafe.recovery.records import Claim, ClaimKind, EventRecord, Refused

__all__ = [
    "CLAIM_LABEL_VERIFY",
    "ENVELOPE_IN_STEP",
    "MAX_BACKOFF_FACTOR",
    "NOTICE_OUTCOMES",
    "REPLACED_ENVELOPE",
    "SUBMITTED",
    "Change",
    "Jitter",
    "OutboxNotice",
    "Validator",
    "checked_notice_outcome",
    "dedup_key",
    "envelope_in_step",
    "needs_step",
    "resend_delay",
    "submitted_change",
    "with_envelopes",
]

Jitter = random.Random
"""The randomness ``decide`` draws backoff jitter from (seeded in tests)."""
Validator = Callable[[Mapping[str, Any]], Sequence[FieldError]]
"""An adapter's check of a corrected input: the fields it refuses, none when valid."""

CLAIM_LABEL_VERIFY: Final = "claimed for verification"
SUBMITTED: Final = "submitted"


class Change(NamedTuple):
    """The event a state change appends: its kind, lifecycle label and redacted detail."""

    kind: str
    label: str
    detail: Mapping[str, Any]


def submitted_change(
    tool: str, input_hash: str, max_attempts: int, actor: str | None = None
) -> Change:
    """The ``submitted`` event of a new step (its only event until a worker claims it);
    ``actor`` names who submitted it (a gateway key) when known."""
    detail: dict[str, Any] = {"tool": tool, "input_hash": input_hash, "max_attempts": max_attempts}
    if actor is not None:
        detail["actor"] = actor
    return Change(SUBMITTED, SUBMITTED, detail)


# ----------------------------------------------------------------- envelopes in events

ENVELOPE_IN_STEP: Final = "in_step"
"""An event's ``envelope`` that is the one its step held after the change, stored as
``{"in_step": true, "commit_state": …}`` instead of a copy (the step holds the latest)."""
REPLACED_ENVELOPE: Final = "replaced_envelope"
"""The envelope a change replaced in its step, kept in that change's event: an earlier
event may name it (``ENVELOPE_IN_STEP``), and the step no longer holds it."""


def envelope_in_step(envelope: Mapping[str, Any]) -> dict[str, Any]:
    """What an event keeps of an envelope its step holds: the marker, and the
    ``commit_state`` the counts read straight from the event rows."""
    kept: dict[str, Any] = {ENVELOPE_IN_STEP: True}
    if isinstance(envelope.get("commit_state"), str):
        kept["commit_state"] = envelope["commit_state"]
    return kept


def _names_step(envelope: Any) -> bool:
    return isinstance(envelope, Mapping) and envelope.get(ENVELOPE_IN_STEP) is True


def needs_step(event: EventRecord) -> bool:
    """Whether reading ``event`` back needs its step's envelope (``with_envelopes``)."""
    return _names_step(event.detail.get("envelope")) or REPLACED_ENVELOPE in event.detail


def with_envelopes(events: Sequence[EventRecord], latest: Any) -> list[EventRecord]:
    """A step's events (oldest first) as they were written before events stopped copying
    envelopes: every envelope an event names in its step filled in, the replaced
    envelopes the changes kept taken out of their details.

    Read backwards from ``latest`` (the step's envelope now): before a change that kept
    a ``replaced_envelope``, the step held that one; a change that replaced no envelope
    (none held before, or the same one) keeps none, and none is needed."""
    held = latest
    found: list[EventRecord] = []
    for event in reversed(events):
        detail = event.detail
        names = _names_step(detail.get("envelope"))
        if names or REPLACED_ENVELOPE in detail:
            shown = dict(detail)
            if names:
                shown["envelope"] = held
            if REPLACED_ENVELOPE in shown:
                held = shown.pop(REPLACED_ENVELOPE)
            event = replace(event, detail=shown)
        found.append(event)
    found.reverse()
    return found


# ----------------------------------------------------------------- the escalation outbox

NOTICE_OUTCOMES: Final = ("delivered", "step_moved_on")
"""How a notice was closed: a handler run took it, or the step moved on meanwhile."""
MAX_BACKOFF_FACTOR: Final = 64
"""Re-sends back off from ``resend_after`` by doubling, up to this many times that."""


@dataclass(frozen=True)
class OutboxNotice:
    """One notice owed to the escalation handlers."""

    id: int
    step_id: int
    operation_ref: str
    dedup_key: str
    created_at: datetime
    sends: int
    last_sent_at: datetime
    acknowledged_at: datetime | None
    outcome: str | None

    @property
    def open(self) -> bool:
        return self.acknowledged_at is None


def dedup_key(operation_ref: str, version: int) -> str:
    """The same for every re-send of one escalation; the step's version after the
    escalation makes a second escalation of the same step (after a re-drive) a new one."""
    return f"escalation:{operation_ref}:v{version}"


def resend_delay(resend_after: timedelta, sends: int) -> timedelta:
    """The wait after the ``sends``-th send: ``resend_after``, doubling, capped."""
    factor: int = min(2 ** max(sends - 1, 0), MAX_BACKOFF_FACTOR)
    return resend_after * factor


def checked_notice_outcome(outcome: str) -> str:
    """``outcome`` if a notice may be closed with it; ``ValueError`` naming the choices."""
    if outcome not in NOTICE_OUTCOMES:
        raise ValueError(f"unknown notice outcome {outcome!r}; expected one of {NOTICE_OUTCOMES}")
    return outcome


class ClaimShortcuts(ABC):
    """``claim_execution`` and ``claim_verification``, one definition for every backend:
    its ``claim`` of that kind, None when refused."""

    @abstractmethod
    def claim(
        self, kind: ClaimKind, operation_ref: str, owner: str, lease: timedelta, now: datetime
    ) -> Claim | Refused:
        """The backend's claim of ``kind`` (``StorePort.claim``)."""

    def claim_execution(
        self, operation_ref: str, owner: str, lease: timedelta, now: datetime
    ) -> Claim | None:
        """``claim("execute", …)``; None when refused."""
        claimed = self.claim("execute", operation_ref, owner, lease, now)
        return claimed if isinstance(claimed, Claim) else None

    def claim_verification(
        self, operation_ref: str, owner: str, lease: timedelta, now: datetime
    ) -> Claim | None:
        """``claim("verify", …)``; None when refused."""
        claimed = self.claim("verify", operation_ref, owner, lease, now)
        return claimed if isinstance(claimed, Claim) else None
