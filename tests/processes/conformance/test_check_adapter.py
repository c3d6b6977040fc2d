"""``toolsafe check-adapter`` as a user runs it: the real CLI in a subprocess, the real
example downstream in another, real TCP through the kit's proxy. The shipped examples
pass; each deliberately broken adapter is caught with a non-zero exit; the mapping the
decorator refuses never loads; and nothing is written to a target the command line did
not name."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from toolsafe.harness.downstream import DownstreamProcess as Downstream

ROOT = Path(__file__).resolve().parents[3]
INVOICE = {"customer_id": "cus_42", "amount_cents": 1250, "currency": "EUR"}
CHARGE = {"customer_id": "cus_42", "amount_cents": 1250}
EMAIL = {"recipient_email": "ana@example.com", "subject": "Your invoice", "body": "Thanks."}


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Downstream]:
    running = Downstream(tmp_path_factory.mktemp("downstream"), os.environ, naive=False)
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture(scope="module")
def naive_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Downstream]:
    running = Downstream(tmp_path_factory.mktemp("naive"), os.environ, naive=True)
    try:
        yield running
    finally:
        running.stop()


def check(
    tmp_path: Path,
    spec: str,
    sample: dict[str, Any],
    *extra: str,
    environ: dict[str, str] | None = None,
) -> tuple[int, dict[str, Any], str]:
    """Run the CLI; return its exit code, the JSON report and stderr."""
    sample_file = tmp_path / "sample.json"
    sample_file.write_text(json.dumps(sample), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(ROOT), **(environ or {})}
    done = subprocess.run(
        [sys.executable, "-m", "toolsafe", "check-adapter", spec, "--sample-input",
         str(sample_file), "--json", *extra],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    report: dict[str, Any] = json.loads(done.stdout) if done.stdout.strip() else {}
    return done.returncode, report, done.stderr


def failed(report: dict[str, Any]) -> dict[str, dict[str, str]]:
    return {row["scenario"]: row for row in report["checks"] if row["verdict"] == "fail"}


@pytest.mark.parametrize(
    ("spec", "sample"),
    [
        ("toolsafe.adapters.examples:create_invoice", INVOICE),
        ("toolsafe.adapters.examples:send_email", EMAIL),
    ],
)
def test_the_shipped_examples_pass(
    tmp_path: Path, service: Downstream, spec: str, sample: dict[str, Any]
) -> None:
    code, report, stderr = check(tmp_path, spec, sample, "--base-url", service.url)
    assert code == 0, stderr + json.dumps(failed(report), indent=1)
    assert report["passed"] is True and report["kind"] == "http"
    verdicts = {row["scenario"]: row["verdict"] for row in report["checks"]}
    # Every family of the issue ran, and the effects were counted, not skipped.
    for scenario in (
        "connection refused (nothing sent)",
        "request delivered, connection dropped before the answer",
        "request delivered, then 502 Bad Gateway",
        "request delivered, then 504 Gateway Timeout",
        "request delivered, answer slower than the read timeout",
        "429 with Retry-After: 30",
        "429 with Retry-After as HTTP-date (+45 s)",
        "503 with Retry-After as HTTP-date (+2 days)",
        '200 whose body reports failure ({"ok": false})',
        "400 application/json full of secrets and instructions",
        "lookup of an operation_ref never written",
        "lookup of the sample write",
        "lookup: 503 with an HTML page",
        "lookup right after a write",
        "retry under the same operation_ref after a delivered write",
        "effects per operation_ref over the whole run",
    ):
        assert verdicts[scenario] == "pass", scenario
    effects = service.effects()
    assert effects and max(effects.values()) == 1


def test_the_text_report_is_a_table(tmp_path: Path, service: Downstream) -> None:
    sample_file = tmp_path / "sample.json"
    sample_file.write_text(json.dumps(INVOICE), encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "toolsafe", "check-adapter",
         "toolsafe.adapters.examples:create_invoice", "--sample-input", str(sample_file),
         "--base-url", service.url],
        cwd=ROOT, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    header = done.stdout.splitlines()[0].split()
    assert header == ["scenario", "expected", "got"]
    assert "create_invoice (http): PASSED" in done.stdout
    # The target first, and nothing else: the adapter's warnings are quiet unless --verbose.
    assert done.stderr == (
        f"toolsafe check-adapter: create_invoice: writing to {service.url} (named by --base-url)\n"
    )


def test_the_mapping_the_decorator_refuses_never_loads(tmp_path: Path) -> None:
    code, report, stderr = check(
        tmp_path, "tests.support.conformance.unknowable:timeout_not_committed", INVOICE,
        "--dry-run",
    )  # fmt: skip
    assert code == 2 and not report
    assert "maps httpx.TimeoutException to DEPENDENCY_UNAVAILABLE (not_committed)" in stderr
    assert "can be raised after the request may have left" in stderr


@pytest.fixture
def configured(tmp_path: Path) -> Iterator[Downstream]:
    """A downstream of this test's own, the one the settings name (it counts every write)."""
    running = Downstream(tmp_path, os.environ, naive=True, name="configured")
    try:
        yield running
    finally:
        running.stop()


