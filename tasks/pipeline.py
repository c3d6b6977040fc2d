"""The bodies of the tasks: claim, call, record, carry out the Decision; escalate. The
sweep and the release of parked delays are ``tasks/sweeper.py``; what follows a
recorded Decision (its hints, the task's report) is ``tasks/follow_up.py``.

Every function here treats its message as a hint (R1): it re-reads the step, does
nothing when there is nothing to do, and never retries through ``Task.retry`` (R8).
"""

from __future__ import annotations

import functools
import hashlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, Literal

from toolsafe import tracing
from toolsafe.adapters import codes, lookup_codes
from toolsafe.adapters.envelope import AnySuccess, ToolError
from toolsafe.adapters.guard import Redactions, call_adapter_recorded, call_lookup_recorded
from toolsafe.adapters.protocol import CallContext, LookupResult, LookupUnavailable
from toolsafe.recovery.outcomes import Executed, LookedUp, TransitionRefused
from toolsafe.recovery.secrets import SecretKeyError
from toolsafe.recovery.states import CANCEL_LATER, StepState
from toolsafe.recovery.store import Claim, Recorded, Refused, StepNotFound, StepRecord
from toolsafe.recovery.store.actions import CANCEL_REQUESTED
from toolsafe.tasks import early
from toolsafe.tasks.clock import on_database_clock
from toolsafe.tasks.escalation import EscalationNotice, Handler, notify
from toolsafe.tasks.follow_up import Hints, StepReport, carry_out, log_event
from toolsafe.tasks.lease import Hold, heartbeat_for, recover_if_owner_gone
from toolsafe.tasks.runtime import Runtime, utcnow

log = logging.getLogger("toolsafe.pipeline")

UNKNOWN_TOOL: Final = codes.UNKNOWN_TOOL
SECRET_KEY_MISSING: Final = codes.SECRET_KEY_MISSING


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

# A verification that proves the write absent runs the retry it allows in its own pool
# slot when its lookup took at most this share of the soft time limit (the retry's call
# keeps the rest of the task's limits); a slower lookup leaves it to the recovery lane.
RETRY_HERE_SHARE: Final = 0.1
RETRY_HERE: Final = "retry_here"


@dataclass
class RetryHere:
    """Whether a verification runs the retry its lookup allowed itself: the decision is
    a run due now, and the task (begun at ``started``, monotonic) has used at most
    ``limit`` seconds. ``recorded`` keeps the verification's record, whose hint goes
    out after all should the retry not be claimed here."""

    started: float
    limit: float
    recorded: Recorded | None = None

    @classmethod
    def of(cls, runtime: Runtime, started: float) -> RetryHere:
        return cls(started, runtime.settings.calls.soft_time_limit * RETRY_HERE_SHARE)

    def takes(self, recorded: Recorded, now: datetime) -> bool:
        decision = recorded.decision
        if decision.action != "run" or time.monotonic() - self.started > self.limit:
            return False
        due_at = decision.due_at or recorded.step.due_at
        if due_at is not None and due_at > now:
            return False
        self.recorded = recorded
        return True


def _claim(
    runtime: Runtime,
    hints: Hints,
    report: StepReport,
    operation_ref: str,
    kind: Literal["execute", "verify"],
    started: float | None = None,
) -> tuple[Claim, Hold] | str:
    """Claim the step for ``kind`` under a lease and start its heartbeat; or, when it
    may not run now, what happened instead (``owner_gone``, ``noop``), noted in
    ``report``. ``started``: when the task began, if before this claim (its time limit
    counts from then)."""
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
    return claim, heartbeat_for(runtime).hold(claim, claimed_at, started)


def execute(
    runtime: Runtime,
    hints: Hints,
    operation_ref: str,
    report: StepReport | None = None,
    *,
    started: float | None = None,
) -> str:
    """Run one execution of a step if it is due and unclaimed; returns what happened
    (the Decision's action), and fills ``report`` with what became of the step.
    ``started``: when the task began, if well before this call (a verification that
    runs the retry it allowed): the call's time limit counts from then."""
    report = report if report is not None else StepReport(operation_ref)
    claimed = _claim(runtime, hints, report, operation_ref, "execute", started)
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
    runtime: Runtime,
    hints: Hints,
    operation_ref: str,
    report: StepReport | None = None,
    *,
    started: float | None = None,
) -> str:
    """Look an unknown outcome up downstream if the step is due for verification.

    A lookup that proves the write absent allows a retry due now. This task then runs
    it itself, a claim like any other (R3), when the lookup left it most of its time
    limit (``RETRY_HERE_SHARE``; ``started``: when the task began, monotonic), instead
    of publishing it to wait for a free pool slot; the retry's hint goes out as before
    when the lookup was slower, or when the claim here finds nothing to do. Returns the
    last action taken: the retry's when it ran here, else the verification's."""
    report = report if report is not None else StepReport(operation_ref)
    started = time.monotonic() if started is None else started
    claimed = _claim(runtime, hints, report, operation_ref, "verify")
    if isinstance(claimed, str):
        return claimed
    here = RetryHere.of(runtime, started)
    looked_up = functools.partial(_verify_claimed, here=here)
    action = _under_span("toolsafe.verify", looked_up, runtime, hints, report, *claimed)
    if action != RETRY_HERE or here.recorded is None:
        return action
    log_event("retry_here", operation_ref)
    action = execute(runtime, hints, operation_ref, report, started=started)
    if action != "noop":
        return action
    # Claimed elsewhere meanwhile, or not due yet by this process's clock: the retry's
    # hint goes out as it would have (a second hint is harmless, R1), and the task
    # reports the verification's outcome, not the refused claim.
    report.note = None
    return carry_out(runtime, hints, here.recorded, runtime.now())


def _verify_claimed(
    runtime: Runtime,
    hints: Hints,
    operation_ref: str,
    report: StepReport,
    claim: Claim,
    hold: Hold,
    traced: tracing.Off,
    here: RetryHere | None = None,
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
        here=here,
        result=type(found).__name__,
    )


def _record(
    runtime: Runtime,
    hints: Hints,
    report: StepReport,
    claim: Claim,
    outcome: Executed | LookedUp,
    event: str,
    *,
    here: RetryHere | None = None,
    **fields: Any,
) -> str:
    """After the call: record the outcome under the claim, then carry out the Decision;
    ``RETRY_HERE`` instead when ``here`` takes the retry it decides on."""
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
        now = runtime.now()
        if here is not None and here.takes(recorded, now):
            return RETRY_HERE
        return carry_out(runtime, hints, recorded, now)


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
