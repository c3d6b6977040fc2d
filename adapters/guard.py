"""Calling an adapter safely: whatever it returns or raises becomes a valid envelope.

An exception or a contract-breaking envelope is an adapter bug. For a write that may
have reached the downstream it is ``unknown`` (verify when there is a lookup, escalate
when there is none): a bug must never turn into a blind retry.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, Final

from pydantic import ValidationError

from toolsafe.adapters import codes, lookup_codes
from toolsafe.adapters.envelope import (
    AnySuccess,
    NextAction,
    ToolError,
    ToolSuccess,
    parse_result,
    to_wire,
)
from toolsafe.adapters.protocol import (
    Adapter,
    CallContext,
    FieldError,
    LookupFound,
    LookupNotFound,
    LookupResult,
    LookupUnavailable,
    field_errors_from,
)
from toolsafe.adapters.results import Redaction, clean_result

log = logging.getLogger("toolsafe.adapters")

INVALID_INPUT: Final = codes.INVALID_INPUT
ADAPTER_EXCEPTION: Final = codes.ADAPTER_EXCEPTION
ADAPTER_CONTRACT_VIOLATION: Final = codes.ADAPTER_CONTRACT_VIOLATION
LOOKUP_EXCEPTION: Final = lookup_codes.LOOKUP_EXCEPTION


def invalid_input(
    operation_ref: str, fields: list[str], attempts_left: int = 1, code: str = INVALID_INPUT
) -> ToolError:
    """The input failed validation before anything was sent.

    ``code`` may name a more precise catalogued validation code (e.g.
    ``INVALID_RECIPIENT_ADDRESS``); anything else falls back to ``INVALID_INPUT``.
    """
    spec = codes.CATALOGUE.get(code)
    if spec is None or spec.category != "validation" or spec.directive != "after_input_fix":
        code = INVALID_INPUT
    names = sorted(set(fields))
    details: dict[str, object] = {"fields": ", ".join(names)[:180] or "input"}
    if len(names) == 1:
        details["field"] = names[0]
    return codes.build_error(code, operation_ref, details, attempts_remaining=attempts_left)


def internal_error(
    adapter: Adapter[Any], operation_ref: str, code: str, *, may_have_sent: bool
) -> ToolError:
    """The envelope for an adapter bug, honest about what may have happened."""
    details = {"tool": adapter.tool}
    if adapter.writes and may_have_sent:
        action: NextAction = "verify_operation" if adapter.has_lookup else "escalate"
        return codes.build_error(
            code, operation_ref, details, commit_state="unknown", next_action=action
        )
    return codes.build_error(code, operation_ref, details)


def _problem_code(problems: list[FieldError]) -> str:
    """The adapter's own code when every problem shares one, else ``INVALID_INPUT``."""
    found = {problem.code for problem in problems}
    return found.pop() if len(found) == 1 else INVALID_INPUT


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


Redactions = tuple[Redaction, ...]


def _log_redactions(adapter: Adapter[Any], found: Redactions, what: str) -> None:
    if found:
        log.warning(
            "%s of %s: %d part(s) withheld (%s)",
            what,
            adapter.tool,
            len(found),
            ", ".join(sorted({item.kind for item in found})),
            extra={"event": "result_redacted", "tool": adapter.tool, "redactions": len(found)},
        )


def _hosts(adapter: Adapter[Any]) -> frozenset[str]:
    try:
        return frozenset(adapter.link_hosts())
    except Exception as error:
        # A broken override declares nothing: every link is neutralised.
        log.error(
            "link_hosts raised %s",
            type(error).__name__,
            extra={"event": "adapter_exception", "tool": adapter.tool},
        )
        return frozenset()


def cleaned_success(adapter: Adapter[Any], envelope: AnySuccess) -> tuple[AnySuccess, Redactions]:
    """The success with its result through the adapter's result model and cleaned."""
    result, found = clean_result(envelope.result, adapter.result_model, hosts=_hosts(adapter))
    _log_redactions(adapter, found, "success result")
    if not found and result == envelope.result:
        return envelope, found
    return envelope.model_copy(update={"result": result}), found


def call_adapter(
    adapter: Adapter[Any],
    raw_input: Mapping[str, Any],
    operation_ref: str,
    context: CallContext | None = None,
) -> AnySuccess | ToolError:
    """Validate the input, execute, and check the result; never raises for adapter bugs."""
    return call_adapter_recorded(adapter, raw_input, operation_ref, context)[0]


def call_adapter_recorded(
    adapter: Adapter[Any],
    raw_input: Mapping[str, Any],
    operation_ref: str,
    context: CallContext | None = None,
) -> tuple[AnySuccess | ToolError, Redactions]:
    """:func:`call_adapter`, plus what was withheld from a success result."""
    envelope = _call_adapter(adapter, raw_input, operation_ref, context)
    if isinstance(envelope, ToolError):
        return envelope, ()
    return cleaned_success(adapter, envelope)


def _call_adapter(
    adapter: Adapter[Any],
    raw_input: Mapping[str, Any],
    operation_ref: str,
    context: CallContext | None = None,
) -> AnySuccess | ToolError:
    try:
        parsed = adapter.parse_input(raw_input)
    except ValidationError as error:
        return invalid_input(operation_ref, [e.field for e in field_errors_from(error)])
    try:
        problems = adapter.check(parsed)
    except Exception as error:
        # The type only: an exception's text may quote the input (customer data).
        log.error(
            "adapter check raised %s",
            type(error).__name__,
            extra={"event": "adapter_exception", "tool": adapter.tool},
        )
        return internal_error(adapter, operation_ref, ADAPTER_EXCEPTION, may_have_sent=False)
    if problems:
        return invalid_input(
            operation_ref, [p.field for p in problems], code=_problem_code(problems)
        )
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
    return call_lookup_recorded(adapter, operation_ref)[0]


def call_lookup_recorded(
    adapter: Adapter[Any], operation_ref: str
) -> tuple[LookupResult, Redactions]:
    """:func:`call_lookup`, with a found result cleaned like a success's."""
    found = _call_lookup(adapter, operation_ref)
    if not isinstance(found, LookupFound):
        return found, ()
    result, withheld = clean_result(found.result, adapter.result_model, hosts=_hosts(adapter))
    _log_redactions(adapter, withheld, "lookup result")
    return replace(found, result=result), withheld


def _call_lookup(adapter: Adapter[Any], operation_ref: str) -> LookupResult:
    now = datetime.now(UTC)
    if not adapter.has_lookup:
        return LookupUnavailable(checked_at=now, code=lookup_codes.LOOKUP_NOT_PROVIDED)
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
        return LookupUnavailable(checked_at=now, code=lookup_codes.LOOKUP_CONTRACT_VIOLATION)
    return found
