"""The conformance scenarios as pytest fixtures, for users' own suites. Enable them in a
top-level ``conftest.py`` with ``pytest_plugins = ["toolsafe.conformance.pytest_plugin"]``:

    def test_billing_adapter_conforms(adapter_conformance, staging_url):
        adapter_conformance.assert_conforms(
            CreateInvoice(HttpSettings(base_url=staging_url)),
            {"customer_id": "cus_1", "amount_cents": 100, "currency": "EUR"},
            base_url=staging_url,
        )

The rules of ``toolsafe check-adapter`` hold: a write runs only against a target the test
names (``base_url=``, ``target_from_settings=True``) or ``dry_run=True``; pass what
``toolsafe.conformance.load_adapter("module:tool")`` returns to build the adapter from its
settings as a worker does.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from toolsafe.adapters.protocol import Adapter
from toolsafe.conformance import DEFAULT_TIMEOUT, Loaded, Report, assert_conforms, check_adapter


class AdapterConformance:
    """Runs the kit from a test: :meth:`check` returns the report, :meth:`assert_conforms`
    fails the test with the whole table when any scenario failed."""

    def __init__(self, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.timeout = timeout
        self.reports: list[Report] = []

    def check(
        self,
        adapter: Adapter[Any] | Loaded,
        sample: Mapping[str, Any],
        *,
        base_url: str | None = None,
        target_from_settings: bool = False,
        dry_run: bool = False,
    ) -> Report:
        report = check_adapter(
            adapter,
            sample,
            base_url=base_url,
            target_from_settings=target_from_settings,
            dry_run=dry_run,
            timeout=self.timeout,
        )
        self.reports.append(report)
        return report

    def assert_conforms(
        self,
        adapter: Adapter[Any] | Loaded,
        sample: Mapping[str, Any],
        *,
        base_url: str | None = None,
        target_from_settings: bool = False,
        dry_run: bool = False,
    ) -> Report:
        report = self.check(
            adapter,
            sample,
            base_url=base_url,
            target_from_settings=target_from_settings,
            dry_run=dry_run,
        )
        assert_conforms(report)
        return report


@pytest.fixture
def adapter_conformance() -> AdapterConformance:
    """The conformance kit, for one test."""
    return AdapterConformance()


__all__ = ["AdapterConformance", "adapter_conformance"]
