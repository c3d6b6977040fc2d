"""JSON a caller sent, read exactly or not at all: strict UTF-8 (a bad byte is never
replaced by U+FFFD), no lone surrogate escapes, no NaN or infinite numbers, and at most
:data:`MAX_JSON_DEPTH` levels of nesting, so no input reaches a recursive encoder that
would fail on it halfway. Every door (MCP stdio and ``/mcp``, the gateway's bodies, the
CLI, the clients) reads and checks with these, and says what is wrong in one line."""

from __future__ import annotations

import math
import re
from typing import Final, Literal

import pydantic_core

from toolsafe.adapters.errors import (
    INPUT_NOT_JSON,
    INPUT_TOO_DEEP,
    InvalidInput,
    ToolsafeError,
)

MAX_JSON_DEPTH: Final = 64
"""Arrays and objects nested deeper than this are refused (a tool's input never needs
more; the recursive encoders and hashes behind a submit would fail near 1,000)."""

JsonFault = Literal["not_utf8", "lone_surrogate", "too_deep", "not_json"]

_SURROGATE_ESCAPE: Final = re.compile(r"\\u[dD][89abAB]|\\u[dD][c-fC-F]")


class JsonInputError(ToolsafeError, ValueError):
    """The text is not JSON toolsafe can read exactly; ``fault`` says which rule broke."""

    def __init__(self, fault: JsonFault, message: str) -> None:
        super().__init__(fault, message)
        self.fault = fault
        self.message = message

    def __str__(self) -> str:
        return self.message


def too_deep(limit: int = MAX_JSON_DEPTH) -> JsonInputError:
    return JsonInputError("too_deep", f"JSON nested deeper than {limit} levels is not accepted")


def check_value(value: object, limit: int = MAX_JSON_DEPTH) -> None:
    """Raise :class:`JsonInputError` when ``value`` nests deeper than ``limit`` or holds
    a number JSON cannot carry (NaN, an infinity). Iterative: any depth is safe here."""
    stack: list[tuple[object, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list | tuple):
            if depth >= limit:
                raise too_deep(limit)
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
        elif isinstance(item, float) and not math.isfinite(item):
            raise JsonInputError("not_json", "a number out of JSON's range (NaN or infinite)")


def _decoded(data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise JsonInputError(
            "not_utf8", f"the text is not valid UTF-8 (byte {error.start} cannot be decoded)"
        ) from None


def read_json(data: bytes | str, limit: int = MAX_JSON_DEPTH) -> object:
    """The JSON value of ``data``, or :class:`JsonInputError` naming what is wrong
    (never the text itself: it may be large or hostile)."""
    text = _decoded(data) if isinstance(data, bytes) else data
    try:
        value: object = pydantic_core.from_json(text, allow_inf_nan=False)
    except ValueError as error:
        reason = str(error)
        if "recursion limit" in reason:
            raise too_deep(limit) from None
        if "surrogate" in reason or (
            "hex escape" in reason and _SURROGATE_ESCAPE.search(text) is not None
        ):
            raise JsonInputError(
                "lone_surrogate",
                f"a lone surrogate escape (such as \\ud800) is not a character ({reason})",
            ) from None
        raise JsonInputError("not_json", f"not JSON: {reason}") from None
    check_value(value, limit)
    return value


def check_input(tool: str, value: object, limit: int = MAX_JSON_DEPTH) -> None:
    """:func:`check_value` for a tool's input, as the ``InvalidInput`` a submit raises
    (``INPUT_TOO_DEEP``, ``INPUT_NOT_JSON``): every client refuses the same input the
    same way, before anything is stored or sent."""
    try:
        check_value(value, limit)
    except JsonInputError as error:
        if error.fault == "too_deep":
            reason = f"{INPUT_TOO_DEEP} > {limit} levels"
            raise InvalidInput(tool, (("input", reason),), INPUT_TOO_DEEP) from None
        raise InvalidInput(tool, (("input", INPUT_NOT_JSON),), INPUT_NOT_JSON) from None
