"""The kit as pytest fixtures: in-process here, and in a user's own suite (a pytest
subprocess whose top-level conftest enables the plugin)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.support.conformance import adapters
from toolsafe.adapters.examples.downstream import DownstreamService
from toolsafe.adapters.http import HttpSettings
from toolsafe.conformance import ConformanceFailure
from toolsafe.conformance.pytest_plugin import AdapterConformance, adapter_conformance

ROOT = Path(__file__).resolve().parents[3]
CHARGE = {"customer_id": "cus_7", "amount_cents": 300}
INVOICE = {"customer_id": "cus_7", "amount_cents": 300, "currency": "EUR"}

__all__ = ["adapter_conformance"]  # the fixture, imported for this module's tests


def test_the_fixture_passes_a_sound_adapter(adapter_conformance: AdapterConformance) -> None:
    report = adapter_conformance.assert_conforms(adapters.ledger_charge, CHARGE)
    assert report.passed and report.kind == "function"


def test_the_fixture_fails_a_broken_http_adapter_with_the_table(
    adapter_conformance: AdapterConformance,
) -> None:
    with DownstreamService() as service:
        broken = adapters.AbsentWhenDown(HttpSettings(base_url=service.url))
        with pytest.raises(ConformanceFailure) as caught:
            adapter_conformance.assert_conforms(broken, INVOICE)
    message = str(caught.value)
    assert "FAIL  lookup: 503 with an HTML page" in message
    assert "absent_when_down (http): FAILED" in message


def test_a_users_suite_enables_the_plugin(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text(
        'pytest_plugins = ["toolsafe.conformance.pytest_plugin"]\n', encoding="utf-8"
    )
    (tmp_path / "test_mine.py").write_text(
        textwrap.dedent(
            """
            from tests.support.conformance.adapters import ledger_charge, network_error_retried

            SAMPLE = {"customer_id": "cus_1", "amount_cents": 100}


            def test_sound(adapter_conformance):
                adapter_conformance.assert_conforms(ledger_charge, SAMPLE)


            def test_broken(adapter_conformance):
                adapter_conformance.assert_conforms(network_error_retried, SAMPLE)
            """
        ),
        encoding="utf-8",
    )
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir",
         str(tmp_path), str(tmp_path)],
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    assert "1 failed, 1 passed" in done.stdout
    assert "FAIL  ConnectionResetError raised after" in done.stdout
    assert "network_error_retried (function): FAILED" in done.stdout
