"""The Python client for agent services and operators.

``submit`` commits the step first and publishes after (R2); every other call goes
through the store's guarded transitions and then publishes what the Decision asks for.
Views carry only what the model may see (``toolsafe.tasks.views``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from kombu.exceptions import OperationalError as KombuOperationalError

from toolsafe.adapters.errors import ToolsafeError
from toolsafe.adapters.protocol import FieldError
from toolsafe.recovery.outcomes import TransitionRefused
from toolsafe.recovery.states import StepState
from toolsafe.recovery.store import Recorded, StepRecord
from toolsafe.settings import Settings
from toolsafe.tasks import pipeline
from toolsafe.tasks.app import ToolsafeApp, create_app, default_app
from toolsafe.tasks.runtime import utcnow
from toolsafe.tasks.views import NEEDS_AGENT, StepView, build_view

log = logging.getLogger("toolsafe.client")


class InvalidInput(ToolsafeError, ValueError):
    """The input fails the adapter's validation; nothing was stored or sent."""

    def __init__(self, tool: str, errors: tuple[tuple[str, str], ...]) -> None:
        super().__init__(tool, errors)
        self.tool = tool
        self.errors = errors

    def __str__(self) -> str:
        shown = ", ".join(f"{field} ({code})" for field, code in self.errors)
        return f"invalid input for {self.tool}: {shown}"


class WaitTimeout(ToolsafeError, TimeoutError):
    """The step did not reach a state that needs the agent in time."""

    def __init__(self, operation_ref: str, state: str, timeout: float) -> None:
        super().__init__(operation_ref, state, timeout)
        self.operation_ref = operation_ref
        self.state = state
        self.timeout = timeout

    def __str__(self) -> str:
        return (
            f"step {self.operation_ref} is still {self.state} after {self.timeout:g}s; "
            "call wait() again or view() it"
        )


class Submission(NamedTuple):
    """A submitted step's view, and whether this call created it (False: a repeat)."""

    view: StepView
    created: bool


def _errors(found: list[FieldError]) -> tuple[tuple[str, str], ...]:
    return tuple((error.field, error.code) for error in found)


