"""The bodies of the tasks: claim, call, record, carry out the Decision; escalate. The
sweep and the release of parked delays are ``tasks/sweeper.py``.

Every function here treats its message as a hint (R1): it re-reads the step, does
nothing when there is nothing to do, and never retries through ``Task.retry`` (R8).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, Literal, Protocol

from toolsafe import tracing
from toolsafe.adapters import codes, lookup_codes
from toolsafe.adapters.envelope import AnySuccess, ToolError
from toolsafe.adapters.guard import Redactions, call_adapter_recorded, call_lookup_recorded
from toolsafe.adapters.protocol import CallContext, LookupResult, LookupUnavailable
from toolsafe.recovery.outcomes import Executed, LookedUp, TransitionRefused
from toolsafe.recovery.secrets import SecretKeyError
from toolsafe.recovery.states import CANCEL_LATER, DUE_LATER, StepState
from toolsafe.recovery.store import Claim, Recorded, Refused, StepNotFound, StepRecord
from toolsafe.recovery.store.actions import CANCEL_REQUESTED
from toolsafe.tasks import early
from toolsafe.tasks.clock import on_database_clock
from toolsafe.tasks.escalation import EscalationNotice, Handler, notify
from toolsafe.tasks.faults import Faults
from toolsafe.tasks.lease import Hold, heartbeat_for, recover_if_owner_gone
from toolsafe.tasks.runtime import Runtime, utcnow

log = logging.getLogger("toolsafe.pipeline")

UNKNOWN_TOOL: Final = codes.UNKNOWN_TOOL
SECRET_KEY_MISSING: Final = codes.SECRET_KEY_MISSING


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


def approval_ref(step: StepRecord) -> str | None:
    """The approval reference to send downstream, when a human approved this input.

    A step reaches execution with ``approval_input_hash`` set only through an approval
    (awaiting_approval → pending), and the approval binds to the input it was asked for.
    """
    if step.approval_input_hash is None or step.approval_input_hash != step.input_hash:
        return None
    digest = hashlib.sha256(f"{step.operation_ref}\0{step.input_hash}".encode()).hexdigest()
    return f"appr_{digest[:32]}"


def unknown_tool(operation_ref: str, tool: str) -> ToolError:
    """No adapter for the step's tool in this worker: nothing was sent."""
    return codes.build_error(UNKNOWN_TOOL, operation_ref, {"tool": tool[:100]})


def secret_key_missing(operation_ref: str, tool: str) -> ToolError:
    """The step's sealed input cannot be opened with this worker's keys: nothing was sent."""
    return codes.build_error(SECRET_KEY_MISSING, operation_ref, {"tool": tool[:100]})


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


def _owner_gone(runtime: Runtime, hints: Hints, operation_ref: str) -> bool:
    """A refused hint for a leased step: if its owner is provably gone (this host saw
    it die), the step goes to verification now, as an expired lease would (R4)."""
    recorded = recover_if_owner_gone(runtime, operation_ref)
    if recorded is None:
        return False
    log_event("owner_gone", operation_ref, state=str(recorded.step.state))
    carry_out(runtime, hints, recorded, runtime.now())
    return True


NOTHING_TO_DO: Final = "nothing to do: not due, held by another worker, or done"
LEASE_LOST: Final = "lease lost: the step is being verified elsewhere"


def _claim(
    runtime: Runtime,
    hints: Hints,
    report: StepReport,
    operation_ref: str,
    kind: Literal["execute", "verify"],
) -> tuple[Claim, Hold] | str:
    """Claim the step for ``kind`` under a lease and start its heartbeat; or, when it
    may not run now, what happened instead (``owner_gone``, ``noop``), noted in
    ``report``."""
    with tracing.span("toolsafe.claim", {"toolsafe.claim.kind": kind}) as traced:
        claim, claimed_at = early.claim_when_due(runtime, operation_ref, kind, traced)
        traced.set("toolsafe.claim.result", "noop" if isinstance(claim, Refused) else "claimed")
    if isinstance(claim, Refused):
        if _owner_gone(runtime, hints, operation_ref):
            report.note = "its worker was lost: the step goes to verification"
            return "owner_gone"
        log_event(f"{kind}_noop", operation_ref)
        report.note = NOTHING_TO_DO
        return "noop"
    return claim, heartbeat_for(runtime).hold(claim, claimed_at)


def execute(
    runtime: Runtime, hints: Hints, operation_ref: str, report: StepReport | None = None
) -> str:
    """Run one execution of a step if it is due and unclaimed; returns what happened
    (the Decision's action), and fills ``report`` with what became of the step."""
    report = report if report is not None else StepReport(operation_ref)
    claimed = _claim(runtime, hints, report, operation_ref, "execute")
    if isinstance(claimed, str):
        return claimed
    # The GenAI conventions' tool-call span (docs/tracing.md): redacted values only.
    return _under_span("execute_tool", _execute_claimed, runtime, hints, report, *claimed)


