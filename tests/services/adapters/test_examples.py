"""The example adapters against the example downstream: the article's paths end to end
at the adapter boundary (the runtime's part is tested in tests/recovery)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import timedelta
from typing import Any, TypeVar

import httpx
import pytest

from tests.support.adapters.downstream_support import make_visible, wait_in_flight
from toolsafe.adapters.envelope import ToolError, ToolSuccess, flagged_fields
from toolsafe.adapters.examples.downstream import DownstreamService
from toolsafe.adapters.examples.email import SendEmail
from toolsafe.adapters.examples.invoice import CreateInvoice
from toolsafe.adapters.guard import call_adapter, call_lookup
from toolsafe.adapters.http import HttpAdapter, HttpSettings
from toolsafe.adapters.protocol import CallContext, LookupFound, LookupNotFound, LookupUnavailable
from toolsafe.adapters.registry import Registry
from toolsafe.settings import Settings

AdapterT = TypeVar("AdapterT", bound=HttpAdapter[Any])
REF = "run_81/step_4"
INVOICE = {"customer_id": "C-17", "amount_cents": 1200, "currency": "EUR"}
EMAIL = {"recipient_email": "ann@mail.toolsafe.dev", "subject": "Your invoice", "body": "hi"}


OPENED: list[HttpAdapter[Any]] = []


@pytest.fixture(autouse=True)
def _close_adapters() -> Iterator[None]:
    # Adapters keep pooled keep-alive connections; close them before the server goes.
    yield
    while OPENED:
        OPENED.pop().close()


def opened(adapter: AdapterT) -> AdapterT:
    OPENED.append(adapter)
    return adapter


def fast(url: str) -> HttpSettings:
    return HttpSettings(base_url=url, connect_timeout=0.5, read_timeout=0.3, write_timeout=0.5)


def invoices(service: DownstreamService, **kw: Any) -> CreateInvoice:
    return opened(CreateInvoice(fast(service.url), **kw))


def add_fault(service: DownstreamService, **spec: Any) -> None:
    service.state.add_fault(spec)


def error(result: object) -> ToolError:
    assert isinstance(result, ToolError), result
    return result


def test_create_invoice_once_with_evidence(downstream: DownstreamService) -> None:
    adapter = invoices(downstream)
    first = call_adapter(adapter, INVOICE, REF)
    again = call_adapter(adapter, INVOICE, REF)
    assert isinstance(first, ToolSuccess) and isinstance(again, ToolSuccess)
    assert first.verification.evidence_ref == again.verification.evidence_ref
    assert first.result["amount_cents"] == 1200  # type: ignore[index,call-overload]
    found = adapter.get_invoice_by_operation_ref(REF)
    assert isinstance(found, LookupFound)
    assert found.evidence_ref == first.verification.evidence_ref
    assert downstream.effects() == {REF: 1}


def test_stall_after_store_is_unknown_then_verified(downstream: DownstreamService) -> None:
    add_fault(downstream, fault="stall_after_store", operation_ref=REF, seconds=3)
    adapter = invoices(downstream)
    envelope = error(call_adapter(adapter, INVOICE, REF))
    assert (envelope.code, envelope.commit_state, envelope.next_action) == (
        "OUTCOME_UNKNOWN", "unknown", "verify_operation",
    )  # fmt: skip
    assert (envelope.retry.directive, envelope.retry.max_attempts_remaining) == ("never", 0)
    assert isinstance(call_lookup(adapter, REF), LookupFound)
    assert downstream.effects() == {REF: 1}


def test_gateway_502_after_store_is_unknown_and_the_write_is_found(
    naive_downstream: DownstreamService,
) -> None:
    add_fault(naive_downstream, fault="error_after_store", operation_ref=REF)
    adapter = invoices(naive_downstream)
    envelope = error(call_adapter(adapter, INVOICE, REF))
    assert (envelope.code, envelope.safe_details["reason"]) == ("OUTCOME_UNKNOWN", "http_502")
    found = call_lookup(adapter, REF)
    assert isinstance(found, LookupFound)
    assert naive_downstream.effects() == {REF: 1}


def test_dropped_before_store_is_not_found_and_the_same_key_then_writes_once(
    naive_downstream: DownstreamService,
) -> None:
    add_fault(naive_downstream, fault="drop_before_store", operation_ref=REF)
    adapter = invoices(naive_downstream)
    assert error(call_adapter(adapter, INVOICE, REF)).commit_state == "unknown"
    assert isinstance(call_lookup(adapter, REF), LookupNotFound)
    assert isinstance(call_adapter(adapter, INVOICE, REF), ToolSuccess)
    assert naive_downstream.effects() == {REF: 1}


def test_rate_limit_waits_until_not_before(downstream: DownstreamService) -> None:
    add_fault(downstream, fault="rate_limit", operation_ref=REF, retry_after=4)
    envelope = error(call_adapter(invoices(downstream), INVOICE, REF))
    assert (envelope.code, envelope.next_action) == ("RATE_LIMITED", "wait_and_retry")
    assert envelope.retry.not_before is not None
    assert envelope.safe_details["retry_after_seconds"] == 4
    assert downstream.effects() == {}


def test_version_conflict_and_missing_approval(downstream: DownstreamService) -> None:
    adapter = invoices(downstream)
    add_fault(downstream, fault="version_conflict", operation_ref=REF)
    conflict = error(call_adapter(adapter, INVOICE, REF))
    assert (conflict.code, conflict.category, conflict.next_action) == (
        "VERSION_CONFLICT", "conflict", "escalate",
    )  # fmt: skip
    add_fault(downstream, fault="require_approval", operation_ref=REF, times=None)
    blocked = error(call_adapter(adapter, INVOICE, REF))
    assert (blocked.code, blocked.category, blocked.next_action) == (
        "MISSING_APPROVAL", "authorization", "request_approval",
    )  # fmt: skip
    approved = call_adapter(adapter, INVOICE, REF, CallContext(attempt=2, approval_ref="apr_9"))
    assert isinstance(approved, ToolSuccess)
    assert downstream.effects() == {REF: 1}


def test_lookup_down_is_unavailable(downstream: DownstreamService) -> None:
    add_fault(downstream, fault="lookup_down", operation_ref=REF)
    found = call_lookup(invoices(downstream), REF)
    assert isinstance(found, LookupUnavailable)
    assert found.code == "LOOKUP_HTTP_503"


def test_eventual_consistency_inside_the_window(downstream: DownstreamService) -> None:
    # Invisible for a minute unless the test ends it: no race with a slow machine.
    add_fault(downstream, fault="eventual_consistency", operation_ref=REF, seconds=60)
    adapter = invoices(downstream, consistency_window=timedelta(seconds=60))
    assert adapter.consistency_window == timedelta(seconds=60)
    assert isinstance(call_adapter(adapter, INVOICE, REF), ToolSuccess)
    assert isinstance(call_lookup(adapter, REF), LookupNotFound)
    make_visible(downstream, REF)
    assert isinstance(call_lookup(adapter, REF), LookupFound)


def test_in_flight_duplicate_is_unknown(downstream: DownstreamService) -> None:
    add_fault(downstream, fault="stall_before_store", operation_ref=REF, seconds=1.5)
    slow = opened(CreateInvoice(HttpSettings(base_url=downstream.url, read_timeout=3)))
    first: list[object] = []
    thread = threading.Thread(target=lambda: first.append(call_adapter(slow, INVOICE, REF)))
    thread.start()
    wait_in_flight(downstream, "invoices", REF)
    during = error(call_adapter(invoices(downstream), INVOICE, REF))
    assert (during.code, during.commit_state, during.next_action) == (
        "IDEMPOTENCY_KEY_IN_FLIGHT", "unknown", "verify_operation",
    )  # fmt: skip
    thread.join(timeout=5)
    assert isinstance(first[0], ToolSuccess)
    assert downstream.effects() == {REF: 1}


def test_send_email_bad_domain_then_corrected_under_the_same_ref(
    downstream: DownstreamService,
) -> None:
    adapter = opened(SendEmail(fast(downstream.url)))
    bad = {**EMAIL, "recipient_email": "ann@mail.exmaple.com"}
    envelope = error(call_adapter(adapter, bad, REF))
    assert (envelope.code, envelope.category, envelope.commit_state) == (
        "INVALID_RECIPIENT_ADDRESS", "validation", "not_committed",
    )  # fmt: skip
    assert (envelope.retry.directive, envelope.retry.max_attempts_remaining) == (
        "after_input_fix", 1,
    )  # fmt: skip
    assert flagged_fields(envelope) == ("recipient_email",)
    assert "ann@" not in envelope.agent_message
    fixed = call_adapter(adapter, EMAIL, REF)
    assert isinstance(fixed, ToolSuccess)
    assert isinstance(adapter.lookup(REF), LookupFound)
    assert downstream.effects("emails") == {REF: 1}


def test_register_receives_the_settings_read_from_the_environment(
    downstream: DownstreamService,
) -> None:
    settings = Settings.from_env(
        {
            "TOOLSAFE_EXAMPLE_DOWNSTREAM_URL": downstream.url,
            "TOOLSAFE_EXAMPLE_CONSISTENCY_WINDOW": "0.5",
        }
    )
    registry = Registry()
    registry.load_modules(settings.tools.adapter_modules, settings.adapter_settings())
    assert registry.tools() == ("create_invoice", "send_email")
    invoice = registry.get("create_invoice")
    for tool in registry.tools():
        registered = registry.get(tool)
        assert isinstance(registered, HttpAdapter)
        opened(registered)
    assert (invoice.writes, invoice.has_lookup) == (True, True)
    assert invoice.consistency_window == timedelta(seconds=0.5)
    assert isinstance(call_adapter(invoice, INVOICE, REF), ToolSuccess)
    assert httpx.get(f"{downstream.url}/_control/effects").json() == {REF: 1}


def test_each_process_gets_its_own_http_client(downstream: DownstreamService) -> None:
    adapter = invoices(downstream)
    first = adapter.client
    assert adapter.client is first
    adapter._pid = -1  # as seen from a forked child: the parent's pool is not reused
    assert adapter.client is not first
    first.close()
