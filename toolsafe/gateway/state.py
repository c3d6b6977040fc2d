"""What every route of one gateway shares: the clients, the settings, the keys, and
the count of requests holding a wait."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from fastapi import Request

from toolsafe.gateway.auth import Authenticator
from toolsafe.gateway.problems import ApiProblem
from toolsafe.settings import Settings
from toolsafe.tasks.async_client import AsyncClient
from toolsafe.tasks.client import Client


@dataclass
class Gateway:
    settings: Settings
    client: Client
    authenticator: Authenticator
    waits: int = 0
    aclient: AsyncClient = field(init=False)

    def __post_init__(self) -> None:
        self.aclient = AsyncClient(self.client)

    def wait_for(self, requested: float) -> float:
        """The wait a request may hold: at most ``TOOLSAFE_GATEWAY_MAX_WAIT``."""
        return min(requested, self.settings.gateway_max_wait)

    def enter_wait(self) -> None:
        """Count a held wait (or event stream); 429 beyond ``TOOLSAFE_GATEWAY_MAX_WAITS``.

        Only the event loop's thread touches the count, so it needs no lock.
        """
        if self.waits >= self.settings.gateway_max_waits:
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
        if self.waits >= self.settings.gateway_max_waits:
            yield False
            return
        self.waits += 1
        try:
            yield True
        finally:
            self.leave_wait()


def gateway(request: Request) -> Gateway:
    found: Gateway = request.app.state.gateway
    return found
