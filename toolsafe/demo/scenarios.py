"""The article's scenarios, played by the demo as an agent service would: each submits a
tool call, injects the downstream's fault, acts where the agent or a human must, and
checks how the step ended against the downstream's own count of effects."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

from toolsafe.demo.env import DemoEnv
from toolsafe.harness import wait_until
from toolsafe.recovery.outcomes import TransitionRefused
from toolsafe.recovery.owners import owner_pid
from toolsafe.recovery.states import NEEDS_AGENT, StepState
from toolsafe.recovery.store import EventRecord, StepRecord
from toolsafe.tasks.client import Client
from toolsafe.tasks.views import StepView

INVOICE: Final = {"customer_id": "cus_42", "amount_cents": 12_000, "currency": "EUR"}
EMAIL: Final = {"subject": "Your invoice", "body": "Thank you for your order."}
WAIT: Final = 30.0


@dataclass(frozen=True)
class Check:
    what: str
    ok: bool


@dataclass
class Result:
    """How one scenario went: its checks, what the agent was told, and any error."""

    name: str
    title: str
    operation_ref: str
    checks: list[Check] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and bool(self.checks) and all(c.ok for c in self.checks)


class Play:
    """What a scenario works with: the client, the downstream, its operation_ref."""

    def __init__(self, env: DemoEnv, result: Result, say: Callable[[str], None]) -> None:
        self.env = env
        self.result = result
        self.ref = result.operation_ref
        self._say = say

    @property
    def client(self) -> Client:
        return self.env.client

    def say(self, message: str) -> None:
        self._say(f"{self.result.name}: {message}")

    def note(self, message: str) -> None:
        self.result.notes.append(message)
        self.say(message)

    def check(self, what: str, ok: bool) -> bool:
        self.result.checks.append(Check(what, ok))
        return ok

    def fault(self, name: str, **extra: Any) -> None:
        self.env.downstream.state.add_fault({"fault": name, "operation_ref": self.ref, **extra})

    def effects(self) -> int:
        return self.env.downstream.effects().get(self.ref, 0)

    def submit(self, tool: str, data: Mapping[str, Any]) -> StepView:
        return self.client.submit(tool, data, operation_ref=self.ref)

    def wait(self) -> StepView:
        """Until the step needs the agent (input, approval) or is terminal; polls at a
        steady pace (``Client.wait`` backs off to 1 s, too slow for a live demo)."""
        _until(self, lambda step: step.state in NEEDS_AGENT)
        return self.client.view(self.ref)

    def step(self) -> StepRecord:
        """The stored step, as an operator's tool reads it (the demo shows the counts)."""
        return self.client.runtime.store.get(self.ref)

    def events(self) -> list[EventRecord]:
        return self.client.runtime.store.events(self.ref)

    def ended(self, view: StepView, state: StepState, reason: str | None = None) -> None:
        self.check(f"ends {state}" + (f" ({reason})" if reason else ""), view.state is state)
        if reason is not None:
            self.check(f"reason is {reason}", view.reason == reason)


def _code(view: StepView) -> str | None:
    envelope = view.envelope_json() or {}
    code = envelope.get("code")
    return str(code) if code is not None else None


def _claims(events: list[EventRecord], kind: str) -> list[EventRecord]:
    return [e for e in events if e.kind == "claimed" and e.detail.get("claim") == kind]


def _visited(events: list[EventRecord], state: StepState) -> bool:
    return any(event.to_state is state for event in events)


# --------------------------------------------------------------------------- scenarios


def success(play: Play) -> None:
    play.submit("create_invoice", INVOICE)
    view = play.wait()
    play.ended(view, StepState.SUCCEEDED)
    envelope = view.envelope_json() or {}
    evidence = (envelope.get("verification") or {}).get("evidence_ref")
    play.check("the success carries evidence (verification.evidence_ref)", bool(evidence))
    play.check("exactly one invoice downstream", play.effects() == 1)


