"""Clients of the gateway over HTTP, for agent services that hold a key and no store or
broker credentials: ``GatewayClient`` (sync) and ``AsyncGatewayClient`` (asyncio).

They have the in-process ``Client``'s method names and raise its exceptions. Both are
thin shells over :class:`Calls`, which builds every request and maps every answer (a
view, or a problem back into the exception it stands for). Needs httpx, not FastAPI.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final
from urllib.parse import quote

import httpx

from toolsafe.adapters.errors import INPUT_CODES, ToolsafeError, UnknownToolError
from toolsafe.adapters.json_input import check_input
from toolsafe.gateway.models import CallView
from toolsafe.recovery.outcomes import TransitionRefused
from toolsafe.recovery.states import StepState
from toolsafe.recovery.store import InvalidOperationRef, OperationRefConflict, StepNotFound
from toolsafe.tasks.client import InvalidInput, WaitTimeout
from toolsafe.tasks.views import StepView

LONGEST_HOLD: Final = 30.0
"""The longest ``?wait=`` one request asks for; ``wait`` asks again until its timeout."""


class GatewayError(ToolsafeError):
    """The gateway refused in a way the in-process client has no exception for:
    ``status`` and ``code`` are the problem's (401, 403, 413, 429, 503, ...)."""

    def __init__(self, status: int, code: str, detail: str) -> None:
        super().__init__(status, code, detail)
        self.status = status
        self.code = code
        self.detail = detail

    def __str__(self) -> str:
        return f"{self.code} ({self.status}): {self.detail}"


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    json: Any = None
    params: Mapping[str, str] = field(default_factory=dict)
    headers: Mapping[str, str] = field(default_factory=dict)


def _path(operation_ref: str, action: str = "") -> str:
    return "/v1/calls/" + quote(operation_ref, safe="/:") + (f"/{action}" if action else "")


def raise_problem(response: httpx.Response) -> None:
    """The exception the in-process client would have raised for this problem."""
    try:
        body = response.json()
    except ValueError:
        body = {}
    if not isinstance(body, dict):
        body = {}
    code = str(body.get("code", "HTTP_" + str(response.status_code)))
    detail = str(body.get("detail", response.reason_phrase))
    ref = str(body.get("operation_ref", ""))
    if code in INPUT_CODES:
        errors = tuple(
            (str(item.get("field", "")), str(item.get("code", "")))
            for item in body.get("errors") or ()
            if isinstance(item, dict)
        )
        raise InvalidInput(str(body.get("tool", "")), errors, code)
    if code == "UNKNOWN_TOOL":
        raise UnknownToolError(str(body.get("tool", "")))
    if code == "STEP_NOT_FOUND":
        raise StepNotFound(ref)
    if code == "OPERATION_REF_CONFLICT":
        raise OperationRefConflict(ref, "tool" if "different tool" in detail else "input")
    if code == "INVALID_OPERATION_REF":
        raise InvalidOperationRef(detail)
    if response.status_code == 409:
        raise TransitionRefused(code, detail)
    raise GatewayError(response.status_code, code, detail)


class Calls:
    """Every operation as a :class:`Request`, and every answer as a ``StepView``."""

    def submit(self, tool: str, input: Mapping[str, Any], operation_ref: str | None) -> Request:
        check_input(tool, input)  # what the gateway would refuse, refused before sending
        headers = {"Idempotency-Key": operation_ref} if operation_ref is not None else {}
        return Request(
            "POST", f"/v1/tools/{quote(tool, safe='')}/calls", {"input": dict(input)}, {}, headers
        )

    def view(self, operation_ref: str, hold: float = 0.0) -> Request:
        params = {"wait": f"{hold:.3f}"} if hold > 0 else {}
        return Request("GET", _path(operation_ref), params=params)

    def provide_input(self, operation_ref: str, new_input: Mapping[str, Any]) -> Request:
        check_input("", new_input)
        return Request("POST", _path(operation_ref, "input"), {"input": dict(new_input)})

    def cancel(self, operation_ref: str, reason: str, by: str | None) -> Request:
        return Request("POST", _path(operation_ref, "cancel"), {"reason": reason, "by": by})

    def approval(self, action: str, operation_ref: str, approver: str, reason: str) -> Request:
        body = {"reason": reason, "approver": approver}
        return Request("POST", _path(operation_ref, action), body)

    def resolve(
        self,
        operation_ref: str,
        to: StepState | str,
        operator: str,
        reason: str,
        evidence: str | None = None,
        confirm_not_written: bool = False,
    ) -> Request:
        body: dict[str, Any] = {"to": str(StepState(to)), "reason": reason, "operator": operator}
        if evidence is not None:
            body["evidence"] = evidence
        if confirm_not_written:
            body["confirm_not_written"] = True
        return Request("POST", _path(operation_ref, "resolve"), body)

    def redrive(self, operation_ref: str, operator: str, reason: str) -> Request:
        body = {"reason": reason, "operator": operator}
        return Request("POST", _path(operation_ref, "redrive"), body)

    def tools(self) -> Request:
        return Request("GET", "/v1/tools")

    @staticmethod
    def answer(response: httpx.Response) -> StepView:
        if response.status_code >= 400:
            raise_problem(response)
        return CallView.model_validate_json(response.content).to_view()

    @staticmethod
    def answer_json(response: httpx.Response) -> Any:
        if response.status_code >= 400:
            raise_problem(response)
        return response.json()

    @staticmethod
    def hold(deadline: float) -> float:
        return max(0.0, min(LONGEST_HOLD, deadline - time.monotonic()))


