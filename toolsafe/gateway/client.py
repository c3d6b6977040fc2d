"""Clients of the gateway over HTTP, for agent services that hold a key and no store or
broker credentials: ``GatewayClient`` (sync) and ``AsyncGatewayClient`` (asyncio).

Both satisfy the client contract (``toolsafe.tasks.calls``: ``Calls``, ``AsyncCalls``)
and raise the in-process ``Client``'s exceptions. Both are thin shells over
:class:`Operations`, which holds every operation once, without I/O: the requests it
sends and how each answer maps back (a view, or a problem into the exception it stands
for). Needs httpx, not FastAPI.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable, Coroutine, Generator, Mapping
from dataclasses import dataclass, field
from typing import Any, Concatenate, Final, ParamSpec, TypeVar
from urllib.parse import quote

import httpx

from toolsafe import tracing
from toolsafe.adapters.catalogue import Catalogue, ToolSpec
from toolsafe.adapters.errors import INPUT_CODES, ToolsafeError, UnknownToolError
from toolsafe.adapters.json_input import check_input
from toolsafe.gateway.models import CallView, ToolList
from toolsafe.recovery.outcomes import TransitionRefused
from toolsafe.recovery.states import StepState
from toolsafe.recovery.store import InvalidOperationRef, OperationRefConflict, StepNotFound
from toolsafe.tasks.client import InvalidInput, Submission, WaitTimeout
from toolsafe.tasks.views import StepView

P = ParamSpec("P")
T = TypeVar("T")

LONGEST_HOLD: Final = 30.0
"""The longest ``?wait=`` one request asks for; ``wait`` asks again until its timeout."""
EARLY_PAUSE: Final = 1.0
"""A hold the gateway ended early with the step unmoved (``hint: no_worker``: no worker
consumes) is asked again after this pause, not at once."""


def early_pause(asked: float, deadline: float) -> float:
    """The pause before asking again: none after a hold that lasted, else a second (at
    most until the deadline)."""
    now = time.monotonic()
    if now - asked >= EARLY_PAUSE:
        return 0.0
    return max(0.0, min(EARLY_PAUSE, deadline - now))


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
    """One HTTP request of an operation."""

    method: str
    path: str
    json: Any = None
    params: Mapping[str, str] = field(default_factory=dict)
    headers: Mapping[str, str] = field(default_factory=dict)
    pause: float = 0.0
    """Seconds to wait before sending (a wait asked again after an early answer)."""


def _path(operation_ref: str, action: str = "") -> str:
    return "/v1/calls/" + quote(operation_ref, safe="/:") + (f"/{action}" if action else "")


Plan = Generator[Request, httpx.Response, T]
"""An operation without I/O: yields requests, is sent their responses, returns ``T``."""


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


class Operations:
    """Every operation once, without I/O: a plan that yields the :class:`Request` s to
    send and is sent back each answer, and returns what the client returns (a view, a
    submission, the catalogue; a problem raised as the exception it stands for). The
    sync and async clients are thin shells that drive these plans."""

    def catalogue(self) -> Plan[Catalogue]:
        """``GET /v1/tools``."""
        answer = answer_json((yield Request("GET", "/v1/tools")))
        return Catalogue(
            ToolSpec(
                name=tool.name,
                description=tool.description,
                writes=tool.writes,
                has_lookup=tool.has_lookup,
                input_schema=tool.input_schema,
                max_attempts=tool.max_attempts,
                title=tool.title,
            )
            for tool in ToolList.model_validate(answer).tools
        )

    def submit(
        self, tool: str, input: Mapping[str, Any], operation_ref: str | None = None
    ) -> Plan[StepView]:
        """Commit the step, then publish it; the same operation_ref returns that step."""
        return (yield from self.submit_call(tool, input, operation_ref)).view

    def submit_call(
        self,
        tool: str,
        input: Mapping[str, Any],
        operation_ref: str | None = None,
        *,
        actor: str | None = None,
    ) -> Plan[Submission]:
        """``submit``, also saying whether this call created the step (201, not 200)."""
        _no_actor(actor)
        check_input(tool, input)  # what the gateway would refuse, refused before sending
        headers = {"Idempotency-Key": operation_ref} if operation_ref is not None else {}
        path = f"/v1/tools/{quote(tool, safe='')}/calls"
        response = yield Request("POST", path, {"input": dict(input)}, {}, headers)
        return Submission(answer(response), response.status_code == 201)

    def view(self, operation_ref: str) -> Plan[StepView]:
        return answer((yield Request("GET", _path(operation_ref))))

    def settle(self, operation_ref: str, timeout: float) -> Plan[StepView]:
        """The view once the step needs the agent or is terminal, or as it is when
        ``timeout`` runs out: held ``?wait=`` requests of at most ``LONGEST_HOLD``."""
        deadline = time.monotonic() + timeout
        pause = 0.0
        while True:
            asked = time.monotonic() + pause
            hold = max(0.0, min(LONGEST_HOLD, deadline - asked))
            params = {"wait": f"{hold:.3f}"} if hold > 0 else {}
            request = Request("GET", _path(operation_ref), params=params, pause=pause)
            view = answer((yield request))
            if view.needs_agent or time.monotonic() >= deadline:
                return view
            # A hold the gateway ended early (no worker consumes) is asked again after a
            # pause, not at once.
            pause = early_pause(asked, deadline)

    def wait(self, operation_ref: str, timeout: float = 30.0) -> Plan[StepView]:
        """Until the step needs the agent or is terminal, else ``WaitTimeout``."""
        view = yield from self.settle(operation_ref, timeout)
        if not view.needs_agent:
            raise WaitTimeout(operation_ref, str(view.state), timeout)
        return view

    def provide_input(
        self, operation_ref: str, new_input: Mapping[str, Any], *, actor: str | None = None
    ) -> Plan[StepView]:
        _no_actor(actor)
        check_input("", new_input)
        body = {"input": dict(new_input)}
        return answer((yield Request("POST", _path(operation_ref, "input"), body)))

    def cancel(self, operation_ref: str, reason: str, by: str | None = None) -> Plan[StepView]:
        body = {"reason": reason, "by": by}
        return answer((yield Request("POST", _path(operation_ref, "cancel"), body)))

    def request_cancel(
        self, operation_ref: str, reason: str, by: str | None = None
    ) -> Plan[StepView]:
        """Cancel now if the step can be, else record the request (``when_possible``)."""
        body = {"reason": reason, "by": by, "when_possible": True}
        return answer((yield Request("POST", _path(operation_ref, "cancel"), body)))

    def approve(self, operation_ref: str, approver: str, reason: str) -> Plan[StepView]:
        body = {"reason": reason, "approver": approver}
        return answer((yield Request("POST", _path(operation_ref, "approve"), body)))

    def reject(self, operation_ref: str, approver: str, reason: str) -> Plan[StepView]:
        body = {"reason": reason, "approver": approver}
        return answer((yield Request("POST", _path(operation_ref, "reject"), body)))

    def resolve(
        self,
        operation_ref: str,
        to: StepState | str,
        operator: str,
        reason: str,
        *,
        evidence: str | None = None,
        confirm_not_written: bool = False,
    ) -> Plan[StepView]:
        """Close an escalated step (``evidence`` to succeeded, ``confirm_not_written`` to
        failed when the write may have happened)."""
        body: dict[str, Any] = {"to": str(StepState(to)), "reason": reason, "operator": operator}
        if evidence is not None:
            body["evidence"] = evidence
        if confirm_not_written:
            body["confirm_not_written"] = True
        return answer((yield Request("POST", _path(operation_ref, "resolve"), body)))

    def redrive(self, operation_ref: str, operator: str, reason: str) -> Plan[StepView]:
        body = {"reason": reason, "operator": operator}
        return answer((yield Request("POST", _path(operation_ref, "redrive"), body)))


OPERATIONS: Final = Operations()


def _no_actor(actor: str | None) -> None:
    if actor is not None:
        raise TypeError(
            "over the gateway the actor is the key's (recorded by the gateway); do not pass actor"
        )


def answer(response: httpx.Response) -> StepView:
    """The view a gateway answered with, or the exception its problem stands for."""
    if response.status_code >= 400:
        raise_problem(response)
    return CallView.model_validate_json(response.content).to_view()


def answer_json(response: httpx.Response) -> object:
    if response.status_code >= 400:
        raise_problem(response)
    found: object = response.json()
    return found


def _headers(key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"} if key else {}


def _options(request: Request, timeout: float) -> dict[str, Any]:
    """``httpx``'s keywords for the request; a held wait adds its hold to the timeout."""
    return {
        "json": request.json,
        "params": dict(request.params),
        # The caller's trace context travels on (W3C traceparent; {} unless tracing).
        "headers": {**dict(request.headers), **tracing.headers()},
        "timeout": timeout + float(request.params.get("wait", 0)),
    }


