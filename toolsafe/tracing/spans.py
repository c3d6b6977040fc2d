"""Spans and W3C trace-context propagation, at no cost when tracing is off.

Every helper returns :data:`OFF` (a shared do-nothing span) when tracing is off, so a
call site pays one attribute read. Attribute values are only ever codes, states, refs
and tool names: never a tool's input, never upstream text, never an exception's message
(an exception is recorded as ``error.type`` = its class name).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final, Literal

from toolsafe.adapters.envelope import AnySuccess, ToolError
from toolsafe.tracing.setup import STATE, configure

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.trace import Tracer

# The W3C headers a trace context travels in (trace-context and baggage).
TRACE_HEADERS: Final = ("traceparent", "tracestate", "baggage")
# The longest tool name an attribute carries (the catalogue's own limit for details).
MAX_NAME: Final = 100

Kind = Literal["internal", "server", "client", "producer", "consumer"]
Scalar = str | bool | int | float


def tracer() -> Tracer | None:
    """The tracer when tracing is on in this process, else None (decided once)."""
    if STATE.checked:
        return STATE.tracer
    return configure()


class Off:
    """The span of a process that does not trace: does nothing, costs nothing."""

    __slots__ = ()

    def __enter__(self) -> Off:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None = None,
        error: BaseException | None = None,
        traceback: TracebackType | None = None,
    ) -> None:
        return None

    def set(self, key: str, value: Scalar | None) -> None:
        return None

    def set_many(self, attributes: Mapping[str, Scalar | None]) -> None:
        return None

    def rename(self, name: str) -> None:
        return None

    def failed(self, error_type: str) -> None:
        return None


OFF: Final = Off()


class Live(Off):
    """A span made current for the ``with`` block; an exception leaving it is recorded as
    ``error.type`` (its class name) and an error status, never with its message."""

    __slots__ = ("_manager", "span")

    def __init__(
        self,
        tracer: Tracer,
        name: str,
        attributes: Mapping[str, Scalar | None] | None,
        kind: Kind,
        parent: Context | None,
    ) -> None:
        from opentelemetry.trace import SpanKind

        self._manager = tracer.start_as_current_span(
            name,
            context=parent,
            kind=SpanKind[kind.upper()],
            attributes=_clean(attributes or {}),
            record_exception=False,
            set_status_on_exception=False,
        )
        self.span: Any = None

    def __enter__(self) -> Live:
        self.span = self._manager.__enter__()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None = None,
        error: BaseException | None = None,
        traceback: TracebackType | None = None,
    ) -> None:
        if kind is not None:
            self.failed(kind.__name__)
        self._manager.__exit__(kind, error, traceback)

    def set(self, key: str, value: Scalar | None) -> None:
        if value is not None:
            self.span.set_attribute(key, value)

    def set_many(self, attributes: Mapping[str, Scalar | None]) -> None:
        self.span.set_attributes(_clean(attributes))

    def rename(self, name: str) -> None:
        self.span.update_name(name)

    def failed(self, error_type: str) -> None:
        from opentelemetry.trace import Status, StatusCode

        self.span.set_attribute("error.type", error_type)
        self.span.set_status(Status(StatusCode.ERROR))


def _clean(attributes: Mapping[str, Scalar | None]) -> dict[str, Scalar]:
    return {key: value for key, value in attributes.items() if value is not None}


def span(
    name: str,
    attributes: Mapping[str, Scalar | None] | None = None,
    *,
    kind: Kind = "internal",
    parent: Context | None = None,
) -> Off:
    """A span over a ``with`` block (``OFF`` when tracing is off); ``parent`` is a context
    taken from a carrier (:func:`context_from`), else the current one."""
    traced = tracer()
    if traced is None:
        return OFF
    return Live(traced, name, attributes, kind, parent)


# ------------------------------------------------------------------- propagation


def headers() -> dict[str, str]:
    """The current trace context as W3C headers ({} when off, or outside any span)."""
    if tracer() is None:
        return {}
    from opentelemetry.propagate import inject

    carrier: dict[str, str] = {}
    inject(carrier)
    return carrier


def context_from(carrier: Mapping[str, object] | None) -> Context | None:
    """The trace context a carrier (HTTP headers, a Celery message's headers, an MCP
    ``_meta``) holds; None when it holds none, or when tracing is off."""
    if carrier is None or tracer() is None:
        return None
    values = {key: carrier.get(key) for key in TRACE_HEADERS}
    found = {key: value for key, value in values.items() if isinstance(value, str) and value}
    if "traceparent" not in found:
        return None
    from opentelemetry.propagate import extract

    return extract(found)


# ------------------------------------------------------------------- attributes


def tool_name(tool: str) -> str:
    return tool[:MAX_NAME]


def tool_call(tool: str, operation_ref: str) -> dict[str, Scalar | None]:
    """The GenAI attributes of a tool call (``execute_tool {gen_ai.tool.name}``)."""
    return {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": tool_name(tool),
        "gen_ai.tool.call.id": operation_ref,
    }


def envelope_attributes(envelope: AnySuccess | ToolError) -> dict[str, Scalar | None]:
    """What an envelope says, redacted to its codes: ``error.type`` is the envelope's
    code; no message, detail or result is ever carried."""
    if isinstance(envelope, ToolError):
        return {
            "error.type": envelope.code,
            "toolsafe.ok": False,
            "toolsafe.commit_state": envelope.commit_state,
            "toolsafe.next_action": envelope.next_action,
            "toolsafe.error.category": envelope.category,
            "toolsafe.retry.directive": envelope.retry.directive,
        }
    return {"toolsafe.ok": True, "toolsafe.commit_state": envelope.commit_state}
