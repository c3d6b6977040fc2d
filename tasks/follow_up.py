"""What follows a recorded Decision: the hints it sends (``carry_out``), where they go
(``Hints``: the Celery publisher, or anything that records), and the report a task
returns about its step (``StepReport``), with the pipeline's log lines (``log_event``).

The task bodies (``tasks/pipeline.py``), the client, the sweeper and the recovery of a
dead pool process's leases all carry a Decision out through ``carry_out``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from toolsafe.recovery.states import DUE_LATER, StepState
from toolsafe.recovery.store import Recorded, StepRecord
from toolsafe.tasks.faults import Faults
from toolsafe.tasks.runtime import Runtime

log = logging.getLogger("toolsafe.pipeline")


class Hints(Protocol):
    """Where follow-up messages go (the Celery publisher, or anything that records).

    ``tool`` names the step's tool for monitoring only (Flower shows it with the task);
    the task itself reads everything from the step. ``recovery`` marks the hint of a
    step waiting to retry (``retrying``): it goes out in the recovery lane
    (``RECOVERY_QUEUE``) instead of behind the execute queue's new submissions."""

    def execute(
        self,
        operation_ref: str,
        due_at: datetime | None,
        now: datetime,
        *,
        tool: str | None = None,
        recovery: bool = False,
    ) -> bool: ...

    def verify(
        self, operation_ref: str, due_at: datetime | None, now: datetime, *, tool: str | None = None
    ) -> bool: ...

    def escalation(self, operation_ref: str, *, tool: str | None = None) -> None: ...


@dataclass
class StepReport:
    """What became of the step a task looked at: the result a task returns, which Flower
    shows (the new state, and ``not_before`` when it waits), not the runtime's action."""

    operation_ref: str
    tool: str | None = None
    state: str | None = None
    not_before: datetime | None = None
    note: str | None = None

    def recorded(self, recorded: Recorded) -> None:
        step = recorded.step
        self.tool, self.state = step.tool, str(step.state)
        self.not_before = step.due_at if step.state in DUE_LATER else None

    def result(self) -> dict[str, str]:
        # What became of the step first: Flower's narrow result column shows the start.
        shown: dict[str, str] = {}
        if self.state is not None:
            shown["state"] = self.state
        if self.not_before is not None:
            shown["not_before"] = self.not_before.isoformat(timespec="seconds")
        if self.note is not None:
            shown["note"] = self.note
        if self.tool is not None:
            shown["tool"] = self.tool
        shown["operation_ref"] = self.operation_ref
        return shown


def log_event(event: str, operation_ref: str, **fields: Any) -> None:
    """One log line: ``event operation_ref key=value ...``, the same keys as ``extra``;
    nothing is built when INFO is off."""
    if not log.isEnabledFor(logging.INFO):
        return
    shown = " ".join(f"{key}={value}" for key, value in fields.items())
    log.info(
        "%s %s %s",
        event,
        operation_ref,
        shown,
        extra={"event": event, "operation_ref": operation_ref, **fields},
    )


def retrying(step: StepRecord) -> bool:
    """A step waiting out its retry delay (``waiting_retry``: a rate limit, an
    unavailable dependency, a re-execution a lookup proved safe). Its execute hint goes
    in the recovery lane: its agent has waited out the delay already, and a hint behind
    the execute queue's backlog of new submissions would be late by that backlog."""
    return step.state is StepState.WAITING_RETRY


def carry_out(
    runtime: Runtime, hints: Hints, recorded: Recorded, now: datetime, *, inject: bool = True
) -> str:
    """Publish what the Decision asks for; later work is left to the sweeper (R6).

    ``inject=False`` skips the fault points (the client runs this too, and a fault
    plan is meant for workers).
    """
    decision = recorded.decision
    ref = recorded.step.operation_ref
    due_at = decision.due_at or recorded.step.due_at
    faults = runtime.faults if inject else Faults(False, None, None)
    if decision.action in ("run", "verify"):
        faults.hit("before_publish", ref)
        if decision.action == "run":
            published = hints.execute(
                ref, due_at, now, tool=recorded.step.tool, recovery=retrying(recorded.step)
            )
        else:
            published = hints.verify(ref, due_at, now, tool=recorded.step.tool)
        faults.hit("after_publish", ref)
        if published:
            # Stamped with the time the hint will arrive: the sweeper re-publishes only
            # if it has not done its work REPUBLISH_AFTER seconds past that.
            arrives = due_at if due_at is not None and due_at > now else now
            runtime.store.mark_published(ref, arrives)
        else:
            # Due beyond max_eta: parked in the store, released by the release timer.
            log_event("parked", ref, due_at=str(due_at))
    elif decision.action == "escalate":
        faults.hit("before_publish", ref)
        hints.escalation(ref, tool=recorded.step.tool)
        faults.hit("after_publish", ref)
    return decision.action
