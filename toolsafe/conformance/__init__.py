"""The adapter conformance kit: ``toolsafe check-adapter`` and its pytest fixtures run a
user's adapter through the faults that turn a careless adapter into a duplicate write.

Names are resolved lazily (``toolsafe.conformance.kit`` and the modules behind it), so the
``toolsafe`` command, which registers ``check-adapter`` through ``toolsafe.conformance.cli``,
does not import the kit for every other command.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# public name -> module that defines it
_EXPORTS: dict[str, str] = {
    "DEFAULT_TIMEOUT": "toolsafe.conformance.kit",
    "check_adapter": "toolsafe.conformance.kit",
    "read_sample": "toolsafe.conformance.kit",
    "Loaded": "toolsafe.conformance.loading",
    "TargetNotNamed": "toolsafe.conformance.loading",
    "load_adapter": "toolsafe.conformance.loading",
    "Check": "toolsafe.conformance.report",
    "ConformanceFailure": "toolsafe.conformance.report",
    "Report": "toolsafe.conformance.report",
    "assert_conforms": "toolsafe.conformance.report",
    "SampleInputError": "toolsafe.conformance.scenarios",
}

__all__ = [
    "DEFAULT_TIMEOUT",
    "Check",
    "ConformanceFailure",
    "Loaded",
    "Report",
    "SampleInputError",
    "TargetNotNamed",
    "assert_conforms",
    "check_adapter",
    "load_adapter",
    "read_sample",
]

if TYPE_CHECKING:
    from toolsafe.conformance.kit import DEFAULT_TIMEOUT, check_adapter, read_sample
    from toolsafe.conformance.loading import Loaded, TargetNotNamed, load_adapter
    from toolsafe.conformance.report import Check, ConformanceFailure, Report, assert_conforms
    from toolsafe.conformance.scenarios import SampleInputError


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'toolsafe.conformance' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
