"""A tool call as the store takes it: checked against toolsafe's own limits and the
adapter's validation, in the adapter's canonical form, secret fields sealed and hashed.

The client prepares every submit (one, many, grouped) and every corrected input here,
before anything is stored or sent; what cannot be submitted raises ``InvalidInput``
(or ``UnknownToolError`` from the registry).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from toolsafe.adapters.errors import (
    INPUT_NOT_AN_OBJECT,
    INPUT_NOT_JSON,
    INPUT_TOO_LARGE,
    InvalidInput,
)
from toolsafe.adapters.json_input import check_input
from toolsafe.adapters.protocol import Adapter, FieldError
from toolsafe.recovery.canonical import canonical_json, input_hash
from toolsafe.recovery.records import NewStep
from toolsafe.recovery.secrets import SecretKeyError
from toolsafe.settings import SettingsError
from toolsafe.tasks.runtime import Runtime


def new_step(
    runtime: Runtime, tool: str, input: Mapping[str, Any], operation_ref: str | None
) -> NewStep:
    """The call as the store takes it: validated, canonical, secrets sealed, hashed
    (``UnknownToolError``, ``InvalidInput`` when it cannot be submitted)."""
    adapter = runtime.adapter(tool)
    raw_size = check_shape(runtime, tool, input)
    problems = adapter.validate(input)
    if problems:
        raise InvalidInput(tool, _errors(problems))
    canonical = canonical_input(runtime, tool, adapter, input)
    stored, hashes = sealed(runtime, tool, adapter, canonical)
    if not adapter.secret_fields() and raw_size:
        # Steps stored before inputs were canonical carry the hash of the raw input.
        hashes.append(input_hash(input))
    return NewStep(
        tool,
        stored,
        operation_ref,
        runtime.policy_for(tool),
        digest=hashes[0],
        equivalent_hashes=hashes[1:],
        same_input=lambda found: _opens_to(runtime, found, canonical),
    )


def check_shape(runtime: Runtime, tool: str, input: object) -> int:
    """A JSON object within toolsafe's own size limit, or ``InvalidInput``; its size."""
    if not isinstance(input, Mapping):
        raise InvalidInput(tool, (("input", INPUT_NOT_AN_OBJECT),), INPUT_NOT_AN_OBJECT)
    check_input(tool, input)
    try:
        size = len(canonical_json(input).encode("utf-8"))
    except (TypeError, ValueError, RecursionError):
        # Keys or values JSON cannot carry (a set, NaN, a nested object too deep).
        raise InvalidInput(tool, (("input", INPUT_NOT_JSON),), INPUT_NOT_JSON) from None
    limit = runtime.settings.tools.max_input_bytes
    if size > limit:
        raise InvalidInput(
            tool, (("input", f"{INPUT_TOO_LARGE} > {limit} bytes"),), INPUT_TOO_LARGE
        )
    return size


def canonical_input(
    runtime: Runtime, tool: str, adapter: Adapter[Any], input: Mapping[str, Any]
) -> dict[str, Any]:
    """The input as the adapter's model reads it (``42.0`` is ``42``, defaults made
    explicit): what is stored, and what decides whether a repeat is the same call."""
    try:
        canonical = adapter.canonical_input(input)
    except (TypeError, ValueError) as error:
        raise InvalidInput(tool, (("input", INPUT_NOT_JSON),), INPUT_NOT_JSON) from error
    check_shape(runtime, tool, canonical)
    return canonical


def sealed(
    runtime: Runtime, tool: str, adapter: Adapter[Any], canonical: dict[str, Any]
) -> tuple[dict[str, Any], list[str]]:
    """What is stored: secret fields sealed; and the input's hashes, the one to store
    first (secret values enter them as an HMAC, never in the clear)."""
    secret = adapter.secret_fields()
    if not secret:
        return canonical, [input_hash(canonical)]
    box = runtime.secret_box
    if box is None:
        raise SettingsError(
            "TOOLSAFE_SECRET_KEYS",
            f"tool {tool} has secret input fields ({', '.join(sorted(secret))}); they are "
            "stored encrypted, so a key is required (`toolsafe secrets new-key`)",
        )
    return box.seal(canonical, secret), box.hashes(canonical, secret)


def _opens_to(runtime: Runtime, stored: dict[str, Any], canonical: dict[str, Any]) -> bool:
    """Whether a stored input is ``canonical`` once its secrets are opened."""
    try:
        return runtime.open_input(stored) == canonical
    except SecretKeyError:
        return False


def _errors(found: list[FieldError]) -> tuple[tuple[str, str], ...]:
    return tuple((error.field, error.code) for error in found)
