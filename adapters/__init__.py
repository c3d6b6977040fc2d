"""The boundary with downstream systems. ``tool`` and ``read_tool`` (plain functions as
adapters) are exported here; everything else is imported from its module."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from toolsafe.adapters.function import Raised, read_tool, tool

__all__ = ["Raised", "read_tool", "tool"]


def __getattr__(name: str) -> Any:
    # Lazy, so that importing one module of the room does not load the others.
    if name in __all__:
        from toolsafe.adapters import function

        return getattr(function, name)
    raise AttributeError(f"module 'toolsafe.adapters' has no attribute {name!r}")
