"""Step states, every set of them the code uses, and the transition table of DESIGN §5,
in one place.

The same vocabulary is the database CHECK constraint (``toolsafe.recovery.schema``) and the
diagram in ``docs/lifecycle.md``; a test keeps the three in agreement.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final


class StepState(StrEnum):
    PENDING = "pending"
    IN_FLIGHT = "in_flight"
    WAITING_RETRY = "waiting_retry"
    VERIFYING = "verifying"
    NEEDS_INPUT = "needs_input"
    AWAITING_APPROVAL = "awaiting_approval"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    ESCALATED = "escalated"
    CANCELLED = "cancelled"


S = StepState

TERMINAL: Final = frozenset({S.SUCCEEDED, S.FAILED, S.ESCALATED, S.CANCELLED})
"""No worker touches these; ``escalated`` leaves only by operator resolution."""

WAITING: Final = frozenset(
    {S.PENDING, S.WAITING_RETRY, S.VERIFYING, S.NEEDS_INPUT, S.AWAITING_APPROVAL}
)
"""States from which the agent service or an operator may cancel."""

WORK_STATES: Final = frozenset({S.PENDING, S.WAITING_RETRY, S.VERIFYING})
"""States in which a worker has something to do once ``due_at`` has passed."""

WAITING_ON_HUMAN: Final = frozenset({S.NEEDS_INPUT, S.AWAITING_APPROVAL})
"""States that wait for a person: corrected input, or an approval."""

CANCEL_LATER: Final = frozenset({S.WAITING_RETRY, S.NEEDS_INPUT, S.AWAITING_APPROVAL})
"""Where a cancellation asked for while the step ran, or while its outcome was unknown,
takes effect (``toolsafe.tasks.pipeline.honour_cancel_request``): it waits now, and
nothing of it was written."""

NEEDS_AGENT: Final = WAITING_ON_HUMAN | TERMINAL
"""States in which the agent service has to act or read the end result; nothing else
moves such a step, so a run whose steps are all here has settled."""

CLAIMABLE: Final = frozenset({S.PENDING, S.WAITING_RETRY})
"""States an execution claim starts from (R3); ``toolsafe.recovery.guards`` holds the rest
of the claim guard."""

LEASED: Final = frozenset({S.IN_FLIGHT, S.VERIFYING})
"""States that hold a lease while a worker has them; the sweeper expires it (R4)."""

RESOLUTION_TARGETS: Final = frozenset({S.SUCCEEDED, S.FAILED})
"""Where an operator's resolution closes an escalated step (a re-drive goes to pending)."""

REDRIVEN: Final = frozenset({S.PENDING, S.VERIFYING})
"""Where an operator's re-drive sends an escalated step (verifying when its outcome is
unknown)."""

DUE_LATER: Final = frozenset({S.WAITING_RETRY, S.VERIFYING})
"""States whose ``due_at`` is a ``not_before``: the time the next attempt or lookup is due."""


# (from, to, label): every edge of the lifecycle, labelled as in the docs.
TRANSITIONS: Final[frozenset[tuple[StepState, StepState, str]]] = frozenset(
    {
        (S.PENDING, S.IN_FLIGHT, "claimed by a worker"),
        (S.WAITING_RETRY, S.IN_FLIGHT, "claimed by a worker when due"),
        (S.IN_FLIGHT, S.SUCCEEDED, "success with verification evidence"),
        (S.IN_FLIGHT, S.NEEDS_INPUT, "correct_input, not_committed"),
        (S.IN_FLIGHT, S.WAITING_RETRY, "wait_and_retry, not_committed, attempts left"),
        (S.IN_FLIGHT, S.VERIFYING, "verify_operation, unknown write, or lease expired"),
        (S.IN_FLIGHT, S.AWAITING_APPROVAL, "request_approval"),
        (S.IN_FLIGHT, S.ESCALATED, "escalate, limits exhausted, loop guard, unverifiable"),
        (S.VERIFYING, S.SUCCEEDED, "lookup finds the operation committed"),
        (S.VERIFYING, S.WAITING_RETRY, "not found after the consistency window, attempts left"),
        (S.VERIFYING, S.VERIFYING, "not found inside the window, or lookup unavailable"),
        (S.VERIFYING, S.ESCALATED, "lookup unavailable too long, or no lookup"),
        (S.NEEDS_INPUT, S.PENDING, "corrected input accepted"),
        (S.AWAITING_APPROVAL, S.PENDING, "approved"),
        (S.AWAITING_APPROVAL, S.FAILED, "rejected"),
        (S.PENDING, S.CANCELLED, "cancelled"),
        (S.WAITING_RETRY, S.CANCELLED, "cancelled"),
        (S.VERIFYING, S.CANCELLED, "cancelled"),
        (S.NEEDS_INPUT, S.CANCELLED, "cancelled"),
        (S.AWAITING_APPROVAL, S.CANCELLED, "cancelled"),
        (S.ESCALATED, S.PENDING, "operator re-drive, reason recorded"),
        (S.ESCALATED, S.VERIFYING, "operator re-drive of an unknown outcome: verify first"),
        (S.ESCALATED, S.SUCCEEDED, "operator resolution, reason recorded"),
        (S.ESCALATED, S.FAILED, "operator resolution, reason recorded"),
    }
)

ALLOWED: Final[frozenset[tuple[StepState, StepState]]] = frozenset(
    (src, dst) for src, dst, _ in TRANSITIONS
)


LABELS: Final[dict[tuple[StepState, StepState], str]] = {
    (src, dst): label for src, dst, label in TRANSITIONS
}
"""The label of each edge; one label per (from, to), which a test keeps true."""


def is_allowed(src: StepState, dst: StepState) -> bool:
    return (src, dst) in ALLOWED


def label_of(src: StepState, dst: StepState) -> str:
    """The edge's label; ``KeyError`` when the lifecycle has no such edge."""
    return LABELS[(src, dst)]


def ui_group(state: StepState) -> str:
    """What a front end shows: the article's groups, success only once confirmed."""
    return {
        S.PENDING: "queued",
        S.IN_FLIGHT: "running",
        S.WAITING_RETRY: "waiting to retry",
        S.VERIFYING: "verifying the result",
        S.NEEDS_INPUT: "waiting for input",
        S.AWAITING_APPROVAL: "waiting for approval",
        S.SUCCEEDED: "terminal",
        S.FAILED: "terminal",
        S.ESCALATED: "terminal",
        S.CANCELLED: "terminal",
    }[state]


NO_OUTCOME_YET: Final = frozenset({S.PENDING, S.IN_FLIGHT})
"""States without an envelope: nothing has happened yet ("still working" is no error)."""

WAITING_ON_THE_AGENT_OR_A_HUMAN: Final = frozenset({S.NEEDS_INPUT, S.AWAITING_APPROVAL})
"""States an adapter's own error led to that wait for a correction or an approval."""
