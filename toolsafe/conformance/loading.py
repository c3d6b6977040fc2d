"""Which adapter the kit runs and where it writes: the adapter built from its settings as
a worker builds it (``TOOLSAFE_<PREFIX>_*``), the target those settings name, and the
rule that writes go only to a target the caller named (``--base-url``, or
``--target-from-settings``), or to an in-process double (``--dry-run``)."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel

from toolsafe.adapters.errors import AdapterLoadError, ToolsafeError
from toolsafe.adapters.function import FunctionAdapter
from toolsafe.adapters.http import HttpAdapter
from toolsafe.adapters.protocol import Adapter
from toolsafe.adapters.registry import AdapterSettings, Registry, declared_settings
from toolsafe.settings import module_settings
from toolsafe.settings_parse import variable_name


class TargetNotNamed(ToolsafeError, ValueError):
    """A write adapter, and no target named: the kit sends nothing."""


@dataclass(frozen=True)
class Loaded:
    """An adapter as a worker would build it, and what the kit knows of its target."""

    adapter: Adapter[Any]
    module: str | None = None
    spec: AdapterSettings | None = None
    settings: BaseModel | None = None

    @property
    def settings_target(self) -> str | None:
        """The URL the adapter writes to by its settings, when the kit can tell."""
        if isinstance(self.adapter, HttpAdapter):
            return self.adapter.settings.base_url
        if self.spec is not None and self.spec.target and self.settings is not None:
            value = getattr(self.settings, self.spec.target)
            return str(value)
        return None

    def settings_source(self) -> str:
        """Where :attr:`settings_target` comes from, in a user's words."""
        if self.spec is not None and self.spec.target:
            return f"{variable_name(self.spec.prefix, self.spec.target)} or its default"
        if isinstance(self.adapter, HttpAdapter):
            return "the adapter's HttpSettings.base_url"
        return "the adapter's own code"

    def rebuild(self, url: str) -> FunctionAdapter | None:
        """The same tool built with its settings' target replaced by ``url`` (None when
        the settings name no target)."""
        if self.module is None or self.spec is None or self.spec.target is None:
            return None
        if self.settings is None:
            return None
        values = self.settings.model_copy(update={self.spec.target: url})
        registry = Registry()
        registry.load_modules([self.module], {self.module: values})
        rebuilt = registry.get(self.adapter.tool)
        return rebuilt if isinstance(rebuilt, FunctionAdapter) else None


def load_adapter(spec: str, variables: Mapping[str, str] | None = None) -> Loaded:
    """``MODULE:TOOL``: the module's attribute ``TOOL`` when it is an adapter, else the
    tool ``TOOL`` its ``register`` registers with its settings read from ``variables``
    (default: this process's environment) as a worker reads them."""
    module_name, sep, tool = spec.partition(":")
    if not sep or not module_name or not tool:
        raise AdapterLoadError(spec, "expected MODULE:TOOL, e.g. my_company.billing:create_invoice")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise AdapterLoadError(
            module_name,
            f"{error} (the module must be importable here as it must be for workers: "
            "installed, or on PYTHONPATH)",
        ) from error
    declared = declared_settings(module, module_name)
    candidate = getattr(module, tool, None)
    if isinstance(candidate, Adapter):
        candidate.refuse_unknowable()
        return Loaded(candidate, module_name, None, None)
    settings = module_settings(module_name, variables)
    registry = Registry()
    registry.load_modules([module_name], {module_name: settings} if settings else None)
    return Loaded(registry.get(tool), module_name, declared, settings)


Mode = Literal["named", "settings", "dry"]


@dataclass(frozen=True)
class Aim:
    """Where the run sends its requests: ``upstream`` (None: nowhere the kit can name),
    how the caller chose it, and the line printed before anything is sent."""

    mode: Mode
    upstream: str | None
    line: str


def aim(loaded: Loaded, base_url: str | None, target_from_settings: bool, dry_run: bool) -> Aim:
    """Apply the rule: a write runs only against a target the caller named."""
    adapter = loaded.adapter
    tool = adapter.tool
    chosen = sum((base_url is not None, target_from_settings, dry_run))
    if chosen > 1:
        raise ValueError("give one of --base-url, --target-from-settings and --dry-run")
    if dry_run:
        return Aim("dry", None, f"{tool}: dry run against an in-process double; nothing leaves")
    own = loaded.settings_target
    if base_url is not None:
        if own is None and not isinstance(adapter, HttpAdapter):
            raise ValueError(
                f"--base-url: the kit cannot point {tool!r} elsewhere: its settings name no "
                "target (declare AdapterSettings(prefix, Model, target='<url field>') and "
                "build the adapter from that field in register())"
            )
        return Aim("named", base_url, f"{tool}: writing to {base_url} (named by --base-url)")
    if target_from_settings:
        where = own or "wherever its code writes (its settings name no target)"
        line = f"{tool}: writing to {where} (from {loaded.settings_source()}, "
        return Aim("settings", own, line + "--target-from-settings)")
    if not adapter.writes:
        where = own or "its own downstream"
        return Aim("settings", own, f"{tool}: a read, calling {where} (it writes nothing)")
    would = own or "a target its settings do not name"
    raise TargetNotNamed(
        f"{tool!r} writes, and the kit sends its writes only to a target you name: it would "
        f"write to {would} (from {loaded.settings_source()}). Pass --base-url URL (a staging "
        "service), --target-from-settings to write there, or --dry-run for an in-process "
        "double"
    )


__all__ = ["Aim", "Loaded", "TargetNotNamed", "aim", "load_adapter"]
