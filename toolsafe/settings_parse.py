"""How one ``TOOLSAFE_*`` value is parsed and checked, from a mapping it is given (never
from the environment itself): the reader that names the variable in every error, and the
adapter modules' own settings models (``TOOLSAFE_<PREFIX>_<FIELD>``)."""

from __future__ import annotations

import importlib
import ipaddress
import json
import os
import re
from collections.abc import Mapping
from typing import Final

from pydantic import BaseModel, ValidationError

from toolsafe.adapters.errors import ToolsafeError
from toolsafe.adapters.registry import parse_module_list
from toolsafe.recovery.policy import KNOBS, WHOLE_KNOBS
from toolsafe.recovery.store.backend import known_schemes, serves

PREFIX: Final = "TOOLSAFE_"
DEFAULT_BROKER_URL: Final = "redis://127.0.0.1:6379/0"


class SettingsError(ToolsafeError, ValueError):
    """A ``TOOLSAFE_*`` variable has a value toolsafe cannot use."""

    def __init__(self, variable: str, problem: str) -> None:
        super().__init__(variable, problem)
        self.variable = variable
        self.problem = problem

    def __str__(self) -> str:
        return f"{self.variable}: {self.problem}"


def filesystem_folder(broker_url: str) -> str | None:
    """The folder of a ``filesystem://`` broker URL (None for other brokers)."""
    scheme = "filesystem://"
    if not broker_url.startswith(scheme):
        return None
    folder = broker_url[len(scheme) :].rstrip("/")
    if not folder.startswith("/"):
        raise SettingsError(
            "TOOLSAFE_BROKER_URL",
            "a filesystem:// broker needs an absolute folder, e.g. filesystem:///tmp/broker",
        )
    return folder


def import_object(path: str, variable: str) -> object:
    """``package.module:name`` → the object; a path that does not resolve names ``variable``."""
    module_name, _, attribute = path.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise SettingsError(variable, f"cannot import {module_name!r}: {error}") from error
    found = getattr(module, attribute, None)
    if not callable(found):
        raise SettingsError(variable, f"{path!r} is not a callable in {module_name!r}")
    return found


def variable_name(prefix: str, field_name: str) -> str:
    return f"{PREFIX}{prefix}_{field_name.upper()}"


def read_model(
    module: str,
    prefix: str,
    model: type[BaseModel],
    variables: Mapping[str, str],
    taken: set[str],
) -> BaseModel:
    """``model`` from ``TOOLSAFE_<prefix>_<FIELD>`` (unset fields keep their defaults)."""
    values: dict[str, str] = {}
    for field_name in model.model_fields:
        variable = variable_name(prefix, field_name)
        if variable in taken:
            raise SettingsError(
                "TOOLSAFE_ADAPTERS",
                f"adapter module {module!r} reads {variable}, a toolsafe setting: its "
                "ADAPTER_SETTINGS need another prefix",
            )
        raw = variables.get(variable, "").strip()
        if raw:
            values[field_name] = raw
    try:
        return model.model_validate(values)
    except ValidationError as error:
        problem = error.errors()[0]
        field_name = str(problem["loc"][0]) if problem["loc"] else ""
        variable = variable_name(prefix, field_name)
        info = model.model_fields.get(field_name)
        form = info.description if info is not None and info.description else None
        if field_name not in values:
            raise SettingsError(variable, f"is required: {form or problem['msg']}") from None
        shown = values[field_name]
        if form:
            raise SettingsError(variable, f"must be {form}, got {shown!r}") from None
        raise SettingsError(variable, f"{problem['msg'].lower()}, got {shown!r}") from None


# ----------------------------------------------------------------------------- parsing

_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
_HOST = re.compile(
    r"[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)*"
)


