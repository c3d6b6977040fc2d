"""The client's submissions: each call checked (``new_step``), committed alone, with
concurrent callers (``SubmitGroup``) or as a batch, and only then its hint published
(R2) — by this process, or with ``TOOLSAFE_SUBMIT_HINTS=relay`` by the workers' hint
relay (``tasks/relay.py``), the submit then being its commit alone; a repeat of a
stored operation_ref answered with the stored step.

``Client`` (``tasks/client.py``) owns one ``Submitter`` and adds the tracing span and
the public signatures.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from kombu.exceptions import BatchPublishError
from kombu.exceptions import OperationalError as KombuOperationalError

from toolsafe import tracing
from toolsafe.adapters.errors import ToolsafeError
from toolsafe.recovery.records import NewStep
from toolsafe.recovery.states import StepState
from toolsafe.recovery.store import StepRecord, StorePort, Submitted
from toolsafe.recovery.store.submission import in_batch
from toolsafe.tasks.app import Publisher
from toolsafe.tasks.follow_up import Hints
from toolsafe.tasks.new_step import new_step
from toolsafe.tasks.runtime import Runtime
from toolsafe.tasks.submit_group import SubmitGroup
from toolsafe.tasks.views import StepView, build_view

log = logging.getLogger("toolsafe.client")

# What a broker that refuses a hint raises; the step is committed, the sweeper re-sends.
_PUBLISH_ERRORS = (KombuOperationalError, BatchPublishError, OSError)


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


def current_view(store: StorePort, operation_ref: str) -> StepView:
    """The step's view as the store holds it now (``StepNotFound`` when there is none)."""
    return build_view(store.get(operation_ref), store.events(operation_ref))


class Submitter:
    """Commit first, publish after, for one client (thread-safe)."""

    def __init__(self, runtime: Runtime, hints: Hints) -> None:
        self.runtime = runtime
        self.hints = hints
        # TOOLSAFE_SUBMIT_HINTS=relay: a submit is its commit; the workers' relay
        # publishes the hint of every step stored unsent (tasks/relay.py).
        self.relayed = runtime.settings.store.relays_hints
        window = runtime.settings.store.submit_window
        self._group = SubmitGroup(window, self._commit_group) if window > 0 else None
        # The trace context of each call waiting in the group (by id of its NewStep).
        self._carried: dict[int, dict[str, str]] = {}

    def submit_call(
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
        submitted = runtime.store.submit_many(
            calls, now=now, published_at=self._stamp(now), actor=actor
        )
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
        # hint published right after (none with the relay, which publishes it). Should
        # that publish be lost, the sweeper re-publishes once ``republish_after`` has
        # passed since the stamp (R7).
        submitted = runtime.store.submit(
            tool,
            call.input,
            operation_ref=operation_ref,
            policy=call.policy,
            now=now,
            published_at=self._stamp(now),
            digest=call.digest,
            equivalent_hashes=call.equivalent_hashes,
            same_input=call.same_input,
            actor=actor,
        )
        step = submitted.step
        runtime.faults.hit("after_submit_commit", step.operation_ref)
        if submitted.event is not None:
            self._publish_new(step.operation_ref, now, step.tool)
            # Nothing happened to a new step yet: its only event is the one just written.
            return Submission(build_view(step, (submitted.event,)), True)
        return self._repeated(step, now)

    def submit_many(self, calls: Iterable[CallSpec], actor: str | None) -> list[Submission]:
        """``Client.submit_many``: every call checked, ONE transaction, one batch of hints."""
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
        submitted = runtime.store.submit_many(
            prepared, now=now, published_at=self._stamp(now), actor=actor
        )
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
        return Submission(current_view(self.runtime.store, step.operation_ref), False)

    def _stamp(self, now: datetime) -> datetime | None:
        """A new step's ``published_at``: ``now``, for the hint this process publishes
        right after the commit; None (unsent) when the relay publishes it."""
        return None if self.relayed else now

    def _publish_new(self, operation_ref: str, now: datetime, tool: str) -> None:
        """The hint of a step just committed, due now: through the Celery publisher as a
        batch of one (the message and its task-sent event in one round trip to Redis,
        where ``send_task`` makes two). A batch is sent once, without kombu's retries: if
        it fails, the hint goes again the plain way, with them (a hint that then arrives
        twice is harmless, R1). Nothing with the relay: it publishes the hint."""
        if self.relayed:
            return
        if isinstance(self.hints, Publisher):
            try:
                self.hints.execute_many([(operation_ref, tool)])
                return
            except _PUBLISH_ERRORS as error:
                log.info(
                    "hint batch failed, publishing again: %s",
                    type(error).__name__,
                    extra={"event": "publish_again", "operation_ref": operation_ref},
                )
        self._publish_after_commit(operation_ref, now, tool)

    def _publish_many(
        self,
        steps: Sequence[tuple[str, str]],
        now: datetime,
        carried: Sequence[Mapping[str, str]] | None = None,
    ) -> None:
        """The hints of steps just committed (operation_ref, tool); one producer for all
        through the Celery publisher. A broker that refuses leaves the rest to the sweeper
        (R7). ``carried``: each step's trace context, when its submitter is not this
        thread (a group commit's). Nothing with the relay: it publishes them."""
        if not steps or self.relayed:
            return
        if not isinstance(self.hints, Publisher):
            for ref, tool in steps:
                self._publish_after_commit(ref, now, tool)
            return
        try:
            self.hints.execute_many(steps, carried)
        except _PUBLISH_ERRORS as error:
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
        """No hint, or none recent enough to trust, was published for the step (an
        unsent one is the relay's to send, when it runs)."""
        if step.published_at is None:
            return not self.relayed
        waited = timedelta(seconds=self.runtime.settings.sweep.republish_after)
        return step.published_at <= now - waited