def test_nothing_is_written_to_a_target_the_command_line_did_not_name(
    tmp_path: Path, configured: Downstream
) -> None:
    naive_service = configured
    settings = {"TOOLSAFE_EXAMPLE_DOWNSTREAM_URL": naive_service.url}
    spec = "toolsafe.adapters.examples:create_invoice"
    code, report, stderr = check(tmp_path, spec, INVOICE, environ=settings)
    assert code == 2 and not report
    assert f"it would write to {naive_service.url}" in stderr
    assert "TOOLSAFE_EXAMPLE_DOWNSTREAM_URL" in stderr
    assert naive_service.effects() == {}
    code, report, stderr = check(tmp_path, spec, INVOICE, "--dry-run", environ=settings)
    assert code == 0 and report["passed"] is True
    assert naive_service.effects() == {}
    assert "dry run against an in-process double" in stderr


def test_a_lookup_that_says_absent_when_down_is_caught(tmp_path: Path, service: Downstream) -> None:
    code, report, _ = check(
        tmp_path, "tests.support.conformance.adapters:absent_when_down", INVOICE,
        "--base-url", service.url,
    )  # fmt: skip
    assert code == 1
    caught = failed(report)
    for scenario in ("lookup: 503 with an HTML page", "lookup: 500 with a JSON error"):
        assert caught[scenario]["got"].startswith("not found")


def test_upstream_text_copied_into_agent_message_is_caught(
    tmp_path: Path, service: Downstream
) -> None:
    code, report, _ = check(
        tmp_path, "tests.support.conformance.adapters:echoes_upstream", INVOICE,
        "--base-url", service.url,
    )  # fmt: skip
    assert code == 1
    caught = failed(report)
    row = caught["400 application/json full of secrets and instructions"]
    assert "upstream text in the envelope" in row["got"] and "hunter2" in row["got"]
    assert all(
        "secrets and instructions" in name or "reports failure" in name for name in caught
    ), sorted(caught)


def test_a_downstream_that_ignores_the_key_is_named_read_from_the_settings(
    tmp_path: Path, naive_service: Downstream
) -> None:
    code, report, stderr = check(
        tmp_path, "toolsafe.adapters.examples:create_invoice", INVOICE,
        "--target-from-settings", environ={"TOOLSAFE_EXAMPLE_DOWNSTREAM_URL": naive_service.url},
    )  # fmt: skip
    assert code == 0, stderr + json.dumps(failed(report), indent=1)
    assert f"writing to {naive_service.url} (from TOOLSAFE_EXAMPLE_DOWNSTREAM_URL" in stderr
    rows = {row["scenario"]: row for row in report["checks"]}
    row = rows["retry under the same operation_ref after a delivered write"]
    assert row["verdict"] == "warn" and "the downstream ignores the key" in row["got"]
    assert max(naive_service.effects().values()) == 2


def test_a_sound_function_adapter_passes(tmp_path: Path) -> None:
    code, report, stderr = check(
        tmp_path, "tests.support.conformance.adapters:ledger_charge", CHARGE,
        "--target-from-settings",
    )  # fmt: skip
    assert code == 0, stderr + json.dumps(failed(report), indent=1)
    assert report["kind"] == "function"
    names = {row["scenario"] for row in report["checks"] if row["verdict"] == "pass"}
    assert {
        "ConnectionResetError raised after the call",
        "the call runs past the adapter's timeout",
        "RateLimited carrying retry_after=30",
        "RateLimited carrying a Retry-After HTTP-date (+45 s)",
        "lookup raises ConnectionError",
        "retry under the same operation_ref after a delivered write",
    } <= names


def test_a_function_adapter_is_pointed_at_the_named_service(
    tmp_path: Path, service: Downstream
) -> None:
    code, report, _ = check(
        tmp_path, "tests.support.conformance.ledger_sdk:sdk_charge_retried", CHARGE,
        "--base-url", service.url,
    )  # fmt: skip
    assert code == 1 and report["kind"] == "function"
    row = failed(report)["wire: request delivered, connection dropped before the answer"]
    assert row["got"].startswith("DEPENDENCY_UNAVAILABLE · not_committed")


@pytest.mark.parametrize(
    ("spec", "sample", "message"),
    [
        ("tests.support.conformance.adapters:ledger_charge", {"customer_id": "c"}, "amount_cents"),
        ("tests.support.conformance.adapters:ledger_charge", INVOICE, "currency"),
        ("no_such_module_here:tool", INVOICE, "PYTHONPATH"),
        ("tests.support.conformance.adapters:no_such_tool", INVOICE, "no_such_tool"),
        ("tests.support.conformance.adapters", INVOICE, "MODULE:TOOL"),
    ],
)
def test_bad_usage_exits_2_naming_the_problem(
    tmp_path: Path, spec: str, sample: dict[str, Any], message: str
) -> None:
    code, report, stderr = check(tmp_path, spec, sample, "--dry-run")
    assert code == 2 and not report
    assert message in stderr