def run_plan(send: Callable[[Request], httpx.Response], steps: Plan[T]) -> T:
    """Drive a plan, sending each request it yields with ``send``."""
    try:
        request = next(steps)
        while True:
            request = steps.send(send(request))
    except StopIteration as done:
        value: T = done.value
        return value


def driven(
    plan: Callable[Concatenate[Operations, P], Plan[T]],
) -> Callable[Concatenate[GatewayClient, P], T]:
    """The operation as a ``GatewayClient`` method: its plan driven over ``httpx.Client``."""

    @functools.wraps(plan)
    def call(self: GatewayClient, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return run_plan(self._send, plan(OPERATIONS, *args, **kwargs))

    return call


def awaited(
    plan: Callable[Concatenate[Operations, P], Plan[T]],
) -> Callable[Concatenate[AsyncGatewayClient, P], Coroutine[Any, Any, T]]:
    """The operation as an ``AsyncGatewayClient`` method, over ``httpx.AsyncClient``."""

    @functools.wraps(plan)
    async def call(self: AsyncGatewayClient, /, *args: P.args, **kwargs: P.kwargs) -> T:
        steps = plan(OPERATIONS, *args, **kwargs)
        try:
            request = next(steps)
            while True:
                request = steps.send(await self._send(request))
        except StopIteration as done:
            value: T = done.value
            return value

    return call


class GatewayClient:
    """The synchronous client: ``GatewayClient("http://127.0.0.1:8080", key)``."""

    def __init__(
        self, base_url: str, key: str | None = None, *, timeout: float = 10.0, **options: Any
    ) -> None:
        self.timeout = timeout
        self.http = httpx.Client(base_url=base_url, headers=_headers(key), **options)
        self._catalogue: Catalogue | None = None

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> GatewayClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _send(self, request: Request) -> httpx.Response:
        if request.pause > 0:
            time.sleep(request.pause)
        return self.http.request(request.method, request.path, **_options(request, self.timeout))

    tools = driven(Operations.catalogue)

    def catalogue(self) -> Catalogue:
        """The registered tools, fetched once (``tools()`` fetches them again)."""
        if self._catalogue is None:
            self._catalogue = self.tools()
        return self._catalogue

    submit = driven(Operations.submit)
    submit_call = driven(Operations.submit_call)
    view = driven(Operations.view)
    settle = driven(Operations.settle)
    wait = driven(Operations.wait)
    provide_input = driven(Operations.provide_input)
    cancel = driven(Operations.cancel)
    request_cancel = driven(Operations.request_cancel)
    approve = driven(Operations.approve)
    reject = driven(Operations.reject)
    resolve = driven(Operations.resolve)
    redrive = driven(Operations.redrive)


class AsyncGatewayClient:
    """The asyncio client; the same methods, awaitable. ``catalogue()`` is the one
    synchronous method (as on every ``AsyncCalls``): it returns the tools ``await
    tools()`` fetched, or fetches them once with a short blocking request."""

    def __init__(
        self, base_url: str, key: str | None = None, *, timeout: float = 10.0, **options: Any
    ) -> None:
        self.timeout = timeout
        self.http = httpx.AsyncClient(base_url=base_url, headers=_headers(key), **options)
        self._catalogue: Catalogue | None = None

    async def close(self) -> None:
        await self.http.aclose()

    async def __aenter__(self) -> AsyncGatewayClient:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    async def _send(self, request: Request) -> httpx.Response:
        if request.pause > 0:
            await asyncio.sleep(request.pause)
        return await self.http.request(
            request.method, request.path, **_options(request, self.timeout)
        )

    _fetch = awaited(Operations.catalogue)

    async def tools(self) -> Catalogue:
        """``GET /v1/tools``, kept for ``catalogue()``."""
        self._catalogue = await self._fetch()
        return self._catalogue

    def catalogue(self) -> Catalogue:
        if self._catalogue is None:
            with httpx.Client(base_url=self.http.base_url, headers=self.http.headers) as http:
                self._catalogue = run_plan(
                    lambda request: http.request(
                        request.method, request.path, **_options(request, self.timeout)
                    ),
                    OPERATIONS.catalogue(),
                )
        return self._catalogue

    submit = awaited(Operations.submit)
    submit_call = awaited(Operations.submit_call)
    view = awaited(Operations.view)
    settle = awaited(Operations.settle)
    wait = awaited(Operations.wait)
    provide_input = awaited(Operations.provide_input)
    cancel = awaited(Operations.cancel)
    request_cancel = awaited(Operations.request_cancel)
    approve = awaited(Operations.approve)
    reject = awaited(Operations.reject)
    resolve = awaited(Operations.resolve)
    redrive = awaited(Operations.redrive)