def _under_span(
    kind: str,
    body: Callable[[Runtime, Hints, str, StepReport, Claim, Hold, tracing.Off], str],
    runtime: Runtime,
    hints: Hints,
    report: StepReport,
    claim: Claim,
    hold: Hold,
) -> str:
    """``body`` for a claimed step, inside a ``{kind} {tool}`` span when tracing is on
    (the tool call's attributes; the step's state and the action after)."""
    ref = claim.step.operation_ref
    if tracing.tracer() is None:
        return body(runtime, hints, ref, report, claim, hold, tracing.OFF)
    step = claim.step
    attributes = {**tracing.tool_call(step.tool, ref), "toolsafe.attempt": step.attempts}
    with tracing.span(f"{kind} {tracing.tool_name(step.tool)}", attributes) as traced:
        action = body(runtime, hints, ref, report, claim, hold, traced)
        traced.set_many({"toolsafe.step.state": report.state, "toolsafe.outcome": action})
        return action


def _execute_claimed(
    runtime: Runtime,
    hints: Hints,
    operation_ref: str,
    report: StepReport,
    claim: Claim,
    hold: Hold,
    traced: tracing.Off,
) -> str:
    try:
        runtime.faults.hit("after_claim", operation_ref)
        step = claim.step
        log_event(
            "execute_claimed",
            operation_ref,
            tool=step.tool,
            attempt=step.attempts,
        )
        envelope: AnySuccess | ToolError
        redactions: Redactions = ()
        opened: dict[str, Any] | None = None
        try:
            opened = runtime.open_input(step.input)
        except SecretKeyError as error:
            # Nothing was sent: no key opens the secret field. An operator must look.
            log.error(
                "%s", error, extra={"event": "secret_key_missing", "operation_ref": operation_ref}
            )
        if opened is None:
            envelope = secret_key_missing(operation_ref, step.tool)
        elif step.tool in runtime.registry:
            context = CallContext(
                attempt=step.attempts,
                approval_ref=approval_ref(step),
                attempts_left=step.max_attempts - step.attempts,
            )
            runtime.faults.hit("before_call", operation_ref)
            if not hold.holds():
                # Paused or cut off past the lease (or the time limit): the step may be
                # someone else's by now, so this process sends nothing (docs/operations.md).
                log_event("lease_lost", operation_ref, before="call")
                report.note = LEASE_LOST
                return "lease_lost"
            with (
                runtime.faults.during("during_call", operation_ref),
                tracing.span(
                    "toolsafe.adapter.call", {"gen_ai.tool.name": tracing.tool_name(step.tool)}
                ),
            ):
                envelope, redactions = call_adapter_recorded(
                    runtime.adapter(step.tool), opened, operation_ref, context
                )
        else:
            envelope = unknown_tool(operation_ref, step.tool)
        traced.set_many(tracing.envelope_attributes(envelope))
        if isinstance(envelope, ToolError):
            traced.failed(envelope.code)
    finally:
        held = heartbeat_for(runtime).release(hold)
    if held is None:
        # The heartbeat found the lease taken over: the call records nothing (R4).
        log_event("lease_lost", operation_ref, before="record")
        report.note = LEASE_LOST
        return "lease_lost"
    return _record(
        runtime,
        hints,
        report,
        held,
        Executed(envelope, redactions),
        "execute_recorded",
        code=getattr(envelope, "code", None),
    )


def verify(
    runtime: Runtime, hints: Hints, operation_ref: str, report: StepReport | None = None
) -> str:
    """Look an unknown outcome up downstream if the step is due for verification."""
    report = report if report is not None else StepReport(operation_ref)
    claimed = _claim(runtime, hints, report, operation_ref, "verify")
    if isinstance(claimed, str):
        return claimed
    return _under_span("toolsafe.verify", _verify_claimed, runtime, hints, report, *claimed)


def _verify_claimed(
    runtime: Runtime,
    hints: Hints,
    operation_ref: str,
    report: StepReport,
    claim: Claim,
    hold: Hold,
    traced: tracing.Off,
) -> str:
    try:
        runtime.faults.hit("after_claim", operation_ref)
        step = claim.step
        found: LookupResult
        redactions: Redactions = ()
        if step.tool in runtime.registry:
            with (
                runtime.faults.during("during_call", operation_ref),
                tracing.span(
                    "toolsafe.adapter.lookup", {"gen_ai.tool.name": tracing.tool_name(step.tool)}
                ),
            ):
                found, redactions = call_lookup_recorded(runtime.adapter(step.tool), operation_ref)
        else:
            # Stamped like an adapter's answer (this process's clock): _record moves it.
            found = LookupUnavailable(checked_at=utcnow(), code=lookup_codes.LOOKUP_UNKNOWN_TOOL)
        traced.set("toolsafe.lookup.result", type(found).__name__)
    finally:
        held = heartbeat_for(runtime).release(hold)
    if held is None:
        log_event("lease_lost", operation_ref, before="record")
        report.note = LEASE_LOST
        return "lease_lost"
    return _record(
        runtime,
        hints,
        report,
        held,
        LookedUp(found, redactions),
        "verify_recorded",
        result=type(found).__name__,
    )


