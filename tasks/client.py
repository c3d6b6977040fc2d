"""The Python client for agent services and operators.

``submit`` commits the step first and publishes after (R2); every other call goes
through the store's guarded transitions and then publishes what the Decision asks for.
Views carry only what the model may see (``toolsafe.tasks.views``).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from kombu.exceptions import BatchPublishError
from kombu.exceptions import OperationalError as KombuOperationalError

from toolsafe import tracing
from toolsafe.adapters.catalogue import Catalogue
from toolsafe.adapters.errors import InvalidInput as InvalidInput
from toolsafe.adapters.errors import ToolsafeError
from toolsafe.recovery import reasons as R
from toolsafe.recovery.outcomes import TransitionRefused
from toolsafe.recovery.records import NewStep
from toolsafe.recovery.states import NEEDS_AGENT, RESOLUTION_TARGETS, StepState
from toolsafe.recovery.states import TERMINAL as TERMINAL_STATES
from toolsafe.recovery.store import Recorded, StepRecord, Submitted
from toolsafe.recovery.store.submission import in_batch
from toolsafe.settings import Settings
from toolsafe.tasks import pipeline
from toolsafe.tasks.app import Publisher, ToolsafeApp, create_app, default_app
from toolsafe.tasks.new_step import canonical_input, check_shape, new_step, sealed
from toolsafe.tasks.pipeline import Hints
from toolsafe.tasks.runtime import Runtime
from toolsafe.tasks.submit_group import SubmitGroup
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


class ToolCall(NamedTuple):
    """One call of a batch for :meth:`Client.submit_many` (a plain 2- or 3-tuple works)."""

    tool: str
    input: Mapping[str, Any]
    operation_ref: str | None = None


CallSpec = ToolCall | tuple[str, Mapping[str, Any]] | tuple[str, Mapping[str, Any], str | None]
"""A call of a batch: a ``ToolCall`` or a (tool, input[, operation_ref]) tuple."""


class Submission(NamedTuple):
    """A submitted step's view, and whether this call created it (False: a repeat)."""

    view: StepView
    created: bool


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
        window = runtime.settings.store.submit_window
        self._group = SubmitGroup(window, self._commit_group) if window > 0 else None
        # The trace context of each call waiting in the group (by id of its NewStep).
        self._carried: dict[int, dict[str, str]] = {}

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
            return self._submit_call(tool, input, operation_ref, actor)
        attributes = {"gen_ai.tool.name": tracing.tool_name(tool), "gen_ai.tool.call.id": None}
        with tracing.span("toolsafe.submit", attributes, kind="producer") as traced:
            submission = self._submit_call(tool, input, operation_ref, actor)
            view = submission.view
            traced.set_many(
                {
                    "gen_ai.tool.call.id": view.operation_ref,
                    "toolsafe.step.state": str(view.state),
                    "toolsafe.created": submission.created,
                }
            )
            return submission

    def _submit_call(
        self, tool: str, input: Mapping[str, Any], operation_ref: str | None, actor: str | None
    ) -> Submission:
        call = new_step(self.runtime, tool, input, operation_ref)
        group = self._group
        if group is None:
            return self._submit_alone(call, actor)
        with group.entered() as others:
            if not others:  # nobody else is submitting: no one to share a commit with
                return self._submit_alone(call, actor)
            # Committed (and its hint published) with the others, or None: that shared
            # transaction failed, nothing of it committed, and this call goes alone.
            # The leader publishes every hint: each carries its own submitter's trace.
            carried = tracing.headers()
            if carried:
                self._carried[id(call)] = carried
            try:
                shared = group.submit(call, actor)
            finally:
                self._carried.pop(id(call), None)
        if shared is None:
            return self._submit_alone(call, actor)
        if shared.event is not None:
            return Submission(build_view(shared.step, (shared.event,)), True)
        return self._repeated(shared.step, self.runtime.now())

    def _commit_group(self, calls: Sequence[NewStep], actor: str | None) -> list[Submitted]:
        """The shared transaction of concurrent submits (``SubmitGroup``'s leader runs
        it): ``submit_many``'s one commit, then the new steps' hints in one batch."""
        runtime = self.runtime
        now = self.runtime.now()
        submitted = runtime.store.submit_many(calls, now=now, published_at=now, actor=actor)
        for one in submitted:
            runtime.faults.hit("after_submit_commit", one.step.operation_ref)
        created = [(call, one) for call, one in zip(calls, submitted, strict=True) if one.created]
        carried = (
            [self._carried.get(id(call), {}) for call, _ in created] if self._carried else None
        )
        self._publish_many(
            [(one.step.operation_ref, one.step.tool) for _, one in created], now, carried
        )
        return submitted

    def _submit_alone(self, call: NewStep, actor: str | None) -> Submission:
        runtime = self.runtime
        tool, operation_ref = call.tool, call.operation_ref
        now = self.runtime.now()
        # One transaction (R2): the step, its ``submitted`` event, and the stamp of the
        # hint published right after. Should that publish be lost, the sweeper
        # re-publishes once ``republish_after`` has passed since the stamp (R7).
        submitted = runtime.store.submit(
            tool,
            call.input,
            operation_ref=operation_ref,
            policy=call.policy,
            now=now,
            published_at=now,
            digest=call.digest,
            equivalent_hashes=call.equivalent_hashes,
            same_input=call.same_input,
            actor=actor,
        )
        step = submitted.step
        runtime.faults.hit("after_submit_commit", step.operation_ref)
        if submitted.event is not None:
            self._publish_after_commit(step.operation_ref, now, step.tool)
            # Nothing happened to a new step yet: its only event is the one just written.
            return Submission(build_view(step, (submitted.event,)), True)
        return self._repeated(step, now)

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
        runtime = self.runtime
        prepared: list[NewStep] = []
        for index, (tool, input, *rest) in enumerate(calls):
            operation_ref = rest[0] if rest else None
            try:
                prepared.append(new_step(self.runtime, tool, input, operation_ref))
            except ToolsafeError as error:
                in_batch(error, index)
                raise
        now = self.runtime.now()
        submitted = runtime.store.submit_many(prepared, now=now, published_at=now, actor=actor)
        for one in submitted:
            runtime.faults.hit("after_submit_commit", one.step.operation_ref)
        self._publish_many(
            [(one.step.operation_ref, one.step.tool) for one in submitted if one.created], now
        )
        return [
            Submission(build_view(one.step, (one.event,)), True)
            if one.event is not None
            else self._repeated(one.step, now)
            for one in submitted
        ]

    def _repeated(self, step: StepRecord, now: datetime) -> Submission:
        """A repeat of a stored step: an earlier submitter committed it but may have died
        before publishing, so an unpublished pending step is published now."""
        if (
            step.state is StepState.PENDING
            and self._unpublished(step, now)
            and self._publish_after_commit(step.operation_ref, now, step.tool)
        ):
            self.runtime.store.mark_published(step.operation_ref, self.runtime.now())
        return Submission(self.view(step.operation_ref), False)

    def _publish_many(
        self,
        steps: Sequence[tuple[str, str]],
        now: datetime,
        carried: Sequence[Mapping[str, str]] | None = None,
    ) -> None:
        """The hints of steps just committed (operation_ref, tool); one producer for all
        through the Celery publisher. A broker that refuses leaves the rest to the sweeper
        (R7). ``carried``: each step's trace context, when its submitter is not this
        thread (a group commit's)."""
        if not steps:
            return
        if not isinstance(self.hints, Publisher):
            for ref, tool in steps:
                self._publish_after_commit(ref, now, tool)
            return
        try:
            self.hints.execute_many(steps, carried)
        except (KombuOperationalError, BatchPublishError, OSError) as error:
            log.warning(
                "steps committed, hints not all published (the sweeper will): %s",
                type(error).__name__,
                extra={"event": "publish_deferred", "operation_ref": steps[0][0]},
            )

    def _publish_after_commit(self, operation_ref: str, now: datetime, tool: str) -> bool:
        try:
            # False: the publisher left it to the sweeper (the CLI's, when the broker is down).
            return self.hints.execute(operation_ref, None, now, tool=tool)
        except (KombuOperationalError, OSError) as error:
            log.warning(
                "step committed, hint not published (the sweeper will): %s",
                type(error).__name__,
                extra={"event": "publish_deferred", "operation_ref": operation_ref},
            )
            return False

    def _unpublished(self, step: StepRecord, now: datetime) -> bool:
        """No hint, or none recent enough to trust, was published for the step."""
        if step.published_at is None:
            return True
        waited = timedelta(seconds=self.runtime.settings.sweep.republish_after)
        return step.published_at <= now - waited

    def view(self, operation_ref: str) -> StepView:
        store = self.runtime.store
        return build_view(store.get(operation_ref), store.events(operation_ref))

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
        ref = recorded.step.operation_ref
        try:
            pipeline.carry_out(self.runtime, self.hints, recorded, self.runtime.now(), inject=False)
        except (KombuOperationalError, OSError) as error:
            # The change is committed: that is the answer. The sweeper publishes the due
            # work whose hint did not go out (R7).
            log.warning(
                "action committed, hint not published (the sweeper will): %s",
                type(error).__name__,
                extra={"event": "publish_deferred", "operation_ref": ref},
            )
        return self.view(ref)
