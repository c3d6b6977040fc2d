"""The boundary with downstream systems. ``tool``, ``read_tool`` (plain functions as
adapters) and ``Raised`` are exported here; everything else from its module."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from toolsafe.adapters.decorators import read_tool, tool
    from toolsafe.adapters.function import Raised

_EXPORTS = {
    "tool": "toolsafe.adapters.decorators",
    "read_tool": "toolsafe.adapters.decorators",
    "Raised": "toolsafe.adapters.function",
}
__all__ = ["Raised", "read_tool", "tool"]


def __getattr__(name: str) -> Any:
    # Lazy, so that importing one module of the room does not load the others.
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'toolsafe.adapters' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
