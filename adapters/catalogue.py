"""What a client knows of the registered tools without holding their adapters: name,
description, whether they write and can be looked up, the input's JSON Schema and the
attempt limit. The in-process clients build it from the registry, the gateway clients
from ``GET /v1/tools``; the agent stacks' tool definitions are made from it."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from toolsafe.adapters.errors import UnknownToolError
from toolsafe.adapters.protocol import Adapter
from toolsafe.adapters.registry import Registry


def input_schema(adapter: Adapter[Any]) -> dict[str, Any]:
    """The adapter's input model as JSON Schema (always a top-level object)."""
    schema: dict[str, Any] = adapter.input_model.model_json_schema()
    schema.setdefault("type", "object")
    return schema


@dataclass(frozen=True)
class ToolSpec:
    """One registered tool as a client sees it."""

    name: str
    description: str
    writes: bool
    has_lookup: bool
    input_schema: Mapping[str, Any] = field(hash=False)
    max_attempts: int | None = None
    """The policy's limit on executions (None where it is not known)."""
    title: str | None = None

    @classmethod
    def of(cls, adapter: Adapter[Any], max_attempts: int | None = None) -> ToolSpec:
        return cls(
            name=adapter.tool,
            description=adapter.describe(),
            writes=adapter.writes,
            has_lookup=adapter.has_lookup,
            input_schema=input_schema(adapter),
            max_attempts=max_attempts,
            title=adapter.title,
        )


class Catalogue:
    """The tools, by name, in the registry's order; ``get`` of an unknown name raises
    ``UnknownToolError`` naming the known ones, as the registry does."""

    def __init__(self, specs: Iterable[ToolSpec]) -> None:
        self._specs = {spec.name: spec for spec in specs}

    @classmethod
    def of(cls, registry: Registry, max_attempts: Callable[[str], int] | None = None) -> Catalogue:
        """The registry's tools; ``max_attempts(tool)`` gives each tool's limit."""
        return cls(
            ToolSpec.of(registry.get(name), max_attempts(name) if max_attempts else None)
            for name in registry.tools()
        )

    def tools(self) -> tuple[str, ...]:
        return tuple(self._specs)

    def get(self, tool: str) -> ToolSpec:
        try:
            return self._specs[tool]
        except KeyError:
            raise UnknownToolError(tool, self.tools()) from None

    def __contains__(self, tool: object) -> bool:
        return tool in self._specs

    def __iter__(self) -> Iterator[ToolSpec]:
        return iter(self._specs.values())

    def __len__(self) -> int:
        return len(self._specs)


def catalogue(source: Registry | Catalogue) -> Catalogue:
    """A catalogue as it is, or the registry's (without attempt limits)."""
    return source if isinstance(source, Catalogue) else Catalogue.of(source)
