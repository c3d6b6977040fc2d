"""Tool name → adapter, filled from the modules named in ``TOOLSAFE_ADAPTERS``.

A module plugs in by defining ``register(registry)``; toolsafe never scans for
adapters, so what runs is exactly what the settings list.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from typing import Any

from toolsafe.adapters.errors import AdapterLoadError, DuplicateToolError, UnknownToolError
from toolsafe.adapters.protocol import Adapter


class Registry:
    """The adapters one worker (or client) knows, by tool name."""

    def __init__(self) -> None:
        self._adapters: dict[str, Adapter[Any]] = {}

    def register(self, adapter: Adapter[Any]) -> None:
        tool = getattr(adapter, "tool", None)
        if not isinstance(tool, str) or not tool:
            raise AdapterLoadError(type(adapter).__module__, "adapter has no tool name")
        if tool in self._adapters and self._adapters[tool] is not adapter:
            raise DuplicateToolError(tool)
        self._adapters[tool] = adapter

    def get(self, tool: str) -> Adapter[Any]:
        try:
            return self._adapters[tool]
        except KeyError:
            raise UnknownToolError(tool, self.tools()) from None

    def __contains__(self, tool: object) -> bool:
        return tool in self._adapters

    def tools(self) -> tuple[str, ...]:
        return tuple(sorted(self._adapters))

    def load_modules(self, modules: Iterable[str]) -> None:
        """Import each module and call its ``register(registry)``."""
        for name in modules:
            name = name.strip()
            if not name:
                continue
            try:
                module = importlib.import_module(name)
            except ImportError as error:
                raise AdapterLoadError(name, str(error)) from error
            hook = getattr(module, "register", None)
            if not callable(hook):
                raise AdapterLoadError(name, "module defines no register(registry) function")
            hook(self)


def parse_module_list(value: str) -> tuple[str, ...]:
    """``"a.b, c.d"`` → ``("a.b", "c.d")``; the format of ``TOOLSAFE_ADAPTERS``."""
    return tuple(part.strip() for part in value.split(",") if part.strip())
