"""The Python client for agent services and operators.

``submit`` commits the step first and publishes after (R2); every other call goes
through the store's guarded transitions and then publishes what the Decision asks for.
Views carry only what the model may see (``toolsafe.tasks.views``).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterable, Mapping
from typing import Any

from kombu.exceptions import OperationalError as KombuOperationalError

from toolsafe import tracing
from toolsafe.adapters.catalogue import Catalogue
from toolsafe.adapters.errors import InvalidInput as InvalidInput
from toolsafe.adapters.errors import ToolsafeError
from toolsafe.recovery import reasons as R
from toolsafe.recovery.outcomes import TransitionRefused
from toolsafe.recovery.states import NEEDS_AGENT, RESOLUTION_TARGETS, StepState
from toolsafe.recovery.states import TERMINAL as TERMINAL_STATES
from toolsafe.recovery.store import Recorded, StepRecord
from toolsafe.settings import Settings
from toolsafe.tasks.app import ToolsafeApp, create_app, default_app
from toolsafe.tasks.follow_up import Hints, carry_out
from toolsafe.tasks.new_step import canonical_input, check_shape, sealed
from toolsafe.tasks.runtime import Runtime
from toolsafe.tasks.submitter import CallSpec as CallSpec
from toolsafe.tasks.submitter import Submission as Submission
from toolsafe.tasks.submitter import Submitter, current_view
from toolsafe.tasks.submitter import ToolCall as ToolCall
from toolsafe.tasks.views import StepView, build_view

log = logging.getLogger("toolsafe.client")


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


class Client:
    """Submit tool calls and follow them; operators approve, reject, resolve, re-drive.

    ``Client(app)`` publishes through the app's Celery publisher; ``Client(runtime=...,
    hints=...)`` runs the same logic over any store and any publisher, without an app
    (the unit tests give it the in-memory store and a publisher that records).
    """

    def __init__(
        self,
        app: ToolsafeApp | None = None,
        *,
        runtime: Runtime | None = None,
        hints: Hints | None = None,
    ) -> None:
        if runtime is not None or hints is not None:
            if app is not None or runtime is None or hints is None:
                raise TypeError("give either an app, or both a runtime and hints")
            self._app: ToolsafeApp | None = None
        else:
            self._app = app if app is not None else default_app()
            runtime, hints = self._app.runtime, self._app.publisher
        self.runtime: Runtime = runtime
        self.hints: Hints = hints
        self._submitter = Submitter(runtime, hints)

    @property
    def app(self) -> ToolsafeApp:
        """The Celery app this client publishes through."""
        if self._app is None:
            raise TypeError("this client was built from a runtime and hints, without an app")
        return self._app

    def close(self) -> None:
        """Release the database and broker connections this client opened."""
        self.runtime.close()
        if self._app is not None:
            self._app.close()

    @classmethod
    def from_settings(cls, settings: Settings) -> Client:
        return cls(create_app(settings))

    def catalogue(self) -> Catalogue:
        """The registered tools, with each one's attempt limit from its policy."""
        runtime = self.runtime
        return Catalogue.of(
            runtime.registry, lambda tool: runtime.policy_for(tool).retry.max_attempts
        )

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

        With tracing on, a ``toolsafe.submit`` span, whose context the hint carries.
        """
        if tracing.tracer() is None:
            return self._submitter.submit_call(tool, input, operation_ref, actor)
        attributes = {"gen_ai.tool.name": tracing.tool_name(tool), "gen_ai.tool.call.id": None}
        with tracing.span("toolsafe.submit", attributes, kind="producer") as traced:
            submission = self._submitter.submit_call(tool, input, operation_ref, actor)
            view = submission.view
            traced.set_many(
                {
                    "gen_ai.tool.call.id": view.operation_ref,
                    "toolsafe.step.state": str(view.state),
                    "toolsafe.created": submission.created,
                }
            )
            return submission

    def submit_many(
        self, calls: Iterable[CallSpec], *, actor: str | None = None
    ) -> list[Submission]:
        """Many ``submit_call``s at the cost of a few: every call checked as ``submit``
        checks it, then ONE transaction commits them all (each step with its
        ``submitted`` event), then their hints go out in one batch through one producer.

        The rules are ``submit``'s, call by call: the same operation_ref returns the
        stored step (``created`` False), also when an earlier call of the batch made it;
        another tool or input under it raises ``OperationRefConflict``. A refused call
        (``UnknownToolError``, ``InvalidInput``, ``InvalidOperationRef``, a conflict)
        raises with a note naming it, and then nothing of the batch is committed.
        """
        return self._submitter.submit_many(calls, actor)

    def view(self, operation_ref: str) -> StepView:
        return current_view(self.runtime.store, operation_ref)

    def settle(self, operation_ref: str, timeout: float) -> StepView:
        """The view once the step needs the agent (input, approval) or is terminal, or
        as it is when ``timeout`` runs out.

        Woken by the process's change feed (``recovery/store/feed.py``): LISTEN/NOTIFY
        on PostgreSQL, one shared poller on SQLite; the step is read once at the start
        and once per change, never in a loop of its own.
        """
        deadline = time.monotonic() + timeout
        store = self.runtime.store
        with self.runtime.feed.subscribe(operation_ref) as changes:
            while True:
                step = store.get(operation_ref)
                remaining = deadline - time.monotonic()
                if step.state in NEEDS_AGENT or remaining <= 0:
                    return self.view(operation_ref)
                changes.wait(remaining)

    def wait(self, operation_ref: str, timeout: float = 30.0, poll: float = 0.05) -> StepView:
        """Until the step needs the agent (input, approval) or is terminal, else
        ``WaitTimeout``; ``settle`` without the exception. ``poll`` is accepted for
        compatibility and unused."""
        view = self.settle(operation_ref, timeout)
        if not view.needs_agent:
            raise WaitTimeout(operation_ref, str(view.state), timeout)
        return view

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
        check_shape(runtime, step.tool, new_input)
        corrected = dict(new_input)
        if not adapter.validate(new_input):
            corrected = canonical_input(runtime, step.tool, adapter, new_input)
        stored, hashes = sealed(runtime, step.tool, adapter, corrected)
        recorded = runtime.store.provide_input(
            operation_ref,
            corrected,
            stored=stored,
            digest=hashes[0],
            open_stored=runtime.open_input,
            validate=adapter.validate,
            traits=runtime.traits_for(step.tool),
            policy=runtime.policy_for(step.tool),
            now=self.runtime.now(),
            actor=actor,
        )
        return self._after(recorded)

    def cancel(self, operation_ref: str, reason: str, by: str | None = None) -> StepView:
        """Cancel a waiting step; ``by`` (who asks) defaults to ``"agent"``."""
        step = self.runtime.store.get(operation_ref)
        recorded = self.runtime.store.cancel(
            operation_ref,
            by=by or "agent",
            reason=reason,
            now=self.runtime.now(),
            **self._rules(step),
        )
        return self._after(recorded)

    def request_cancel(self, operation_ref: str, reason: str, by: str | None = None) -> StepView:
        """Cancel the step if it can be cancelled now; else record the request (a running
        step, or one whose outcome is unknown), which takes effect once the step waits
        with nothing written, never turning a write that happened into "cancelled".
        A step already over is left as it is. The step's view either way."""
        try:
            return self.cancel(operation_ref, reason, by=by)
        except TransitionRefused:
            step = self.runtime.store.get(operation_ref)
            if step.state in TERMINAL_STATES:
                return self.view(operation_ref)
        self.runtime.store.request_cancel(
            operation_ref, by=by or "agent", reason=reason, now=self.runtime.now()
        )
        # The worker may have recorded its outcome between the refusal and the request
        # (and so not seen it): the request applies to a step that waits now, too.
        with contextlib.suppress(TransitionRefused):
            return self.cancel(operation_ref, reason, by=by)
        return self.view(operation_ref)

    # ------------------------------------------------------------------ operators

    def approve(self, operation_ref: str, approver: str, reason: str) -> StepView:
        step = self.runtime.store.get(operation_ref)
        recorded = self.runtime.store.approve(
            operation_ref,
            approver=approver,
            reason=reason,
            input_hash=step.input_hash,
            now=self.runtime.now(),
            **self._rules(step),
        )
        return self._after(recorded)

    def reject(self, operation_ref: str, approver: str, reason: str) -> StepView:
        step = self.runtime.store.get(operation_ref)
        recorded = self.runtime.store.reject(
            operation_ref,
            approver=approver,
            reason=reason,
            now=self.runtime.now(),
            **self._rules(step),
        )
        return self._after(recorded)

    def resolve(
        self,
        operation_ref: str,
        to: StepState | str,
        operator: str,
        reason: str,
        *,
        evidence: str | None = None,
        confirm_not_written: bool = False,
    ) -> StepView:
        """Close an escalated step as succeeded or failed, with a recorded reason.

        To ``succeeded`` only with ``evidence`` (the downstream reference the operator
        checked, at most ``MAX_EVIDENCE`` characters); to ``failed``, when the write may
        have happened, only with ``confirm_not_written=True``. Both are recorded; the
        view then says the step was resolved by an operator, never that it was verified.
        """
        target = StepState(to)
        if target not in RESOLUTION_TARGETS:
            raise TransitionRefused(
                R.INVALID_RESOLUTION, f"resolve to succeeded or failed, not {target}; use redrive"
            )
        return self._resolve(
            operation_ref,
            target,
            operator,
            reason,
            evidence=evidence,
            confirm_not_written=confirm_not_written,
        )

    def redrive(self, operation_ref: str, operator: str, reason: str) -> StepView:
        """Send an escalated step back to ``pending`` (same operation_ref)."""
        return self._resolve(operation_ref, StepState.PENDING, operator, reason)

    def list(self, states: list[StepState] | None = None, limit: int = 100) -> list[StepView]:
        return [build_view(step) for step in self.runtime.store.list_steps(states, limit)]

    # ------------------------------------------------------------------ helpers

    def _resolve(
        self,
        operation_ref: str,
        to: StepState,
        operator: str,
        reason: str,
        *,
        evidence: str | None = None,
        confirm_not_written: bool = False,
    ) -> StepView:
        if not reason.strip():
            raise TransitionRefused(R.REASON_REQUIRED, "an operator resolution needs a reason")
        step = self.runtime.store.get(operation_ref)
        recorded = self.runtime.store.resolve(
            operation_ref,
            operator=operator,
            reason=reason,
            to=to,
            now=self.runtime.now(),
            evidence=evidence,
            confirm_not_written=confirm_not_written,
            **self._rules(step),
        )
        return self._after(recorded)

    def _rules(self, step: StepRecord) -> dict[str, Any]:
        return {
            "traits": self.runtime.traits_for(step.tool),
            "policy": self.runtime.policy_for(step.tool),
        }

    def _after(self, recorded: Recorded) -> StepView:
        """The step as the action left it, then its hint published. Read before the
        publish: after it, a worker may already have run the step, and the answer would
        show that call's outcome instead of what the action did."""
        ref = recorded.step.operation_ref
        done = self.view(ref)
        try:
            carry_out(self.runtime, self.hints, recorded, self.runtime.now(), inject=False)
        except (KombuOperationalError, OSError) as error:
            # The change is committed: that is the answer. The sweeper publishes the due
            # work whose hint did not go out (R7).
            log.warning(
                "action committed, hint not published (the sweeper will): %s",
                type(error).__name__,
                extra={"event": "publish_deferred", "operation_ref": ref},
            )
        return done
