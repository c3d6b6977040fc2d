"""The root of toolsafe's exceptions and the ones raised at the adapter boundary.

Every exception keeps its constructor arguments in ``args`` so that it survives the
pickle round trip Celery puts it through.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

MAX_SHOWN: Final = 40
"""How much of a caller's value an error message quotes."""


def shown(value: object, limit: int = MAX_SHOWN) -> str:
    """A caller's value fit for an error message: a short quoted prefix and its length,
    never the whole of it (a 5 MB operation_ref must not become a 5 MB message)."""
    if not isinstance(value, str):
        return f"<{type(value).__name__}>"
    if len(value) <= limit:
        return repr(value)
    return f"{value[:limit]!r}… ({len(value)} characters)"


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
        return f"unknown tool {shown(self.tool)}; registered tools: {names}"


class AdapterLoadError(ToolsafeError, ImportError):
    """A module listed in TOOLSAFE_ADAPTERS could not be imported or registered."""

    def __init__(self, module: str, reason: str) -> None:
        super().__init__(module, reason)
        self.module = module
        self.reason = reason

    def __str__(self) -> str:
        return f"cannot load adapter module {self.module!r}: {self.reason}"


class TraitDeclarationError(ToolsafeError, TypeError):
    """An adapter declares traits that contradict each other or the adapter itself."""

    def __init__(self, tool: str, rule: str) -> None:
        super().__init__(tool, rule)
        self.tool = tool
        self.rule = rule

    def __str__(self) -> str:
        return f"adapter {shown(self.tool)}: {self.rule}"


class DuplicateToolError(ToolsafeError, ValueError):
    """Two adapters claim the same tool name."""

    def __init__(self, tool: str) -> None:
        super().__init__(tool)
        self.tool = tool

    def __str__(self) -> str:
        return f"tool {self.tool!r} is already registered"


INVALID_INPUT: Final = "INVALID_INPUT"
INPUT_TOO_LARGE: Final = "INPUT_TOO_LARGE"
INPUT_NOT_AN_OBJECT: Final = "INPUT_NOT_AN_OBJECT"
INPUT_NOT_JSON: Final = "INPUT_NOT_JSON"
INPUT_TOO_DEEP: Final = "INPUT_TOO_DEEP"
INPUT_CODES: Final = (
    INVALID_INPUT,
    INPUT_TOO_LARGE,
    INPUT_NOT_AN_OBJECT,
    INPUT_NOT_JSON,
    INPUT_TOO_DEEP,
)
"""``InvalidInput.code``: fields fail the adapter's model, the input is over toolsafe's
size limit, it is not a JSON object, it holds values JSON cannot carry, or it nests
deeper than ``toolsafe.adapters.json_input.MAX_JSON_DEPTH``."""

INPUT_REFUSALS: Final[Mapping[str, str]] = {
    INPUT_TOO_LARGE: "the submitted input is over toolsafe's own size limit",
    INPUT_NOT_AN_OBJECT: "the submitted input is not a JSON object",
    INPUT_NOT_JSON: "the submitted input holds values JSON cannot carry",
    INPUT_TOO_DEEP: "the submitted input nests arrays and objects too deep",
}
"""The refusals of a submitted input before any adapter reads it (``INVALID_INPUT``, the
adapter's own verdict, is the envelope code of that name)."""


class InvalidInput(ToolsafeError, ValueError):
    """The input cannot be submitted: nothing was stored or sent.

    ``code`` says why (``INPUT_CODES``); ``errors`` names the fields and their codes.
    """

    def __init__(
        self, tool: str, errors: tuple[tuple[str, str], ...], code: str = INVALID_INPUT
    ) -> None:
        # Field names may be a caller's keys (an extra field): keep them short.
        errors = tuple((field[:MAX_SHOWN], error_code) for field, error_code in errors[:20])
        super().__init__(tool, errors, code)
        self.tool = tool
        self.errors = errors
        self.code = code

    def __str__(self) -> str:
        shown_errors = ", ".join(f"{field} ({code})" for field, code in self.errors)
        return f"invalid input for {shown(self.tool)} [{self.code}]: {shown_errors}"
