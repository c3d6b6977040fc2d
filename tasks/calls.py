"""The client contract: what every toolsafe client offers an agent service and an
operator, in process or over the gateway.

``Calls`` is satisfied by ``Client`` and ``GatewayClient``, ``AsyncCalls`` by
``AsyncClient`` and ``AsyncGatewayClient``. Code written against them (the agent-SDK
integrations, the MCP server, ``toolsafe.agents``) runs with any of the four, so an agent
service that holds only a gateway key uses them as one holding the store and the broker
does. Every method raises the same exceptions whichever client answers
(``UnknownToolError``, ``InvalidInput``, ``OperationRefConflict``, ``StepNotFound``,
``TransitionRefused``, ``WaitTimeout``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from toolsafe.adapters.catalogue import Catalogue
    from toolsafe.recovery.states import StepState
    from toolsafe.tasks.client import Submission
    from toolsafe.tasks.views import StepView


@runtime_checkable
class Calls(Protocol):
    """The synchronous client contract."""

    def catalogue(self) -> Catalogue:
        """The registered tools (their names, descriptions and input schemas)."""
        ...

    def submit(
        self, tool: str, input: Mapping[str, Any], operation_ref: str | None = None
    ) -> StepView:
        """Commit the step, then publish it; the same operation_ref returns that step."""
        ...

    def submit_call(
        self,
        tool: str,
        input: Mapping[str, Any],
        operation_ref: str | None = None,
        *,
        actor: str | None = None,
    ) -> Submission:
        """``submit``, also saying whether this call created the step."""
        ...

    def view(self, operation_ref: str) -> StepView: ...

    def settle(self, operation_ref: str, timeout: float) -> StepView:
        """The view once the step needs the agent or is terminal, or as it is when
        ``timeout`` runs out (never raises for the time)."""
        ...

    def wait(self, operation_ref: str, timeout: float = 30.0) -> StepView:
        """Until the step needs the agent or is terminal, else ``WaitTimeout``."""
        ...

    def provide_input(
        self, operation_ref: str, new_input: Mapping[str, Any], *, actor: str | None = None
    ) -> StepView: ...

    def cancel(self, operation_ref: str, reason: str, by: str | None = None) -> StepView: ...

    def request_cancel(self, operation_ref: str, reason: str, by: str | None = None) -> StepView:
        """Cancel now if the step can be, else record the request: it takes effect once
        the step waits with nothing written (a write that happened stays a success)."""
        ...

    def approve(self, operation_ref: str, approver: str, reason: str) -> StepView: ...

    def reject(self, operation_ref: str, approver: str, reason: str) -> StepView: ...

    def resolve(
        self,
        operation_ref: str,
        to: StepState | str,
        operator: str,
        reason: str,
        *,
        evidence: str | None = None,
        confirm_not_written: bool = False,
    ) -> StepView: ...

    def redrive(self, operation_ref: str, operator: str, reason: str) -> StepView: ...

    def close(self) -> None: ...


@runtime_checkable
class AsyncCalls(Protocol):
    """The asyncio client contract: ``Calls``' operations, awaitable. ``catalogue`` is
    not: the in-process client reads its registry, the gateway client keeps the list
    it fetched (``await tools()`` fetches it without blocking the loop)."""

    def catalogue(self) -> Catalogue: ...

    async def submit(
        self, tool: str, input: Mapping[str, Any], operation_ref: str | None = None
    ) -> StepView: ...

    async def submit_call(
        self,
        tool: str,
        input: Mapping[str, Any],
        operation_ref: str | None = None,
        *,
        actor: str | None = None,
    ) -> Submission: ...

    async def view(self, operation_ref: str) -> StepView: ...

    async def settle(self, operation_ref: str, timeout: float) -> StepView: ...

    async def wait(self, operation_ref: str, timeout: float = 30.0) -> StepView: ...

    async def provide_input(
        self, operation_ref: str, new_input: Mapping[str, Any], *, actor: str | None = None
    ) -> StepView: ...

    async def cancel(self, operation_ref: str, reason: str, by: str | None = None) -> StepView: ...

    async def request_cancel(
        self, operation_ref: str, reason: str, by: str | None = None
    ) -> StepView: ...

    async def approve(self, operation_ref: str, approver: str, reason: str) -> StepView: ...

    async def reject(self, operation_ref: str, approver: str, reason: str) -> StepView: ...

    async def resolve(
        self,
        operation_ref: str,
        to: StepState | str,
        operator: str,
        reason: str,
        *,
        evidence: str | None = None,
        confirm_not_written: bool = False,
    ) -> StepView: ...

    async def redrive(self, operation_ref: str, operator: str, reason: str) -> StepView: ...

    async def close(self) -> None: ...
