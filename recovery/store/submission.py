"""What a store checks of a submission before it writes anything, and the errors it
raises: the operation_ref (made when none is given) and its grammar, the input's shape
and hash, a repeat of a stored ref against its call (R2), a batch's calls one by one;
the errors themselves are in ``errors``."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, Protocol

from toolsafe.adapters.envelope import MAX_OPERATION_REF, OPERATION_REF_PATTERN
from toolsafe.adapters.errors import (
    INPUT_NOT_AN_OBJECT,
    INPUT_NOT_JSON,
    InvalidInput,
    ToolsafeError,
)
from toolsafe.recovery.canonical import input_hash
from toolsafe.recovery.records import NewStep
from toolsafe.recovery.store.errors import (
    InvalidOperationRef,
    OperationRefConflict,
    StepNotFound,
)

__all__ = [
    "InvalidOperationRef",
    "OperationRefConflict",
    "StepNotFound",
    "check_repeat",
    "checked_batch",
    "checked_submission",
    "in_batch",
    "new_operation_ref",
    "valid_operation_ref",
]


class Stored(Protocol):
    """What a repeat is checked against: the stored step (a record or a row)."""

    @property
    def tool(self) -> str: ...

    @property
    def input_hash(self) -> str: ...

    @property
    def input(self) -> Any: ...


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
    existing: Stored,
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