class Reader:
    """Parses variables one by one so that every error names the variable; remembers
    which variables it was asked for."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self.env = env
        self.asked: list[str] = []

    def text(self, name: str) -> str | None:
        if name not in self.asked:
            self.asked.append(name)
        value = self.env.get(name, "").strip()
        return value or None

    def secret_keys(self, name: str) -> tuple[str, ...]:
        """Fernet keys, comma-separated, newest first; a bad one is named by its position,
        never echoed (it is a key, or a typo of one)."""
        from toolsafe.recovery.secrets import check_key

        keys = tuple(part.strip() for part in (self.text(name) or "").split(",") if part.strip())
        for index, key in enumerate(keys, start=1):
            try:
                check_key(key)
            except (ValueError, TypeError):
                raise SettingsError(
                    name,
                    f"key {index} is not a Fernet key: each must be 32 url-safe base64-encoded "
                    "bytes ("
                    "make one with `toolsafe secrets new-key`)",
                ) from None
        return keys

    def toolsafe_variables(self) -> dict[str, str]:
        return {key: self.env[key] for key in list(self.env) if key.startswith(PREFIX)}

    def number(self, name: str, default: float) -> float:
        raw = self.text(name)
        if raw is None:
            return default
        try:
            value = float(raw)
        except ValueError:
            raise SettingsError(name, f"must be a number of seconds, got {raw!r}") from None
        if value != value or value in (float("inf"), float("-inf")):
            raise SettingsError(name, f"must be a finite number, got {raw!r}")
        return value

    def integer(self, name: str, default: int) -> int:
        raw = self.text(name)
        if raw is None:
            return default
        try:
            return int(raw)
        except ValueError:
            raise SettingsError(name, f"must be a whole number, got {raw!r}") from None

    def knob(self, knob: str, default: float) -> float:
        name = PREFIX + knob.upper()
        return (
            self.integer(name, int(default)) if knob in WHOLE_KNOBS else self.number(name, default)
        )

    def flag(self, name: str) -> bool:
        raw = (self.text(name) or "0").lower()
        if raw in {"1", "true", "yes", "on"}:
            return True
        if raw in {"0", "false", "no", "off"}:
            return False
        raise SettingsError(name, f"must be 1/0, true/false, yes/no or on/off, got {raw!r}")

    def choice(self, name: str, allowed: tuple[str, ...], default: str) -> str:
        raw = (self.text(name) or default).lower()
        if raw not in allowed:
            raise SettingsError(name, f"must be one of {', '.join(allowed)}, got {raw!r}")
        return raw

    def url(self, name: str) -> str | None:
        raw = self.text(name)
        if raw is not None and not raw.startswith(("http://", "https://")):
            raise SettingsError(name, "must be an http:// or https:// URL")
        return raw

    def service_url(self, name: str, example: str) -> str | None:
        raw = self.text(name)
        if raw is not None and not _SCHEME.match(raw):
            raise SettingsError(name, f"must be a URL like {example}, got {raw!r}")
        return raw

    def broker_url(self, name: str, default: str) -> str:
        raw = self.service_url(name, DEFAULT_BROKER_URL) or default
        filesystem_folder(raw)
        return raw

    def database_url(self, name: str, default: str) -> str:
        raw = self.text(name) or default
        if not _SCHEME.match(raw) or not serves(raw):
            known = ", ".join(f"{scheme}://" for scheme in known_schemes())
            raise SettingsError(
                name,
                "must be a store URL such as sqlite:///path or "
                f"postgresql://user@host/database (known schemes: {known}), "
                f"got {raw.split('://')[0]!r}…",
            )
        return raw

    def modules(self, name: str, default: str) -> tuple[str, ...]:
        if name not in self.asked:
            self.asked.append(name)
        return parse_module_list(self.env.get(name, default))

    def path(self, name: str) -> str | None:
        raw = self.text(name)
        if raw is not None and not os.path.isabs(raw):
            raise SettingsError(name, f"must be an absolute path, got {raw!r}")
        return raw

    def port(self, name: str) -> int | None:
        raw = self.text(name)
        if raw is None:
            return None
        try:
            port = int(raw)
        except ValueError:
            raise SettingsError(name, f"must be a port number, got {raw!r}") from None
        if not 0 <= port <= 65535:
            raise SettingsError(name, f"must be between 0 and 65535, got {port}")
        return port

    def host(self, name: str, default: str) -> str:
        raw = self.text(name) or default
        try:
            ipaddress.ip_address(raw)
        except ValueError:
            if not _HOST.fullmatch(raw):
                raise SettingsError(
                    name, f"must be an IP address or a host name, got {raw!r}"
                ) from None
        return raw

    def name(self, name: str) -> str | None:
        raw = self.text(name)
        if raw is not None and (len(raw) > 200 or not raw.isprintable()):
            raise SettingsError(name, "must be a name of at most 200 printable characters")
        return raw

    def handlers(self, name: str) -> tuple[str, ...]:
        if name not in self.asked:
            self.asked.append(name)
        found = parse_module_list(self.env.get(name, ""))
        for path in found:
            module, _, attribute = path.partition(":")
            if not module or not attribute:
                raise SettingsError(
                    name, f"{path!r} must be an import path like 'package.module:function'"
                )
        return found

    def tool_policies(self, name: str) -> dict[str, dict[str, float]]:
        """Per-tool overrides of the policy knobs, checked for their keys and types."""
        raw = self.text(name)
        if raw is None:
            return {}
        try:
            data = json.loads(raw)
        except json.JSONDecodeError as error:
            raise SettingsError(name, f"must be a JSON object: {error.msg}") from None
        if not isinstance(data, dict):
            raise SettingsError(name, 'must be a JSON object {"tool": {"max_attempts": 3}}')
        result: dict[str, dict[str, float]] = {}
        for tool, overrides in data.items():
            if not isinstance(overrides, dict):
                raise SettingsError(f"{name}[{tool}]", "must be a JSON object of policy values")
            unknown = sorted(set(overrides) - set(KNOBS))
            if unknown:
                raise SettingsError(
                    f"{name}[{tool}]",
                    f"unknown keys {', '.join(unknown)}; known: {', '.join(KNOBS)}",
                )
            for key, value in overrides.items():
                whole = key in WHOLE_KNOBS
                valid = isinstance(value, int) if whole else isinstance(value, int | float)
                if isinstance(value, bool) or not valid:
                    kind = "a whole number" if whole else "a number"
                    raise SettingsError(f"{name}[{tool}].{key}", f"must be {kind}")
            result[str(tool)] = dict(overrides)
        return result
