"""What every route of one gateway shares: the clients, the settings, the keys, and
the count of requests holding a wait.

``views`` is the client the view route reads with: while the app runs on a store with
the ``loop_reads`` feature (PostgreSQL), one whose reads are awaited on the event loop,
their connections closed when the app stops; otherwise ``aclient``, which reads in a
worker thread (SQLite, the memory store, any other backend)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Final

from fastapi import Request

from toolsafe.gateway.auth import Authenticator
from toolsafe.gateway.problems import ApiProblem
from toolsafe.recovery.store import FeatureMissing
from toolsafe.recovery.store.workers import WorkerBeat, WorkersPort
from toolsafe.settings import Settings
from toolsafe.tasks.async_client import AsyncClient
from toolsafe.tasks.client import Client

LIVENESS_SECONDS: Final = 1.0
"""How long the gateway reuses its reading of the workers' heartbeats."""


@dataclass
class Gateway:
    settings: Settings
    client: Client
    authenticator: Authenticator
    waits: int = 0
    aclient: AsyncClient = field(init=False)
    views: AsyncClient = field(init=False)
    workers: WorkersPort | None = field(init=False)
    _live: tuple[float, list[WorkerBeat]] | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self.aclient = AsyncClient(self.client)
        self.views = self.aclient
        backend = self.client.runtime.backend
        # A store without the workers feature cannot tell whether a worker consumes (None).
        self.workers = backend.workers if backend.has("workers") else None

    @contextlib.asynccontextmanager
    async def reading_on_the_loop(self) -> AsyncIterator[None]:
        """While the app runs (its lifespan): the views read on this event loop when
        the store allows it (``views``), their connections closed at the end."""
        backend = self.client.runtime.backend
        try:
            reads = backend.loop_reads() if backend.has("loop_reads") else None
        except FeatureMissing:  # this SQLAlchemy cannot compile the statements once
            reads = None
        if reads is None:
            yield
            return
        self.views = AsyncClient(self.client, reads=reads)
        try:
            yield
        finally:
            self.views = self.aclient
            await reads.aclose()

    def live_workers(self) -> list[WorkerBeat] | None:
        """The workers whose heartbeat is younger than a lease; ``None`` when the store
        keeps no heartbeats. Read at most once per :data:`LIVENESS_SECONDS` (a busy
        gateway's waits share one query)."""
        if self.workers is None:
            return None
        now = time.monotonic()
        if self._live is None or now - self._live[0] >= LIVENESS_SECONDS:
            self._live = (
                now,
                self.workers.live(self.client.runtime.now(), self.settings.calls.lease),
            )
        return self._live[1]

    async def alive_workers(self) -> list[WorkerBeat] | None:
        """:meth:`live_workers` from the event loop: a reading younger than
        :data:`LIVENESS_SECONDS` is answered here, only a new one costs a thread."""
        if self.workers is None:
            return None
        live = self._live
        if live is not None and time.monotonic() - live[0] < LIVENESS_SECONDS:
            return live[1]
        return await asyncio.to_thread(self.live_workers)

    def wait_for(self, requested: float) -> float:
        """The wait a request may hold: at most ``TOOLSAFE_GATEWAY_MAX_WAIT``."""
        return min(requested, self.settings.gateway.max_wait)

    def enter_wait(self) -> None:
        """Count a held wait (or event stream); 429 beyond ``TOOLSAFE_GATEWAY_MAX_WAITS``.

        Only the event loop's thread touches the count, so it needs no lock.
        """
        if self.waits >= self.settings.gateway.max_waits:
            raise ApiProblem(
                "TOO_MANY_WAITS",
                f"{self.waits} requests are waiting already "
                f"(TOOLSAFE_GATEWAY_MAX_WAITS); retry later or without ?wait",
                headers={"Retry-After": "1"},
            )
        self.waits += 1

    def leave_wait(self) -> None:
        self.waits -= 1

    @contextlib.asynccontextmanager
    async def waiting(self) -> AsyncIterator[None]:
        self.enter_wait()
        try:
            yield
        finally:
            self.leave_wait()

    @contextlib.asynccontextmanager
    async def wait_slot(self) -> AsyncIterator[bool]:
        """A wait held by an MCP ``tools/call`` on ``/mcp``, counted with the rest: True
        while it holds one, False when none is left (the call then answers at once, in
        progress, where ``/v1`` would answer 429: its step is already submitted)."""
        if self.waits >= self.settings.gateway.max_waits:
            yield False
            return
        self.waits += 1
        try:
            yield True
        finally:
            self.leave_wait()


async def gateway(request: Request) -> Gateway:
    """The gateway's shared state (async: a sync dependency would cost a thread hop)."""
    found: Gateway = request.app.state.gateway
    return found