class Client:
    """Submit tool calls and follow them; operators approve, reject, resolve, re-drive."""

    def __init__(self, app: ToolsafeApp | None = None) -> None:
        self.app = app if app is not None else default_app()
        self.runtime = self.app.runtime

    def close(self) -> None:
        """Release the database and broker connections this client opened."""
        self.runtime.close()
        self.app.close()

    @classmethod
    def from_settings(cls, settings: Settings) -> Client:
        return cls(create_app(settings))

    # ------------------------------------------------------------------ agent service

    def submit(
        self, tool: str, input: Mapping[str, Any], operation_ref: str | None = None
    ) -> StepView:
        """Commit the step, then publish it; the same operation_ref returns the same step.

        Raises ``UnknownToolError``, ``InvalidInput`` or ``OperationRefConflict``.
        """
        return self.submit_call(tool, input, operation_ref).view

    def submit_call(
        self,
        tool: str,
        input: Mapping[str, Any],
        operation_ref: str | None = None,
        *,
        actor: str | None = None,
    ) -> Submission:
        """``submit``, also saying whether the step is new; ``actor`` (who submits, e.g.
        a gateway key) is recorded in the ``submitted`` event.

        Once the step is committed the call is acknowledged: a broker that refuses the
        hint is logged, and the sweeper publishes it after ``republish_after`` (R2, R7).
        """
        runtime = self.runtime
        adapter = runtime.adapter(tool)
        problems = adapter.validate(input)
        if problems:
            raise InvalidInput(tool, _errors(problems))
        now = utcnow()
        # One transaction (R2): the step, its ``submitted`` event, and the stamp of the
        # hint published right after. Should that publish be lost, the sweeper
        # re-publishes once ``republish_after`` has passed since the stamp (R7).
        submitted = runtime.store.submit(
            tool,
            input,
            operation_ref=operation_ref,
            policy=runtime.policy_for(tool),
            now=now,
            published_at=now,
            actor=actor,
        )
        step = submitted.step
        runtime.faults.hit("after_submit_commit", step.operation_ref)
        if submitted.event is not None:
            self._publish_after_commit(step.operation_ref, now)
            # Nothing happened to a new step yet: its only event is the one just written.
            return Submission(build_view(step, (submitted.event,)), True)
        # An earlier submitter committed but may have died before publishing.
        if (
            step.state is StepState.PENDING
            and self._unpublished(step, now)
            and self._publish_after_commit(step.operation_ref, now)
        ):
            runtime.store.mark_published(step.operation_ref, utcnow())
        return Submission(self.view(step.operation_ref), False)

    def _publish_after_commit(self, operation_ref: str, now: datetime) -> bool:
        try:
            self.app.publisher.execute(operation_ref, None, now)
        except (KombuOperationalError, OSError) as error:
            log.warning(
                "step committed, hint not published (the sweeper will): %s",
                type(error).__name__,
                extra={"event": "publish_deferred", "operation_ref": operation_ref},
            )
            return False
        return True

    def _unpublished(self, step: StepRecord, now: datetime) -> bool:
        """No hint, or none recent enough to trust, was published for the step."""
        if step.published_at is None:
            return True
        waited = timedelta(seconds=self.runtime.settings.republish_after)
        return step.published_at <= now - waited

    def view(self, operation_ref: str) -> StepView:
        store = self.runtime.store
        return build_view(store.get(operation_ref), store.events(operation_ref))

    def state(self, operation_ref: str) -> StepRecord:
        """The stored step (for operators' tools; agents use ``view``)."""
        return self.runtime.store.get(operation_ref)

    def wait(self, operation_ref: str, timeout: float = 30.0, poll: float = 0.05) -> StepView:
        """Until the step needs the agent (input, approval) or is terminal.

        Woken by the process's change feed (``recovery/store/feed.py``): LISTEN/NOTIFY
        on PostgreSQL, one shared poller on SQLite; the step is read once at the start
        and once per change, never in a loop of its own. ``poll`` is accepted for
        compatibility and unused.
        """
        deadline = time.monotonic() + timeout
        store = self.runtime.store
        with self.runtime.feed.subscribe(operation_ref) as changes:
            while True:
                step = store.get(operation_ref)
                if step.state in NEEDS_AGENT:
                    return self.view(operation_ref)
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise WaitTimeout(operation_ref, str(step.state), timeout)
                changes.wait(remaining)

    def provide_input(
        self, operation_ref: str, new_input: Mapping[str, Any], *, actor: str | None = None
    ) -> StepView:
        """Corrected input for a step in ``needs_input``, under the same operation_ref.

        Raises ``TransitionRefused`` for identical input, an unchanged flagged field
        or input that fails validation.
        """
        runtime = self.runtime
        step = runtime.store.get(operation_ref)
        adapter = runtime.adapter(step.tool)
        recorded = runtime.store.provide_input(
            operation_ref,
            new_input,
            validate=adapter.validate,
            traits=runtime.traits_for(step.tool),
            policy=runtime.policy_for(step.tool),
            now=utcnow(),
            actor=actor,
        )
        return self._after(recorded)

    def cancel(self, operation_ref: str, reason: str, by: str = "agent") -> StepView:
        step = self.runtime.store.get(operation_ref)
        recorded = self.runtime.store.cancel(
            operation_ref, by=by, reason=reason, now=utcnow(), **self._rules(step)
        )
        return self._after(recorded)

    # ------------------------------------------------------------------ operators

    def approve(self, operation_ref: str, approver: str, reason: str) -> StepView:
        step = self.runtime.store.get(operation_ref)
        recorded = self.runtime.store.approve(
            operation_ref,
            approver=approver,
            reason=reason,
            input_hash=step.input_hash,
            now=utcnow(),
            **self._rules(step),
        )
        return self._after(recorded)

    def reject(self, operation_ref: str, approver: str, reason: str) -> StepView:
        step = self.runtime.store.get(operation_ref)
        recorded = self.runtime.store.reject(
            operation_ref, approver=approver, reason=reason, now=utcnow(), **self._rules(step)
        )
        return self._after(recorded)

    def resolve(
        self, operation_ref: str, to: StepState | str, operator: str, reason: str
    ) -> StepView:
        """Close an escalated step as succeeded or failed, with a recorded reason."""
        target = StepState(to)
        if target not in (StepState.SUCCEEDED, StepState.FAILED):
            raise TransitionRefused(
                "BAD_RESOLUTION", f"resolve to succeeded or failed, not {target}; use redrive"
            )
        return self._resolve(operation_ref, target, operator, reason)

    def redrive(self, operation_ref: str, operator: str, reason: str) -> StepView:
        """Send an escalated step back to ``pending`` (same operation_ref)."""
        return self._resolve(operation_ref, StepState.PENDING, operator, reason)

    def list(self, states: list[StepState] | None = None, limit: int = 100) -> list[StepView]:
        return [build_view(step) for step in self.runtime.store.list_steps(states, limit)]

    # ------------------------------------------------------------------ helpers

    def _resolve(self, operation_ref: str, to: StepState, operator: str, reason: str) -> StepView:
        if not reason.strip():
            raise TransitionRefused("REASON_REQUIRED", "an operator resolution needs a reason")
        step = self.runtime.store.get(operation_ref)
        recorded = self.runtime.store.resolve(
            operation_ref,
            operator=operator,
            reason=reason,
            to=to,
            now=utcnow(),
            **self._rules(step),
        )
        return self._after(recorded)

    def _rules(self, step: StepRecord) -> dict[str, Any]:
        return {
            "traits": self.runtime.traits_for(step.tool),
            "policy": self.runtime.policy_for(step.tool),
        }

    def _after(self, recorded: Recorded) -> StepView:
        ref = recorded.step.operation_ref
        try:
            pipeline.carry_out(self.runtime, self.app.publisher, recorded, utcnow(), inject=False)
        except (KombuOperationalError, OSError) as error:
            # The change is committed: that is the answer. The sweeper publishes the due
            # work whose hint did not go out (R7).
            log.warning(
                "action committed, hint not published (the sweeper will): %s",
                type(error).__name__,
                extra={"event": "publish_deferred", "operation_ref": ref},
            )
        return self.view(ref)