def _headers(key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"} if key else {}


def _timeout(request: Request, base: float) -> float:
    hold = float(request.params.get("wait", 0))
    return base + hold


class GatewayClient:
    """The synchronous client: ``GatewayClient("http://127.0.0.1:8080", key)``."""

    def __init__(
        self, base_url: str, key: str | None = None, *, timeout: float = 10.0, **options: Any
    ) -> None:
        self.calls = Calls()
        self.timeout = timeout
        self.http = httpx.Client(base_url=base_url, headers=_headers(key), **options)

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> GatewayClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _send(self, request: Request) -> httpx.Response:
        return self.http.request(
            request.method,
            request.path,
            json=request.json,
            params=dict(request.params),
            headers=dict(request.headers),
            timeout=_timeout(request, self.timeout),
        )

    def _view(self, request: Request) -> StepView:
        return self.calls.answer(self._send(request))

    def tools(self) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = self.calls.answer_json(self._send(self.calls.tools()))[
            "tools"
        ]
        return found

    def submit(
        self, tool: str, input: Mapping[str, Any], operation_ref: str | None = None
    ) -> StepView:
        return self._view(self.calls.submit(tool, input, operation_ref))

    def view(self, operation_ref: str) -> StepView:
        return self._view(self.calls.view(operation_ref))

    def wait(self, operation_ref: str, timeout: float = 30.0) -> StepView:
        deadline = time.monotonic() + timeout
        while True:
            view = self._view(self.calls.view(operation_ref, self.calls.hold(deadline)))
            if view.needs_agent:
                return view
            if time.monotonic() >= deadline:
                raise WaitTimeout(operation_ref, str(view.state), timeout)

    def provide_input(self, operation_ref: str, new_input: Mapping[str, Any]) -> StepView:
        return self._view(self.calls.provide_input(operation_ref, new_input))

    def cancel(self, operation_ref: str, reason: str, by: str | None = None) -> StepView:
        return self._view(self.calls.cancel(operation_ref, reason, by))

    def approve(self, operation_ref: str, approver: str, reason: str) -> StepView:
        return self._view(self.calls.approval("approve", operation_ref, approver, reason))

    def reject(self, operation_ref: str, approver: str, reason: str) -> StepView:
        return self._view(self.calls.approval("reject", operation_ref, approver, reason))

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
        """Close an escalated step (``evidence`` to succeeded, ``confirm_not_written`` to
        failed when the write may have happened)."""
        return self._view(
            self.calls.resolve(operation_ref, to, operator, reason, evidence, confirm_not_written)
        )

    def redrive(self, operation_ref: str, operator: str, reason: str) -> StepView:
        return self._view(self.calls.redrive(operation_ref, operator, reason))


class AsyncGatewayClient:
    """The asyncio client; the same methods, awaitable."""

    def __init__(
        self, base_url: str, key: str | None = None, *, timeout: float = 10.0, **options: Any
    ) -> None:
        self.calls = Calls()
        self.timeout = timeout
        self.http = httpx.AsyncClient(base_url=base_url, headers=_headers(key), **options)

    async def close(self) -> None:
        await self.http.aclose()

    async def __aenter__(self) -> AsyncGatewayClient:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    async def _send(self, request: Request) -> httpx.Response:
        return await self.http.request(
            request.method,
            request.path,
            json=request.json,
            params=dict(request.params),
            headers=dict(request.headers),
            timeout=_timeout(request, self.timeout),
        )

    async def _view(self, request: Request) -> StepView:
        return self.calls.answer(await self._send(request))

    async def tools(self) -> list[dict[str, Any]]:
        answer = self.calls.answer_json(await self._send(self.calls.tools()))
        found: list[dict[str, Any]] = answer["tools"]
        return found

    async def submit(
        self, tool: str, input: Mapping[str, Any], operation_ref: str | None = None
    ) -> StepView:
        return await self._view(self.calls.submit(tool, input, operation_ref))

    async def view(self, operation_ref: str) -> StepView:
        return await self._view(self.calls.view(operation_ref))

    async def wait(self, operation_ref: str, timeout: float = 30.0) -> StepView:
        deadline = time.monotonic() + timeout
        while True:
            view = await self._view(self.calls.view(operation_ref, self.calls.hold(deadline)))
            if view.needs_agent:
                return view
            if time.monotonic() >= deadline:
                raise WaitTimeout(operation_ref, str(view.state), timeout)

    async def provide_input(self, operation_ref: str, new_input: Mapping[str, Any]) -> StepView:
        return await self._view(self.calls.provide_input(operation_ref, new_input))

    async def cancel(self, operation_ref: str, reason: str, by: str | None = None) -> StepView:
        return await self._view(self.calls.cancel(operation_ref, reason, by))

    async def approve(self, operation_ref: str, approver: str, reason: str) -> StepView:
        return await self._view(self.calls.approval("approve", operation_ref, approver, reason))

    async def reject(self, operation_ref: str, approver: str, reason: str) -> StepView:
        return await self._view(self.calls.approval("reject", operation_ref, approver, reason))

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
        return await self._view(
            self.calls.resolve(operation_ref, to, operator, reason, evidence, confirm_not_written)
        )

    async def redrive(self, operation_ref: str, operator: str, reason: str) -> StepView:
        return await self._view(self.calls.redrive(operation_ref, operator, reason))
