"""The root of toolsafe's exceptions and the ones raised at the adapter boundary.

Every exception keeps its constructor arguments in ``args`` so that it survives the
pickle round trip Celery puts it through.
"""

from __future__ import annotations


class ToolsafeError(Exception):
    """Root of every exception toolsafe raises on purpose."""


class UnknownToolError(ToolsafeError, LookupError):
    """No adapter is registered under the tool name."""

    def __init__(self, tool: str, known: tuple[str, ...] = ()) -> None:
        super().__init__(tool, known)
        self.tool = tool
        self.known = known

    def __str__(self) -> str:
        names = ", ".join(self.known) if self.known else "none"
        return f"unknown tool {self.tool!r}; registered tools: {names}"


class AdapterLoadError(ToolsafeError, ImportError):
    """A module listed in TOOLSAFE_ADAPTERS could not be imported or registered."""

    def __init__(self, module: str, reason: str) -> None:
        super().__init__(module, reason)
        self.module = module
        self.reason = reason

    def __str__(self) -> str:
        return f"cannot load adapter module {self.module!r}: {self.reason}"


class DuplicateToolError(ToolsafeError, ValueError):
    """Two adapters claim the same tool name."""

    def __init__(self, tool: str) -> None:
        super().__init__(tool)
        self.tool = tool

    def __str__(self) -> str:
        return f"tool {self.tool!r} is already registered"
