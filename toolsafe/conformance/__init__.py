"""The adapter conformance kit: ``toolsafe check-adapter`` and its pytest fixtures run a
user's adapter through the faults that turn a careless adapter into a duplicate write."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from toolsafe.adapters.errors import AdapterLoadError
from toolsafe.adapters.protocol import Adapter
from toolsafe.adapters.registry import Registry
from toolsafe.conformance.report import Check, ConformanceFailure, Report, assert_conforms
from toolsafe.conformance.scenarios import SampleInputError, run_scenarios
from toolsafe.conformance.targets import target_for

DEFAULT_TIMEOUT = 1.0


def load_adapter(spec: str) -> Adapter[Any]:
    """``MODULE:TOOL``: the module's attribute ``TOOL`` when it is an adapter, else the
    tool ``TOOL`` its ``register(registry)`` registers (as ``TOOLSAFE_ADAPTERS`` would)."""
    module_name, sep, tool = spec.partition(":")
    if not sep or not module_name or not tool:
        raise AdapterLoadError(spec, "expected MODULE:TOOL, e.g. my_company.billing:create_invoice")
    import importlib

    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise AdapterLoadError(
            module_name,
            f"{error} (the module must be importable here as it must be for workers: "
            "installed, or on PYTHONPATH)",
        ) from error
    candidate = getattr(module, tool, None)
    if isinstance(candidate, Adapter):
        return candidate
    registry = Registry()
    registry.load_modules([module_name])
    return registry.get(tool)


def read_sample(path: str | Path) -> dict[str, Any]:
    """The sample input: a JSON object in a file; a bad file is named in the error."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as error:
        raise SampleInputError(
            f"cannot read the sample input {str(path)!r}: {error.strerror}"
        ) from None
    except ValueError as error:
        raise SampleInputError(f"the sample input {str(path)!r} is not JSON: {error}") from None
    if not isinstance(data, dict):
        raise SampleInputError(f"the sample input {str(path)!r} must be a JSON object")
    return data


def check_adapter(
    adapter: Adapter[Any],
    sample: Mapping[str, Any],
    *,
    base_url: str | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    run_id: str | None = None,
) -> Report:
    """Run every scenario against ``adapter`` (through the fault proxy when it is an HTTP
    toolkit adapter, by wrapping its call when it is a ``@tool`` function)."""
    target = target_for(adapter, base_url, timeout)
    try:
        return run_scenarios(target, sample, run_id)
    finally:
        target.close()


__all__ = [
    "DEFAULT_TIMEOUT",
    "Check",
    "ConformanceFailure",
    "Report",
    "SampleInputError",
    "assert_conforms",
    "check_adapter",
    "load_adapter",
    "read_sample",
]
