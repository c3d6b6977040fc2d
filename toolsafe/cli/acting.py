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
from datetime import datetime
from typing import TYPE_CHECKING

from kombu.exceptions import OperationalError as KombuOperationalError

from toolsafe.cli.exits import EXIT_OK, EXIT_UNREACHABLE
from toolsafe.recovery.outcomes import TransitionRefused
from toolsafe.tasks.repeats import Action, repeat_of
from toolsafe.tasks.views import StepView

if TYPE_CHECKING:
    from toolsafe.tasks.client import Client
    from toolsafe.tasks.follow_up import Hints


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
        self,
        operation_ref: str,
        due_at: datetime | None,
        now: datetime,
        *,
        tool: str | None = None,
        recovery: bool = False,
    ) -> bool:
        try:
            return self._hints.execute(operation_ref, due_at, now, tool=tool, recovery=recovery)
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


def _print_json(view: StepView) -> None:
    sys.stdout.write(json.dumps(view.as_dict(), indent=2, sort_keys=True, default=str) + "\n")


def act(args: argparse.Namespace, action: Action, call: Callable[[Client], StepView]) -> int:
    """Run one operator action and report it in one line (or the view as JSON)."""
    client, watch = watched_client()
    try:
        view = call(client)
    except TransitionRefused as refused:
        repeat = repeat_of(refused, action, lambda: client.view(args.ref))
        if repeat is None:
            raise
        current, done = repeat
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
