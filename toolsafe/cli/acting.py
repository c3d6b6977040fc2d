"""Operator actions from the CLI: the database is the truth (R1).

An action is committed first; a broker that refuses its hint does not undo it, and the
CLI says so in one line (exit 3) — the sweeper publishes the hint when the broker is
back. A retry of an action that already took effect says so and changes nothing.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from kombu.exceptions import OperationalError as KombuOperationalError

from toolsafe.cli.exits import EXIT_OK, EXIT_UNREACHABLE
from toolsafe.recovery import reasons as R
from toolsafe.recovery.outcomes import TransitionRefused
from toolsafe.recovery.states import StepState
from toolsafe.tasks.views import HistoryEntry, StepView

if TYPE_CHECKING:
    from toolsafe.tasks.client import Client
    from toolsafe.tasks.pipeline import Hints

# The actions' event kinds, and the refusals a repeat of each gets once it took effect.
ACTION_KINDS = frozenset({"approved", "rejected", "resolved", "cancelled"})
_REPEAT_REFUSALS = frozenset({R.NOT_AWAITING_APPROVAL, R.NOT_ESCALATED, R.NOT_CANCELLABLE})


class WatchedHints:
    """The app's publisher, remembering (instead of raising) that the broker refused a
    hint: the action it follows is committed, the sweeper publishes it later (R7)."""

    def __init__(self, hints: Hints) -> None:
        self._hints = hints
        self.unreachable: str | None = None

    def _refused(self, error: BaseException) -> bool:
        self.unreachable = type(error).__name__
        return False

    def execute(
        self, operation_ref: str, due_at: datetime | None, now: datetime, *, tool: str | None = None
    ) -> bool:
        try:
            return self._hints.execute(operation_ref, due_at, now, tool=tool)
        except (KombuOperationalError, OSError) as error:
            return self._refused(error)

    def verify(
        self, operation_ref: str, due_at: datetime | None, now: datetime, *, tool: str | None = None
    ) -> bool:
        try:
            return self._hints.verify(operation_ref, due_at, now, tool=tool)
        except (KombuOperationalError, OSError) as error:
            return self._refused(error)

    def escalation(self, operation_ref: str, *, tool: str | None = None) -> None:
        try:
            self._hints.escalation(operation_ref, tool=tool)
        except (KombuOperationalError, OSError) as error:
            self._refused(error)


def watched_client() -> tuple[Client, WatchedHints]:
    """A client over the default app whose hints are watched."""
    from toolsafe.tasks.app import default_app
    from toolsafe.tasks.client import Client

    app = default_app()
    watch = WatchedHints(app.publisher)
    return Client(runtime=app.runtime, hints=watch), watch


@dataclass(frozen=True)
class Action:
    """What the operator asked for: the event kind it writes and, for a resolution, the
    state it goes to (a re-drive: pending or verifying)."""

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


def _print_json(view: StepView) -> None:
    sys.stdout.write(json.dumps(view.as_dict(), indent=2, sort_keys=True, default=str) + "\n")


def act(args: argparse.Namespace, action: Action, call: Callable[[Client], StepView]) -> int:
    """Run one operator action and report it in one line (or the view as JSON)."""
    client, watch = watched_client()
    try:
        view = call(client)
    except TransitionRefused as refused:
        if refused.code not in _REPEAT_REFUSALS:
            raise
        current = client.view(args.ref)
        done = already_done(current, action)
        if done is None:
            raise
        actor = done.detail.get("operator") or done.detail.get("approver") or done.detail.get("by")
        who = f" by {actor}" if actor else ""
        sys.stdout.write(
            f"{current.operation_ref}: already {action.verb}{who} at "
            f"{done.at.isoformat(timespec='seconds')}; nothing to do (now {current.state}, "
            f"{current.ui_group})\n"
        )
        return EXIT_OK
    if args.json:
        _print_json(view)
    if watch.unreachable is not None:
        sys.stderr.write(
            f"toolsafe: {view.operation_ref}: {action.verb}, committed (now {view.state}); "
            "the broker cannot be reached, so the sweeper will publish the hint when it "
            "returns\n"
        )
        return EXIT_UNREACHABLE
    if not args.json:
        sys.stdout.write(f"{view.operation_ref}: {view.state} ({view.ui_group})\n")
    return EXIT_OK
