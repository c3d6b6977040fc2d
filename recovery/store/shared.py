"""The definitions every backend of the store shares, on the ground floor beside the
port: the jitter and validator types the port names, the event a state change appends,
the ``submitted`` and verification-claim vocabulary, and the escalation notice with its
dedup key and re-send schedule. Nothing here knows how a backend keeps its rows.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final, NamedTuple

from toolsafe.adapters.protocol import FieldError

__all__ = [
    "CLAIM_LABEL_VERIFY",
    "MAX_BACKOFF_FACTOR",
    "NOTICE_OUTCOMES",
    "SUBMITTED",
    "Change",
    "Jitter",
    "OutboxNotice",
    "Validator",
    "checked_notice_outcome",
    "dedup_key",
    "resend_delay",
    "submitted_change",
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
