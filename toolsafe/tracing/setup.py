"""Whether tracing is on, and the SDK set up when it is.

The rule (docs/tracing.md): tracing is on when the ``otel`` extra is installed (the
OpenTelemetry SDK imports), ``OTEL_SDK_DISABLED`` is not ``true``, and
``OTEL_TRACES_EXPORTER`` names an exporter other than ``none``. Everything else about
the SDK (endpoint, headers, service name, batching, sampling, propagators) comes from its
own ``OTEL_*`` variables, which the SDK reads itself. An application that set an SDK
tracer provider of its own keeps it: toolsafe's spans go there.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from toolsafe.settings import otel_environment

if TYPE_CHECKING:
    from opentelemetry.sdk.trace.export import SpanExporter
    from opentelemetry.trace import Tracer

log = logging.getLogger("toolsafe.tracing")

TRACER_NAME = "toolsafe"
DEFAULT_SERVICE = "toolsafe"


def wanted(variables: Mapping[str, str]) -> list[str]:
    """The exporters the ``OTEL_*`` variables ask for; [] when tracing is off."""
    if variables.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return []
    names = [
        name.strip().lower()
        for name in variables.get("OTEL_TRACES_EXPORTER", "").split(",")
        if name.strip()
    ]
    return [] if not names or "none" in names else names


def _protocol(variables: Mapping[str, str]) -> str:
    return (
        variables.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        or variables.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or "http/protobuf"
    ).strip()


def exporter(name: str, variables: Mapping[str, str]) -> SpanExporter:
    """One exporter by its ``OTEL_TRACES_EXPORTER`` name (``otlp`` or ``console``)."""
    if name == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter()
    if name == "otlp":
        protocol = _protocol(variables)
        if protocol == "grpc":
            try:
                from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (  # type: ignore[import-not-found,unused-ignore]
                    OTLPSpanExporter as GrpcExporter,
                )
            except ImportError as error:
                raise ValueError(
                    "OTEL_EXPORTER_OTLP_PROTOCOL=grpc needs opentelemetry-exporter-otlp-proto-grpc"
                ) from error
            grpc: SpanExporter = GrpcExporter()
            return grpc
        if protocol not in ("http/protobuf", "http/json"):
            raise ValueError(f"unknown OTLP protocol {protocol!r}")
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter()
    raise ValueError(f"unknown OTEL_TRACES_EXPORTER {name!r} (toolsafe knows otlp, console)")


def _provider(names: list[str], variables: Mapping[str, str]) -> Any:
    """The global SDK tracer provider: the application's own if it set one, else a new one
    with a batch processor per exporter, installed as the global provider."""
    from opentelemetry import trace
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    current = trace.get_tracer_provider()
    if isinstance(current, TracerProvider):
        return current
    named = "OTEL_SERVICE_NAME" in variables or "service.name=" in variables.get(
        "OTEL_RESOURCE_ATTRIBUTES", ""
    )
    resource = Resource.create({} if named else {"service.name": DEFAULT_SERVICE})
    provider = TracerProvider(resource=resource)
    for name in names:
        try:
            provider.add_span_processor(BatchSpanProcessor(exporter(name, variables)))
        except ValueError as error:
            log.warning("tracing: %s; that exporter is left out", error)
    trace.set_tracer_provider(provider)
    return provider


class _State:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.checked = False
        self.tracer: Tracer | None = None


STATE = _State()


def configure(variables: Mapping[str, str] | None = None) -> Tracer | None:
    """Decide once per process (the rule above) and set the SDK up; the tracer, or None
    when tracing is off."""
    with STATE.lock:
        if STATE.checked:
            return STATE.tracer
        variables = otel_environment() if variables is None else dict(variables)
        names = wanted(variables)
        tracer = None
        if names:
            try:
                provider = _provider(names, variables)
            except ImportError:
                log.warning(
                    "OTEL_TRACES_EXPORTER is set but the OpenTelemetry SDK is not installed: "
                    "pip install 'toolsafe[otel]' (tracing stays off)"
                )
            else:
                tracer = provider.get_tracer(TRACER_NAME)
        _install(tracer)
        return tracer


def use(tracer: Tracer | None) -> None:
    """Trace with ``tracer`` from now on (None: off), whatever the variables say: for
    tests, and for applications that build their own tracer."""
    with STATE.lock:
        _install(tracer)


def _install(tracer: Tracer | None) -> None:
    from toolsafe.adapters import outgoing

    STATE.checked = True
    STATE.tracer = tracer
    if tracer is None:
        outgoing.install(None)
    else:
        from toolsafe.tracing.downstream import traced_send

        outgoing.install(traced_send)