def invalid_recipient(play: Play) -> None:
    wrong = {"recipient_email": "ana@exmaple.com", **EMAIL}
    play.submit("send_email", wrong)
    view = play.wait()
    play.check("stops in needs_input", view.state is StepState.NEEDS_INPUT)
    play.check("code INVALID_RECIPIENT_ADDRESS", _code(view) == "INVALID_RECIPIENT_ADDRESS")
    play.check("flags recipient_email", "recipient_email" in view.fields)
    play.check("nothing was sent", play.effects() == 0)
    try:
        play.client.provide_input(play.ref, wrong)
    except TransitionRefused as refused:
        play.note(f"identical input refused: {refused}")
        play.check(
            "identical input is refused (IDENTICAL_INPUT)", refused.code == "IDENTICAL_INPUT"
        )
    else:
        play.check("identical input is refused (IDENTICAL_INPUT)", False)
    play.client.provide_input(play.ref, {**wrong, "recipient_email": "ana@example.com"})
    play.say("corrected recipient_email accepted, same operation_ref")
    view = play.wait()
    play.ended(view, StepState.SUCCEEDED)
    play.check("same operation_ref after the correction", view.operation_ref == play.ref)
    play.check("exactly one e-mail downstream", play.effects() == 1)


def rate_limit(play: Play) -> None:
    play.fault("rate_limit", retry_after=2)
    play.submit("create_invoice", INVOICE)
    view = play.wait()
    play.ended(view, StepState.SUCCEEDED)
    events = play.events()
    limited = [e for e in events if e.kind == "executed" and _envelope_code(e) == "RATE_LIMITED"]
    not_before = _not_before(limited[0]) if limited else None
    play.check("the rate limit gave a not_before", not_before is not None)
    later = [e for e in _claims(events, "execute") if limited and e.at > limited[0].at]
    if not_before is not None and later:
        waited = (later[0].at - limited[0].at).total_seconds()
        play.note(f"retried {waited:.2f}s after the 429, not before {not_before.isoformat()}")
        play.check("not executed again before not_before", later[0].at >= not_before)
    else:
        play.check("executed again after the wait", False)
    play.check("exactly one invoice downstream", play.effects() == 1)


def approval(play: Play) -> None:
    play.fault("require_approval", times=None)
    play.submit("create_invoice", {**INVOICE, "amount_cents": 950_000})
    view = play.wait()
    play.check("stops in awaiting_approval", view.state is StepState.AWAITING_APPROVAL)
    play.check("code MISSING_APPROVAL", _code(view) == "MISSING_APPROVAL")
    play.check("nothing written before the approval", play.effects() == 0)
    play.client.approve(play.ref, approver="demo-operator", reason="amount matches the order")
    play.say("approved by demo-operator")
    view = play.wait()
    play.ended(view, StepState.SUCCEEDED)
    play.check("exactly one invoice downstream", play.effects() == 1)


def version_conflict(play: Play) -> None:
    play.fault("version_conflict")
    play.submit("create_invoice", INVOICE)
    view = play.wait()
    play.ended(view, StepState.ESCALATED, "VERSION_CONFLICT")
    envelope = view.envelope_json() or {}
    play.check("the agent is told to escalate / re-plan", envelope.get("next_action") == "escalate")
    play.check("never retried with the same parameters", play.step().attempts == 1)
    play.check("nothing written", play.effects() == 0)
    play.note(f"the model reads: {view.text}")


def timeout_after_store(play: Play) -> None:
    # The downstream stores the invoice, then answers later than the adapter waits.
    play.fault("stall_after_store", seconds=4)
    play.submit("create_invoice", INVOICE)
    view = play.wait()
    play.ended(view, StepState.SUCCEEDED)
    events = play.events()
    play.check(
        "the timeout was OUTCOME_UNKNOWN",
        any(_envelope_code(e) == "OUTCOME_UNKNOWN" for e in events),
    )
    play.check("it went to verifying, not to a retry", _visited(events, StepState.VERIFYING))
    play.check(
        "executed once (the write was never sent again)", len(_claims(events, "execute")) == 1
    )
    play.check("exactly one invoice downstream", play.effects() == 1)


def lookup_down(play: Play) -> None:
    # A gateway 502 hides a stored write, and the lookup that could tell is down.
    play.fault("error_after_store", status=502)
    play.fault("lookup_down", times=None)
    play.submit("create_invoice", INVOICE)
    view = play.wait()
    play.ended(view, StepState.ESCALATED, "LOOKUP_UNAVAILABLE")
    events = play.events()
    play.check("it was verified first", _visited(events, StepState.VERIFYING))
    play.check("never executed again", len(_claims(events, "execute")) == 1)
    play.check("one invoice downstream (escalated, not retried)", play.effects() == 1)


