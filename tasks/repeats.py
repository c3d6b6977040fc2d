"""A repeat of an action that already took effect is not an error, on any interface:
approving an approved step, cancelling a cancelled one, resolving a resolved one the
same way answers with the step as it is and changes nothing (the CLI says "nothing to
do", exit 0; the gateway answers 200 with the view). A different action stays refused
(rejecting an approved step is 409)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from toolsafe.recovery import reasons as R
from toolsafe.recovery.outcomes import TransitionRefused
from toolsafe.recovery.states import StepState
from toolsafe.tasks.views import HistoryEntry, StepView

# The actions' event kinds, and the refusals a repeat of each gets once it took effect.
ACTION_KINDS: Final = frozenset({"approved", "rejected", "resolved", "cancelled"})
REPEAT_REFUSALS: Final = frozenset({R.NOT_AWAITING_APPROVAL, R.NOT_ESCALATED, R.NOT_CANCELLABLE})


@dataclass(frozen=True)
class Action:
    """What was asked for: the event kind it writes and, for a resolution, the state it
    goes to (a re-drive: pending or verifying)."""

    kind: str
    verb: str
    targets: frozenset[StepState] | None = None

    def matches(self, entry: HistoryEntry) -> bool:
        if entry.kind != self.kind:
            return False
        return self.targets is None or StepState(entry.to_state or "") in self.targets


def already_done(view: StepView, action: Action) -> HistoryEntry | None:
    """The event of the same action, when it is the step's last operator action."""
    for entry in reversed(view.history):
        if entry.kind in ACTION_KINDS:
            return entry if action.matches(entry) else None
    return None


def repeat_of(
    refused: TransitionRefused, action: Action, current: Callable[[], StepView]
) -> tuple[StepView, HistoryEntry] | None:
    """The step as it is and the event of the action, when ``refused`` only says the
    same action already took effect; else None (the refusal stands)."""
    if refused.code not in REPEAT_REFUSALS:
        return None
    view = current()
    done = already_done(view, action)
    return None if done is None else (view, done)
