"""``AsyncClient``: the in-process client for asyncio agent services.

Each operation runs the synchronous ``Client``'s in a worker thread; ``wait`` awaits the
process's change feed without holding a thread. Cancel-safe: cancelling an awaiting
call never leaves a subscription behind, and a cancelled ``submit`` either committed
(then the same operation_ref returns that step) or did not; nothing half-done remains.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from toolsafe.recovery.states import NEEDS_AGENT, StepState
from toolsafe.tasks.client import CallSpec, Client, Submission, WaitTimeout
from toolsafe.tasks.views import StepView

T = TypeVar("T")


class AsyncClient:
    """The operations of :class:`toolsafe.tasks.client.Client`, awaitable."""

    def __init__(self, client: Client | None = None) -> None:
        self.client = client if client is not None else Client()

    async def _run(self, call: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        return await asyncio.to_thread(functools.partial(call, *args, **kwargs))

    async def close(self) -> None:
        await self._run(self.client.close)

    async def submit(
        self, tool: str, input: Mapping[str, Any], operation_ref: str | None = None
    ) -> StepView:
        return await self._run(self.client.submit, tool, input, operation_ref)

    async def submit_call(
        self,
        tool: str,
        input: Mapping[str, Any],
        operation_ref: str | None = None,
        *,
        actor: str | None = None,
    ) -> Submission:
        return await self._run(self.client.submit_call, tool, input, operation_ref, actor=actor)

    async def submit_many(
        self,
        calls: Iterable[CallSpec],
        *,
        actor: str | None = None,
    ) -> list[Submission]:
        """:meth:`Client.submit_many`: one transaction, one batch of hints."""
        return await self._run(self.client.submit_many, list(calls), actor=actor)

    async def view(self, operation_ref: str) -> StepView:
        return await self._run(self.client.view, operation_ref)

    async def settle(self, operation_ref: str, timeout: float) -> StepView:
        """The step's view once it needs the agent or is terminal, or as it is when
        ``timeout`` runs out (the gateway's ``?wait=``)."""
        deadline = time.monotonic() + timeout
        store = self.client.runtime.store
        feed = self.client.runtime.feed
        with feed.subscribe(operation_ref) as changes:
            while True:
                step = await self._run(store.get, operation_ref)
                remaining = deadline - time.monotonic()
                if step.state in NEEDS_AGENT or remaining <= 0:
                    return await self.view(operation_ref)
                await changes.wait_async(remaining)

    async def wait(self, operation_ref: str, timeout: float = 30.0) -> StepView:
        """Until the step needs the agent (input, approval) or is terminal."""
        view = await self.settle(operation_ref, timeout)
        if not view.needs_agent:
            raise WaitTimeout(operation_ref, str(view.state), timeout)
        return view

    async def provide_input(
        self, operation_ref: str, new_input: Mapping[str, Any], *, actor: str | None = None
    ) -> StepView:
        return await self._run(self.client.provide_input, operation_ref, new_input, actor=actor)

    async def cancel(self, operation_ref: str, reason: str, by: str = "agent") -> StepView:
        return await self._run(self.client.cancel, operation_ref, reason, by=by)

    async def request_cancel(self, operation_ref: str, reason: str, by: str = "agent") -> StepView:
        return await self._run(self.client.request_cancel, operation_ref, reason, by=by)

    async def approve(self, operation_ref: str, approver: str, reason: str) -> StepView:
        return await self._run(self.client.approve, operation_ref, approver, reason)

    async def reject(self, operation_ref: str, approver: str, reason: str) -> StepView:
        return await self._run(self.client.reject, operation_ref, approver, reason)

    async def resolve(
        self,
        operation_ref: str,
        to: StepState | str,
        operator: str,
        reason: str,
        *,
        evidence: str | None = None,
        confirm_not_written: bool = False,
    ) -> StepView:
        return await self._run(
            self.client.resolve,
            operation_ref,
            to,
            operator,
            reason,
            evidence=evidence,
            confirm_not_written=confirm_not_written,
        )

    async def redrive(self, operation_ref: str, operator: str, reason: str) -> StepView:
        return await self._run(self.client.redrive, operation_ref, operator, reason)