def crash_recovery(play: Play) -> None:
    """The article's closing test: SIGKILL the worker while the downstream holds the
    stored write; a new worker loads the operation_ref and verifies first."""
    live = play.env.live_workers()
    if not play.check("exactly one worker runs before the crash", len(live) == 1):
        return
    victim = live[0]
    play.fault("stall_after_store", seconds=20)
    play.submit("create_invoice", INVOICE)
    # Kill as soon as the downstream holds the write: well inside the adapter's timeout,
    # so the worker dies mid-call, before it could record anything.
    wait_until(
        lambda: play.effects() > 0, WAIT, f"the downstream to receive {play.ref}", interval=0.005
    )
    victim.kill()
    play.note(f"SIGKILL {victim.name} (pid {victim.pid}) while the downstream held the invoice")
    fresh = play.env.start_worker()
    play.note(f"started {fresh.name} (pid {fresh.pid})")
    view = play.wait()
    play.ended(view, StepState.SUCCEEDED)
    events = play.events()
    executions = _claims(events, "execute")
    play.check(
        f"{victim.name} had claimed the write when it was killed",
        bool(executions) and _owned_by(executions[0], victim.pid),
    )
    verifications = _claims(events, "verify")
    by_fresh = bool(verifications) and _owned_by(verifications[0], fresh.pid)
    play.check("the killed worker recorded nothing", not any(e.kind == "executed" for e in events))
    play.check("the lease expired into verifying (R4)", _visited(events, StepState.VERIFYING))
    play.check(f"{fresh.name} verified it first", by_fresh)
    play.check("executed once (never re-sent blindly)", len(_claims(events, "execute")) == 1)
    play.check("exactly one invoice downstream", play.effects() == 1)


def _owned_by(event: EventRecord, pid: int) -> bool:
    return owner_pid(event.detail.get("owner")) == pid


def _until(play: Play, condition: Callable[[StepRecord], bool]) -> StepRecord:
    seen: list[StepRecord] = []

    def reached() -> bool:
        seen[:] = [play.step()]
        return condition(seen[0])

    wait_until(reached, WAIT, f"{play.ref} to reach the expected state")
    return seen[0]


def _envelope(event: EventRecord) -> Mapping[str, Any]:
    envelope = event.detail.get("envelope")
    return envelope if isinstance(envelope, Mapping) else {}


def _envelope_code(event: EventRecord) -> str | None:
    code = _envelope(event).get("code")
    return str(code) if code is not None else None


def _not_before(event: EventRecord) -> datetime | None:
    raw = (_envelope(event).get("retry") or {}).get("not_before")
    return datetime.fromisoformat(str(raw).replace("Z", "+00:00")) if raw else None


Scenario = Callable[[Play], None]

# (name, title, scenario); the crash runs last, alone, because it kills a worker.
ARTICLE: Final[tuple[tuple[str, str, Scenario], ...]] = (
    ("success", "success with evidence", success),
    (
        "invalid_recipient",
        "invalid recipient → identical input refused → corrected input → succeeded",
        invalid_recipient,
    ),
    ("rate_limit", "rate limit honoured until not_before → succeeded", rate_limit),
    ("approval", "missing approval → approved → succeeded", approval),
    ("version_conflict", "version conflict → the agent is asked for a new plan", version_conflict),
    (
        "timeout_after_store",
        "timeout after the write was stored → verified → succeeded, one invoice",
        timeout_after_store,
    ),
    ("lookup_down", "outcome unknown and lookup down → escalated", lookup_down),
)
CRASH: Final = (
    "crash_recovery",
    "worker SIGKILLed during the write → a new worker verifies first → one invoice",
    crash_recovery,
)


def play(
    env: DemoEnv, name: str, title: str, scenario: Scenario, ref: str, say: Callable[[str], None]
) -> Result:
    result = Result(name, title, ref)
    try:
        scenario(Play(env, result, say))
    except Exception as error:  # a scenario that blows up is a failed scenario, reported
        result.error = f"{type(error).__name__}: {error}"
        say(f"{name}: FAILED with {result.error}")
    return result
