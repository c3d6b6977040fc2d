"""OpenTelemetry traces of tool calls: one call, one trace (DESIGN §7b, docs/tracing.md).

The optional ``otel`` extra; without it (or with tracing not enabled through the SDK's
``OTEL_*`` variables) every helper here is a no-op that imports nothing of OpenTelemetry.
This room stands below ``tasks/`` and the agent-facing surface and above ``settings``:
it knows nothing of Celery, and adapters learn of it only through the seam
``toolsafe.adapters.outgoing``, which it fills.
"""

from __future__ import annotations

from typing import Any

from toolsafe.tracing.setup import configure, use, wanted
from toolsafe.tracing.spans import (
    OFF,
    TRACE_HEADERS,
    Live,
    Off,
    context_from,
    envelope_attributes,
    headers,
    span,
    tool_call,
    tool_name,
    tracer,
)

__all__ = [
    "OFF",
    "TRACE_HEADERS",
    "Live",
    "Off",
    "configure",
    "consumed",
    "context_from",
    "envelope_attributes",
    "headers",
    "span",
    "tool_call",
    "tool_name",
    "tracer",
    "use",
    "wanted",
]


def consumed(message: Any, task: str, operation_ref: str) -> Off:
    """The span of a task that took a hint: a consumer span named ``process {task}``,
    child of the context the message's headers carry (the publisher's), or the root of
    a new trace when they carry none (a hint re-published by the sweeper)."""
    if tracer() is None:
        return OFF
    carrier = {key: message.get(key) for key in TRACE_HEADERS} if message is not None else None
    return span(
        f"process {task}",
        {
            "messaging.operation.type": "process",
            "messaging.destination.name": task,
            "toolsafe.operation_ref": operation_ref,
        },
        kind="consumer",
        parent=context_from(carrier),
    )
