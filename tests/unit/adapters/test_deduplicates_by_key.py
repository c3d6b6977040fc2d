"""``deduplicates_by_key``: declared on an adapter class, through ``@tool`` or on the HTTP
toolkit, refused where it cannot hold, and carried into the traits the runtime decides by."""

from __future__ import annotations

import pickle
from datetime import timedelta
from typing import Any, ClassVar

import pytest

from toolsafe.adapters import codes
from toolsafe.adapters.decorators import tool
from toolsafe.adapters.errors import TraitDeclarationError
from toolsafe.adapters.examples.invoice import CreateInvoice
from toolsafe.adapters.http import HttpSettings
from toolsafe.adapters.registry import Registry
from toolsafe.testing.runtime import ScriptedAdapter, memory_runtime

SETTINGS = HttpSettings(base_url="http://127.0.0.1:9")


class DeduplicatedScripted(ScriptedAdapter):
    deduplicates_by_key: ClassVar[bool] = True


class ReadDeclaringIt(ScriptedAdapter):
    tool: ClassVar[str] = "read_declaring_it"
    writes: ClassVar[bool] = False
    has_lookup: ClassVar[bool] = False
    deduplicates_by_key: ClassVar[bool] = True


class BlindWriteDeclaringIt(ScriptedAdapter):
    tool: ClassVar[str] = "blind_write_declaring_it"
    has_lookup: ClassVar[bool] = False
    deduplicates_by_key: ClassVar[bool] = True


class InvoiceDeduplicated(CreateInvoice):
    deduplicates_by_key: ClassVar[bool] = True


class InvoiceWithoutInFlightCode(CreateInvoice):
    tool: ClassVar[str] = "invoice_without_in_flight_code"
    deduplicates_by_key: ClassVar[bool] = True
    upstream_codes = {  # noqa: RUF012 - the base class declares it
        upstream: mapped
        for upstream, mapped in CreateInvoice.upstream_codes.items()
        if mapped != codes.IDEMPOTENCY_KEY_IN_FLIGHT
    }


def test_an_adapter_declaring_it_registers_and_its_traits_say_so() -> None:
    runtime, _ = memory_runtime(DeduplicatedScripted())
    traits = runtime.traits_for(DeduplicatedScripted.tool)
    assert traits.deduplicates_by_key
    assert traits.writes and traits.has_lookup


def test_an_adapter_without_it_keeps_the_longest_call_rule() -> None:
    runtime, _ = memory_runtime(ScriptedAdapter())
    traits = runtime.traits_for(ScriptedAdapter.tool)
    assert not traits.deduplicates_by_key
    assert traits.longest_call > timedelta(0)


def test_a_read_declaring_it_is_refused_at_registration() -> None:
    with pytest.raises(TraitDeclarationError, match=r"'read_declaring_it'.*on a read"):
        Registry().register(ReadDeclaringIt())


def test_a_write_without_a_lookup_declaring_it_is_refused_at_registration() -> None:
    with pytest.raises(TraitDeclarationError) as refused:
        Registry().register(BlindWriteDeclaringIt())
    assert refused.value.tool == "blind_write_declaring_it"
    assert "without a lookup" in str(refused.value)


def test_the_http_toolkit_needs_the_key_in_flight_answer_mapped() -> None:
    declared = InvoiceDeduplicated(SETTINGS)
    assert declared.deduplicates_by_key  # the class's declaration, not the constructor's
    Registry().register(declared)
    Registry().register(CreateInvoice(SETTINGS, deduplicates_by_key=True))
    with pytest.raises(TraitDeclarationError, match=codes.IDEMPOTENCY_KEY_IN_FLIGHT) as refused:
        Registry().register(InvoiceWithoutInFlightCode(SETTINGS))
    assert refused.value.tool == "invoice_without_in_flight_code"


def _charge(amount: int, operation_ref: str) -> dict[str, Any]:
    return {"id": f"ch_{operation_ref}", "amount": amount}


def _find(operation_ref: str) -> dict[str, Any] | None:
    return None


def test_the_tool_decorator_declares_it_with_a_lookup() -> None:
    charge = tool(name="charge", lookup=_find, deduplicates_by_key=True)(_charge)
    assert charge.deduplicates_by_key
    plain = tool(name="plain_charge", lookup=_find)(_charge)
    assert not plain.deduplicates_by_key


def test_the_tool_decorator_refuses_it_without_a_lookup() -> None:
    with pytest.raises(TraitDeclarationError, match=r"'blind_charge'.*without a lookup"):
        tool(name="blind_charge", deduplicates_by_key=True)(_charge)


def test_the_refusal_survives_pickling() -> None:
    error = TraitDeclarationError("t", "a rule")
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is TraitDeclarationError and str(copy) == str(error)
