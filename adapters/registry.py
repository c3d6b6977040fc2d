"""Tool name → adapter, filled from the modules named in ``TOOLSAFE_ADAPTERS``.

A module plugs in by defining ``register(registry)``; toolsafe never scans for
adapters, so what runs is exactly what the settings list. A module that needs settings
of its own declares them (``ADAPTER_SETTINGS = AdapterSettings(prefix, Model)``): toolsafe's
settings read ``TOOLSAFE_<PREFIX>_<FIELD>`` into ``Model`` at start, and the registry calls
``register(registry, settings)`` with the result.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from pydantic import BaseModel, ValidationError

from toolsafe.adapters.errors import AdapterLoadError, DuplicateToolError, UnknownToolError
from toolsafe.adapters.protocol import Adapter

# The module attribute an adapter module declares its settings under.
SETTINGS_ATTRIBUTE: Final = "ADAPTER_SETTINGS"
_PREFIX = re.compile(r"[A-Z][A-Z0-9]*(_[A-Z0-9]+)*")


@dataclass(frozen=True)
class AdapterSettings:
    """What an adapter module reads from the environment: ``model``'s fields, each from
    ``TOOLSAFE_<prefix>_<FIELD>`` (``prefix="EXAMPLE"``, field ``timeout`` →
    ``TOOLSAFE_EXAMPLE_TIMEOUT``). A field's ``description`` is the expected form that a
    bad value's error names; fields without a variable keep their defaults. ``target``
    names the field holding the downstream's URL."""

    prefix: str
    model: type[BaseModel]
    # The field that holds the downstream's URL (the adapters' target): the conformance
    # kit reads it, and replaces it to point the adapters elsewhere (staging, its proxy).
    target: str | None = None

    def __post_init__(self) -> None:
        if not _PREFIX.fullmatch(self.prefix):
            raise ValueError(
                f"adapter settings prefix {self.prefix!r} must be upper case, like 'EXAMPLE'"
            )
        if not (isinstance(self.model, type) and issubclass(self.model, BaseModel)):
            raise TypeError("AdapterSettings.model must be a pydantic model class")
        if self.target is not None and self.target not in self.model.model_fields:
            raise ValueError(
                f"AdapterSettings.target {self.target!r} is not a field of {self.model.__name__}"
            )

    def defaults(self, module: str) -> BaseModel:
        """The model with every field at its default (a settings value built in code)."""
        try:
            return self.model()
        except ValidationError as error:
            missing = ", ".join(str(item["loc"][0]) for item in error.errors() if item["loc"])
            raise AdapterLoadError(module, f"its settings need values for {missing}") from None


def declared_settings(module: Any, name: str) -> AdapterSettings | None:
    """The settings an imported adapter module declares, or None."""
    spec = getattr(module, SETTINGS_ATTRIBUTE, None)
    if spec is None or isinstance(spec, AdapterSettings):
        return spec
    raise AdapterLoadError(
        name, f"{SETTINGS_ATTRIBUTE} must be an AdapterSettings(prefix=..., model=...)"
    )


def import_adapter_module(name: str) -> Any:
    """Import one module named in ``TOOLSAFE_ADAPTERS``."""
    try:
        return importlib.import_module(name)
    except ImportError as error:
        raise AdapterLoadError(name, str(error)) from error


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
        adapter.refuse_contradictions()
        adapter.refuse_unknowable()
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

    def load_modules(
        self, modules: Iterable[str], settings: Mapping[str, BaseModel] | None = None
    ) -> None:
        """Import each module and call its ``register(registry)``, or, for a module that
        declares ``ADAPTER_SETTINGS``, ``register(registry, settings[module])`` (the
        model's defaults when ``settings`` has no entry for it)."""
        given = settings or {}
        for name in modules:
            name = name.strip()
            if not name:
                continue
            module = import_adapter_module(name)
            hook = getattr(module, "register", None)
            if not callable(hook):
                raise AdapterLoadError(name, "module defines no register(registry) function")
            spec = declared_settings(module, name)
            if spec is None:
                hook(self)
                continue
            values = given.get(name)
            if values is None:
                values = spec.defaults(name)
            elif not isinstance(values, spec.model):
                raise AdapterLoadError(
                    name, f"its settings must be a {spec.model.__name__}, not {type(values)!r}"
                )
            hook(self, values)


def parse_module_list(value: str) -> tuple[str, ...]:
    """``"a.b, c.d"`` → ``("a.b", "c.d")``; the format of ``TOOLSAFE_ADAPTERS``."""
    return tuple(part.strip() for part in value.split(",") if part.strip())
