"""What a store checks of a submission before it writes anything, and the errors it
raises: the operation_ref (made when none is given) and its grammar, the input's shape
and hash, a repeat of a stored ref against its call (R2), a batch's calls one by one;
``StepNotFound``, ``OperationRefConflict``, ``InvalidOperationRef``."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from sqlalchemy import Row

from toolsafe.adapters.envelope import MAX_OPERATION_REF, OPERATION_REF_PATTERN
from toolsafe.adapters.errors import (
    INPUT_NOT_AN_OBJECT,
    INPUT_NOT_JSON,
    InvalidInput,
    ToolsafeError,
    shown,
)
from toolsafe.recovery.canonical import input_hash
from toolsafe.recovery.records import NewStep, StepRecord


def _kept(value: str) -> str:
    # An exception keeps (and pickles, and reprs) at most this much of a caller's value.
    return value[: MAX_OPERATION_REF + 1] if isinstance(value, str) else value


def _quoted(operation_ref: str, length: int) -> str:
    if length > len(operation_ref):
        return f"{operation_ref[:40]!r}… ({length} characters)"
    return shown(operation_ref)


class StepNotFound(ToolsafeError, LookupError):
    def __init__(self, operation_ref: str, length: int | None = None) -> None:
        length = len(operation_ref) if length is None else length
        operation_ref = _kept(operation_ref)
        super().__init__(operation_ref, length)
        self.operation_ref = operation_ref
        self.length = length

    def __str__(self) -> str:
        return f"no step with operation_ref {_quoted(self.operation_ref, self.length)}"


class OperationRefConflict(ToolsafeError, ValueError):
    """The operation_ref exists with another tool or another input (R2)."""

    def __init__(self, operation_ref: str, what: str) -> None:
        super().__init__(operation_ref, what)
        self.operation_ref = operation_ref
        self.what = what

    def __str__(self) -> str:
        return (
            f"operation_ref {shown(self.operation_ref)} already exists with a different "
            f"{self.what}; "
            "use a new operation_ref for a different call"
        )


class InvalidOperationRef(ToolsafeError, ValueError):
    """An operation_ref that cannot travel in an envelope (see ``toolsafe.adapters.envelope``)."""

    def __init__(self, operation_ref: str, length: int | None = None) -> None:
        length = len(operation_ref) if length is None else length
        operation_ref = _kept(operation_ref)
        super().__init__(operation_ref, length)
        self.operation_ref = operation_ref
        self.length = length

    def __str__(self) -> str:
        quoted = _quoted(self.operation_ref, self.length)
        return (
            f"operation_ref {quoted} is not valid: 1 to {MAX_OPERATION_REF} "
            "letters, digits and _ . : / -, starting with a letter or digit"
        )


def valid_operation_ref(ref: object) -> bool:
    return (
        isinstance(ref, str)
        and len(ref) <= MAX_OPERATION_REF
        and OPERATION_REF_PATTERN.fullmatch(ref) is not None
    )


def new_operation_ref() -> str:
    return f"op_{uuid.uuid4().hex}"


def checked_submission(
    tool: str, input: object, operation_ref: str | None, digest: str | None
) -> tuple[str, str]:
    """The operation_ref (made when None) and input hash of a submission, or the error
    ``submit`` raises for it: a malformed ref, an input that is not a JSON object."""
    ref = operation_ref if operation_ref is not None else new_operation_ref()
    if not valid_operation_ref(ref):
        raise InvalidOperationRef(ref)
    if not isinstance(input, Mapping):
        raise InvalidInput(tool, (("input", INPUT_NOT_AN_OBJECT),), INPUT_NOT_AN_OBJECT)
    try:
        return ref, digest or input_hash(input)
    except (TypeError, ValueError, RecursionError):
        raise InvalidInput(tool, (("input", INPUT_NOT_JSON),), INPUT_NOT_JSON) from None


def check_repeat(
    ref: str,
    existing: StepRecord | Row[Any],
    tool: str,
    digest: str,
    equivalent_hashes: Collection[str],
    same_input: Callable[[dict[str, Any]], bool] | None,
) -> None:
    """A repeat of ``ref`` must be the same call: ``OperationRefConflict`` otherwise (R2)."""
    if existing.tool != tool:
        raise OperationRefConflict(ref, "tool")
    if (
        existing.input_hash != digest
        and existing.input_hash not in equivalent_hashes
        and not (same_input is not None and same_input(dict(existing.input)))
    ):
        raise OperationRefConflict(ref, "input")


def in_batch(error: BaseException, index: int) -> None:
    """Note on ``error`` that call ``index`` of a batch raised it; nothing was submitted."""
    error.add_note(f"call {index} of the batch (counting from 0); no call of it was submitted")


def checked_batch(calls: Sequence[NewStep]) -> list[tuple[str, str]]:
    """``checked_submission`` of each call of a batch; a refused call raises with a note
    naming it (``in_batch``)."""
    checked: list[tuple[str, str]] = []
    for index, call in enumerate(calls):
        try:
            checked.append(
                checked_submission(call.tool, call.input, call.operation_ref, call.digest)
            )
        except ToolsafeError as error:
            in_batch(error, index)
            raise
    return checked
