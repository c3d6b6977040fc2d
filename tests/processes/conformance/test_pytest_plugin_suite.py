"""The kit as pytest fixtures in a user's own suite: a pytest subprocess whose top-level
conftest enables the plugin (in-process: tests/services/conformance/test_pytest_plugin.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_a_users_suite_enables_the_plugin(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text(
        'pytest_plugins = ["toolsafe.conformance.pytest_plugin"]\n', encoding="utf-8"
    )
    (tmp_path / "test_mine.py").write_text(
        textwrap.dedent(
            """
            from tests.support.conformance.adapters import fresh_key_charge, ledger_charge

            SAMPLE = {"customer_id": "cus_1", "amount_cents": 100}


            def test_sound(adapter_conformance):
                adapter_conformance.assert_conforms(ledger_charge, SAMPLE, dry_run=True)


            def test_broken(adapter_conformance):
                adapter_conformance.assert_conforms(
                    fresh_key_charge, SAMPLE, target_from_settings=True
                )
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
    assert "FAIL  retry under the same operation_ref" in done.stdout
    assert "fresh_key_charge (function): FAILED" in done.stdout
