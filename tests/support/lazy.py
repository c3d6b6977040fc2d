"""A module imported on first use: a test module that needs a heavy SDK names its kit
with :func:`lazy_module`, so that collecting it (which every xdist worker does, for
every module of the suite) does not import the SDK; only the worker that runs its tests
does. Type checkers see the real module::

    if TYPE_CHECKING:
        from tests.support.integrations import openai_agents as kit
    else:
        kit = lazy_module("tests.support.integrations.openai_agents")
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any


class LazyModule:
    """Stands for a module until one of its public names is read, then imports it.

    Private and dunder names are answered without importing: pytest's collection probes
    every name of a test module with them (``_mock_name``, ``__wrapped__``), which would
    otherwise import the SDK in every collector."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._module: ModuleType | None = None

    def __getattr__(self, attribute: str) -> Any:
        if attribute.startswith("_"):
            raise AttributeError(attribute)
        if self._module is None:
            self._module = importlib.import_module(self._name)
        return getattr(self._module, attribute)

    def __repr__(self) -> str:
        state = "imported" if self._module is not None else "not imported yet"
        return f"<lazy module {self._name!r}, {state}>"


def lazy_module(name: str) -> LazyModule:
    """``name``, imported when one of its public names is first read."""
    return LazyModule(name)