def _record(
    runtime: Runtime,
    hints: Hints,
    report: StepReport,
    claim: Claim,
    outcome: Executed | LookedUp,
    event: str,
    **fields: Any,
) -> str:
    """After the call: record the outcome under the claim, then carry out the Decision."""
    ref = claim.step.operation_ref
    tool = claim.step.tool
    runtime.faults.hit("after_call", ref)
    # The runtime decides and the store records in one transaction: one span for both.
    with tracing.span("toolsafe.record") as traced:
        recorded = runtime.store.record(
            claim,
            on_database_clock(outcome, runtime.clock.offset),
            traits=runtime.traits_for(tool),
            policy=runtime.policy_for(tool),
            now=runtime.now(),
            rng=runtime.rng,
        )
        if recorded is not None:
            traced.set_many(
                {
                    "toolsafe.step.state": str(recorded.step.state),
                    "toolsafe.decision.action": recorded.decision.action,
                }
            )
    if recorded is None:
        # Someone expired our lease meanwhile: the step is theirs to verify (R4).
        log_event("lease_lost", ref)
        report.note = LEASE_LOST
        return "lease_lost"
    runtime.faults.hit("after_record", ref)
    recorded = honour_cancel_request(runtime, recorded)
    report.recorded(recorded)
    state = str(recorded.step.state)
    log_event(event, ref, state=state, action=recorded.decision.action, **fields)
    # Follow-up hints published here carry this trace (a retry, a verification).
    with tracing.span("toolsafe.decision", {"toolsafe.decision.action": recorded.decision.action}):
        return carry_out(runtime, hints, recorded, runtime.now())


def honour_cancel_request(runtime: Runtime, recorded: Recorded) -> Recorded:
    """Cancel a step that now waits with nothing written when a cancellation was asked
    for while it could not take one (``request_cancel``: it was running, or its outcome
    was unknown), rather than retry it or ask for input. A write verification found is
    left a success: the request never makes a write that happened "cancelled"."""
    step = recorded.step
    if step.state not in CANCEL_LATER or step.commit_state == "unknown":
        return recorded
    asked = None
    for event in runtime.store.events(step.operation_ref):
        if event.kind == CANCEL_REQUESTED:
            asked = event
        elif event.kind == "resolved":  # an operator re-drove it since: theirs to decide
            asked = None
    if asked is None:
        return recorded
    by, reason = asked.detail.get("by"), asked.detail.get("reason")
    try:
        cancelled = runtime.store.cancel(
            step.operation_ref,
            by=by if isinstance(by, str) else "agent",
            reason=reason if isinstance(reason, str) else "cancel requested",
            traits=runtime.traits_for(step.tool),
            policy=runtime.policy_for(step.tool),
            now=runtime.now(),
        )
    except TransitionRefused:  # it moved on meanwhile; what it is now stands
        return recorded
    log_event("cancel_honoured", step.operation_ref, after=str(step.state))
    return cancelled


def escalate(runtime: Runtime, handlers: list[tuple[str, Handler]], operation_ref: str) -> str:
    """Tell the escalation handlers about a step that is (still) escalated, and close its
    outbox notice once every handler took it; a failed handler leaves it open for the
    sweeper to send again (at least once, with a stable dedup key)."""
    store = runtime.store
    try:
        step = store.get(operation_ref)
    except StepNotFound:
        log_event("escalation_noop", operation_ref)
        return "noop"
    owed = store.outbox.notices(operation_ref, open_only=True)
    if step.state is not StepState.ESCALATED:
        # Resolved before the notification ran: nothing to tell.
        for stale in owed:
            store.outbox.acknowledge(stale.id, runtime.now(), "step_moved_on")
        log_event("escalation_noop", operation_ref)
        return "noop"
    if not owed:
        # Taken already (a duplicate or late hint): handlers heard of it once.
        log_event("escalation_noop", operation_ref, reason="delivered")
        return "noop"
    *earlier, current = owed
    for stale in earlier:  # escalations the step has since left (re-driven, escalated again)
        store.outbox.acknowledge(stale.id, runtime.now(), "step_moved_on")
    notice = EscalationNotice.from_step(step, store.events(operation_ref), current.dedup_key)
    failed = notify(handlers, notice)
    if failed:
        log_event("escalation_unacknowledged", operation_ref, failed=",".join(failed))
        return "handler_failed"
    store.outbox.acknowledge(current.id, runtime.now())
    return "notified"
