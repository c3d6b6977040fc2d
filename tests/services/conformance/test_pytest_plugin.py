"""The adapter_conformance fixture in this session: it passes a sound adapter, fails a
broken HTTP adapter with the table, and follows the kit's rule on targets."""

from __future__ import annotations

import pytest

from tests.support.conformance import adapters
from toolsafe.adapters.examples.downstream import DownstreamService
from toolsafe.adapters.http import HttpSettings
from toolsafe.conformance import ConformanceFailure, TargetNotNamed
from toolsafe.conformance.pytest_plugin import AdapterConformance, adapter_conformance

__all__ = ["adapter_conformance"]  # the fixture, imported for this module's tests

CHARGE = {"customer_id": "cus_7", "amount_cents": 300}
INVOICE = {"customer_id": "cus_7", "amount_cents": 300, "currency": "EUR"}


def test_the_fixture_passes_a_sound_adapter(adapter_conformance: AdapterConformance) -> None:
    report = adapter_conformance.assert_conforms(
        adapters.ledger_charge, CHARGE, target_from_settings=True
    )
    assert report.passed and report.kind == "function"


def test_the_fixture_fails_a_broken_http_adapter_with_the_table(
    adapter_conformance: AdapterConformance,
) -> None:
    with DownstreamService() as service:
        broken = adapters.AbsentWhenDown(HttpSettings(base_url=service.url))
        with pytest.raises(ConformanceFailure) as caught:
            adapter_conformance.assert_conforms(broken, INVOICE, base_url=service.url)
    message = str(caught.value)
    assert "FAIL  lookup: 503 with an HTML page" in message
    assert "absent_when_down (http): FAILED" in message


def test_the_fixture_writes_only_to_a_target_the_test_names(
    adapter_conformance: AdapterConformance,
) -> None:
    with DownstreamService() as service:
        configured = adapters.KeyNeverSent(HttpSettings(base_url=service.url))
        with pytest.raises(TargetNotNamed, match="writes"):
            adapter_conformance.check(configured, INVOICE)
        assert service.effects() == {}
        dry = adapter_conformance.check(configured, INVOICE, dry_run=True)
    assert service.effects() == {}
    row = {check.scenario: check for check in dry.failures}[
        "the operation_ref reaches the downstream as its idempotency key"
    ]
    assert "no Idempotency-Key header" in row.got
