"""Calling an adapter safely: whatever it returns or raises becomes a valid envelope.

An exception or a contract-breaking envelope is an adapter bug. For a write that may
have reached the downstream it is ``unknown`` (verify when there is a lookup, escalate
when there is none): a bug must never turn into a blind retry.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Final

from pydantic import ValidationError

from adapters.envelope import AnySuccess, Retry, ToolError, ToolSuccess, parse_result, to_wire
from adapters.protocol import (
    Adapter,
    CallContext,
    LookupFound,
    LookupNotFound,
    LookupResult,
    LookupUnavailable,
    field_errors_from,
)

log = logging.getLogger("toolsafe.adapters")

INVALID_INPUT: Final = "INVALID_INPUT"
ADAPTER_EXCEPTION: Final = "ADAPTER_EXCEPTION"
ADAPTER_CONTRACT_VIOLATION: Final = "ADAPTER_CONTRACT_VIOLATION"
LOOKUP_EXCEPTION: Final = "LOOKUP_EXCEPTION"


def invalid_input(operation_ref: str, fields: list[str], attempts_left: int = 1) -> ToolError:
    """The input failed validation before anything was sent."""
    shown = ", ".join(sorted(fields))[:180] or "input"
    return ToolError(
        code=INVALID_INPUT,
        category="validation",
        commit_state="not_committed",
        retry=Retry(directive="after_input_fix", max_attempts_remaining=attempts_left),
        next_action="correct_input",
        operation_ref=operation_ref,
        safe_details={"fields": shown},
        agent_message=f"The input was rejected before sending. Fix these fields: {shown}.",
        user_message="The request needs corrected input.",
    )


def internal_error(
    adapter: Adapter[Any], operation_ref: str, code: str, *, may_have_sent: bool
) -> ToolError:
    """The envelope for an adapter bug, honest about what may have happened."""
    if adapter.writes and may_have_sent:
        next_action = "verify_operation" if adapter.has_lookup else "escalate"
        return ToolError(
            code=code,
            category="internal",
            commit_state="unknown",
            retry=Retry(directive="never", max_attempts_remaining=0),
            next_action=next_action,
            operation_ref=operation_ref,
            safe_details={"tool": adapter.tool},
            agent_message=(
                "The tool failed internally after the request may have been sent; "
                "the outcome is unknown and must be verified before any retry."
            ),
            user_message="We are checking whether the action took effect.",
        )
    return ToolError(
        code=code,
        category="internal",
        commit_state="not_committed",
        retry=Retry(directive="never", max_attempts_remaining=0),
        next_action="escalate",
        operation_ref=operation_ref,
        safe_details={"tool": adapter.tool},
        agent_message="The tool failed internally; nothing was changed. An operator will look.",
        user_message="The action could not be completed and was handed to an operator.",
    )


def checked(adapter: Adapter[Any], operation_ref: str, returned: object) -> AnySuccess | ToolError:
    """Re-validate what an adapter returned against the contract."""
    if not isinstance(returned, ToolSuccess | ToolError):
        log.error(
            "adapter returned a non-envelope",
            extra={"event": "adapter_contract_violation", "tool": adapter.tool},
        )
        return internal_error(
            adapter, operation_ref, ADAPTER_CONTRACT_VIOLATION, may_have_sent=True
        )
    try:
        envelope = parse_result(to_wire(returned))
    except (ValidationError, ValueError, TypeError):
        log.error(
            "adapter returned an envelope that breaks the contract",
            extra={"event": "adapter_contract_violation", "tool": adapter.tool},
        )
        return internal_error(
            adapter, operation_ref, ADAPTER_CONTRACT_VIOLATION, may_have_sent=True
        )
    if envelope.operation_ref != operation_ref:
        log.error(
            "adapter answered for another operation_ref",
            extra={"event": "adapter_contract_violation", "tool": adapter.tool},
        )
        return internal_error(
            adapter, operation_ref, ADAPTER_CONTRACT_VIOLATION, may_have_sent=True
        )
    if (
        not adapter.writes
        and isinstance(envelope, ToolError)
        and envelope.commit_state == "unknown"
    ):
        # A read changes nothing downstream: its outcome cannot be unknown.
        return internal_error(
            adapter, operation_ref, ADAPTER_CONTRACT_VIOLATION, may_have_sent=False
        )
    return envelope


def call_adapter(
    adapter: Adapter[Any],
    raw_input: Mapping[str, Any],
    operation_ref: str,
    context: CallContext | None = None,
) -> AnySuccess | ToolError:
    """Validate the input, execute, and check the result; never raises for adapter bugs."""
    try:
        parsed = adapter.parse_input(raw_input)
    except ValidationError as error:
        return invalid_input(operation_ref, [e.field for e in field_errors_from(error)])
    try:
        problems = adapter.check(parsed)
    except Exception:
        log.exception(
            "adapter check raised", extra={"event": "adapter_exception", "tool": adapter.tool}
        )
        return internal_error(adapter, operation_ref, ADAPTER_EXCEPTION, may_have_sent=False)
    if problems:
        return invalid_input(operation_ref, [p.field for p in problems])
    try:
        returned = adapter.execute(parsed, operation_ref, context or CallContext())
    except Exception as error:
        log.error(
            "adapter raised %s",
            type(error).__name__,
            extra={"event": "adapter_exception", "tool": adapter.tool},
        )
        return internal_error(adapter, operation_ref, ADAPTER_EXCEPTION, may_have_sent=True)
    return checked(adapter, operation_ref, returned)


def call_lookup(adapter: Adapter[Any], operation_ref: str) -> LookupResult:
    """Run the adapter's lookup; an exception or a wrong answer counts as unavailable."""
    now = datetime.now(UTC)
    if not adapter.has_lookup:
        return LookupUnavailable(checked_at=now, code="NO_LOOKUP")
    try:
        found = adapter.lookup(operation_ref)
    except Exception as error:
        log.error(
            "lookup raised %s",
            type(error).__name__,
            extra={"event": "lookup_exception", "tool": adapter.tool},
        )
        return LookupUnavailable(checked_at=now, code=LOOKUP_EXCEPTION)
    if not isinstance(found, LookupFound | LookupNotFound | LookupUnavailable):
        return LookupUnavailable(checked_at=now, code=ADAPTER_CONTRACT_VIOLATION)
    return found
