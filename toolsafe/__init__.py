"""toolsafe: run AI agents' side-effecting tool calls without duplicate writes or false
failures. This is the public face; import from here, not from the rooms behind it.

    from toolsafe import Client, ToolError, HttpWriteAdapter, tool

``celery -A toolsafe worker|beat|flower`` finds the app as ``toolsafe.celery``, built
from the ``TOOLSAFE_*`` environment on first access (never at import time).

Names are resolved lazily, so importing ``toolsafe`` (or a room under it, such as
``toolsafe.settings``) loads neither Celery nor the database layer.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# public name -> module that defines it
_EXPORTS: dict[str, str] = {
    # the client contract, the clients and what they answer with
    "Calls": "toolsafe.tasks.calls",
    "AsyncCalls": "toolsafe.tasks.calls",
    "Catalogue": "toolsafe.adapters.catalogue",
    "ToolSpec": "toolsafe.adapters.catalogue",
    "Client": "toolsafe.tasks.client",
    "AsyncClient": "toolsafe.tasks.async_client",
    "GatewayClient": "toolsafe.gateway.client",
    "AsyncGatewayClient": "toolsafe.gateway.client",
    "GatewayError": "toolsafe.gateway.client",
    "InvalidInput": "toolsafe.tasks.client",
    "WaitTimeout": "toolsafe.tasks.client",
    "ToolCall": "toolsafe.tasks.client",
    "StepView": "toolsafe.tasks.views",
    "HistoryEntry": "toolsafe.tasks.views",
    "OperationRefConflict": "toolsafe.recovery.store",
    "InvalidOperationRef": "toolsafe.recovery.store",
    "StepNotFound": "toolsafe.recovery.store",
    "TransitionRefused": "toolsafe.recovery.outcomes",
    "StepState": "toolsafe.recovery.states",
    "create_app": "toolsafe.tasks.app",
    "Settings": "toolsafe.settings",
    "SettingsError": "toolsafe.settings",
    # the envelope contract
    "ToolError": "toolsafe.adapters.envelope",
    "ToolSuccess": "toolsafe.adapters.envelope",
    "Retry": "toolsafe.adapters.envelope",
    "Verification": "toolsafe.adapters.envelope",
    "parse_result": "toolsafe.adapters.envelope",
    "to_wire": "toolsafe.adapters.envelope",
    "json_schema": "toolsafe.adapters.envelope",
    # the adapter toolkit
    "Adapter": "toolsafe.adapters.protocol",
    "CallContext": "toolsafe.adapters.protocol",
    "FieldError": "toolsafe.adapters.protocol",
    "LookupFound": "toolsafe.adapters.protocol",
    "LookupNotFound": "toolsafe.adapters.protocol",
    "LookupUnavailable": "toolsafe.adapters.protocol",
    "HttpSettings": "toolsafe.adapters.http",
    "HttpWriteAdapter": "toolsafe.adapters.http",
    "HttpReadAdapter": "toolsafe.adapters.http",
    "tool": "toolsafe.adapters.decorators",
    "read_tool": "toolsafe.adapters.decorators",
    "Raised": "toolsafe.adapters.function",
    "FunctionAdapter": "toolsafe.adapters.function",
    "Registry": "toolsafe.adapters.registry",
    "AdapterSettings": "toolsafe.adapters.registry",
    "ToolsafeError": "toolsafe.adapters.errors",
}

__all__ = [
    "Adapter",
    "AdapterSettings",
    "AsyncCalls",
    "AsyncClient",
    "AsyncGatewayClient",
    "CallContext",
    "Calls",
    "Catalogue",
    "Client",
    "FieldError",
    "FunctionAdapter",
    "GatewayClient",
    "GatewayError",
    "HistoryEntry",
    "HttpReadAdapter",
    "HttpSettings",
    "HttpWriteAdapter",
    "InvalidInput",
    "InvalidOperationRef",
    "LookupFound",
    "LookupNotFound",
    "LookupUnavailable",
    "OperationRefConflict",
    "Raised",
    "Registry",
    "Retry",
    "Settings",
    "SettingsError",
    "StepNotFound",
    "StepState",
    "StepView",
    "ToolCall",
    "ToolError",
    "ToolSpec",
    "ToolSuccess",
    "ToolsafeError",
    "TransitionRefused",
    "Verification",
    "WaitTimeout",
    "__version__",
    "create_app",
    "json_schema",
    "parse_result",
    "read_tool",
    "to_wire",
    "tool",
]

if TYPE_CHECKING:
    from toolsafe.adapters.catalogue import Catalogue, ToolSpec
    from toolsafe.adapters.decorators import read_tool, tool
    from toolsafe.adapters.envelope import (
        Retry,
        ToolError,
        ToolSuccess,
        Verification,
        json_schema,
        parse_result,
        to_wire,
    )
    from toolsafe.adapters.errors import ToolsafeError
    from toolsafe.adapters.function import FunctionAdapter, Raised
    from toolsafe.adapters.http import HttpReadAdapter, HttpSettings, HttpWriteAdapter
    from toolsafe.adapters.protocol import (
        Adapter,
        CallContext,
        FieldError,
        LookupFound,
        LookupNotFound,
        LookupUnavailable,
    )
    from toolsafe.adapters.registry import AdapterSettings, Registry
    from toolsafe.gateway.client import AsyncGatewayClient, GatewayClient, GatewayError
    from toolsafe.recovery.outcomes import TransitionRefused
    from toolsafe.recovery.states import StepState
    from toolsafe.recovery.store import InvalidOperationRef, OperationRefConflict, StepNotFound
    from toolsafe.settings import Settings, SettingsError
    from toolsafe.tasks.app import create_app
    from toolsafe.tasks.async_client import AsyncClient
    from toolsafe.tasks.calls import AsyncCalls, Calls
    from toolsafe.tasks.client import Client, InvalidInput, ToolCall, WaitTimeout
    from toolsafe.tasks.views import HistoryEntry, StepView


def _version() -> str:
    """The installed distribution's version, read on first use: scanning the installed
    distributions costs every process that imports ``toolsafe`` tens of milliseconds."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("toolsafe")
    except PackageNotFoundError:  # pragma: no cover - running from a bare source tree
        return "0+unknown"


def __getattr__(name: str) -> Any:
    if name == "__version__":
        globals()[name] = found = _version()
        return found
    if name == "celery":
        # `celery -A toolsafe`: the process's app, with the operator exporter installed.
        from toolsafe.worker import default_app

        return default_app()
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'toolsafe' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
