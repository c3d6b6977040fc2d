"""``AsyncClient``: the in-process client for asyncio agent services.

A thin shell: each operation is the synchronous ``Client``'s, run in a worker thread
(:func:`threaded` makes the awaitable method from the sync one, signature and all);
only ``settle`` and ``wait`` are its own, awaiting the process's change feed without
holding a thread. Given ``reads`` (a step and its events awaitable on the event loop:
``recovery/store/sql/loop_reads.py`` on PostgreSQL), ``view`` and ``settle``'s looks
read there instead, without a thread hand-off; the same records, the same view.

Cancel-safe: cancelling an awaiting call never leaves a subscription behind, and a
cancelled ``submit`` either committed (then the same operation_ref returns that step) or
did not; nothing half-done remains.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable, Coroutine, Iterable
from typing import Any, Concatenate, ParamSpec, TypeVar

from toolsafe.adapters.catalogue import Catalogue
from toolsafe.recovery.records import StepRecord
from toolsafe.recovery.states import NEEDS_AGENT
from toolsafe.recovery.store.loop_reads import LoopReadsPort
from toolsafe.tasks.client import CallSpec, Client, Submission, WaitTimeout
from toolsafe.tasks.views import StepView, build_view

P = ParamSpec("P")
T = TypeVar("T")


def threaded(
    method: Callable[Concatenate[Client, P], T],
) -> Callable[Concatenate[AsyncClient, P], Coroutine[Any, Any, T]]:
    """``Client.method`` as an ``AsyncClient`` method that runs it in a worker thread."""

    @functools.wraps(method)
    async def call(self: AsyncClient, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return await asyncio.to_thread(method, self.client, *args, **kwargs)

    return call


class AsyncClient:
    """The operations of :class:`toolsafe.tasks.client.Client`, awaitable."""

    def __init__(self, client: Client | None = None, *, reads: LoopReadsPort | None = None) -> None:
        self.client = client if client is not None else Client()
        self.reads = reads

    def catalogue(self) -> Catalogue:
        """The registered tools (the registry is in process: nothing to await)."""
        return self.client.catalogue()

    close = threaded(Client.close)
    submit = threaded(Client.submit)
    submit_call = threaded(Client.submit_call)
    provide_input = threaded(Client.provide_input)
    cancel = threaded(Client.cancel)
    approve = threaded(Client.approve)
    reject = threaded(Client.reject)
    resolve = threaded(Client.resolve)
    request_cancel = threaded(Client.request_cancel)
    redrive = threaded(Client.redrive)

    async def view(self, operation_ref: str) -> StepView:
        """:meth:`Client.view`."""
        if self.reads is None:
            return await asyncio.to_thread(self.client.view, operation_ref)
        step = await self.reads.get(operation_ref)
        return build_view(step, await self.reads.events(operation_ref))

    async def submit_many(
        self, calls: Iterable[CallSpec], *, actor: str | None = None
    ) -> list[Submission]:
        """:meth:`Client.submit_many`: one transaction, one batch of hints."""
        return await asyncio.to_thread(self.client.submit_many, list(calls), actor=actor)

    async def settle(self, operation_ref: str, timeout: float) -> StepView:
        """The step's view once it needs the agent or is terminal, or as it is when
        ``timeout`` runs out (the gateway's ``?wait=``)."""
        deadline = time.monotonic() + timeout
        feed = self.client.runtime.feed
        with feed.subscribe(operation_ref) as changes:
            while True:
                view = await self._look(operation_ref, deadline)
                if view is not None:
                    return view
                await changes.wait_async(deadline - time.monotonic())

    async def _look(self, operation_ref: str, deadline: float) -> StepView | None:
        """:meth:`_settled` on the event loop when the reads can be awaited there, else
        in one thread hand-off (the step, and its view once it settled)."""
        if self.reads is None:
            return await asyncio.to_thread(self._settled, operation_ref, deadline)
        step = await self.reads.get(operation_ref)
        if _settled_by(step, deadline):
            return build_view(step, await self.reads.events(operation_ref))
        return None

    def _settled(self, operation_ref: str, deadline: float) -> StepView | None:
        """The step's view if it needs the agent or ``deadline`` passed, else None."""
        store = self.client.runtime.store
        step = store.get(operation_ref)
        if _settled_by(step, deadline):
            return build_view(step, store.events(operation_ref))
        return None

    async def wait(self, operation_ref: str, timeout: float = 30.0) -> StepView:
        """Until the step needs the agent (input, approval) or is terminal."""
        view = await self.settle(operation_ref, timeout)
        if not view.needs_agent:
            raise WaitTimeout(operation_ref, str(view.state), timeout)
        return view


def _settled_by(step: StepRecord, deadline: float) -> bool:
    """A ``settle`` ends: the step needs the agent (or is terminal), or time is up."""
    return step.state in NEEDS_AGENT or deadline - time.monotonic() <= 0
