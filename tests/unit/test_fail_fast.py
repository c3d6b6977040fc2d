"""Fail fast in-process: every variable has a bad value, and the CLI stops on one before it
does anything."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import toolsafe.tasks.app
from toolsafe.cli.main import EXIT_USAGE, main
from toolsafe.settings import known_variables

# One bad value per variable. A variable the settings learn without a line here fails
# test_every_variable_has_a_bad_value: a new setting cannot be forgotten.
BAD: dict[str, str] = {
    "TOOLSAFE_ADAPTERS": "no_such_adapter_module",
    "TOOLSAFE_BROKER_URL": "127.0.0.1:6379",
    "TOOLSAFE_DATABASE_URL": "toolsafe.db",
    "TOOLSAFE_EARLY_WAIT": "-0.005",
    "TOOLSAFE_ESCALATION_HANDLERS": "handlers_without_a_function",
    "TOOLSAFE_ESCALATION_RESEND_AFTER": "0",
    "TOOLSAFE_ESCALATION_WEBHOOK_TIMEOUT": "0",
    "TOOLSAFE_ESCALATION_WEBHOOK_URL": "ftp://hooks.example",
    "TOOLSAFE_ETA_JITTER": "-1",
    "TOOLSAFE_SUBMIT_WINDOW": "0.5",
    "TOOLSAFE_SUBMIT_HINTS": "outbox",
    "TOOLSAFE_EXAMPLE_CONSISTENCY_WINDOW": "soon",
    "TOOLSAFE_EXAMPLE_DOWNSTREAM_URL": "ftp://127.0.0.1:8900",
    "TOOLSAFE_EXAMPLE_TIMEOUT": "0",
    "TOOLSAFE_EXAMPLE_DEDUPLICATES_BY_KEY": "perhaps",
    "TOOLSAFE_FAULTS_ENABLED": "maybe",
    "TOOLSAFE_FAULT_PLAN": "relative/plan.json",
    "TOOLSAFE_FAULT_STATE_DIR": "relative/fired",
    "TOOLSAFE_GATEWAY_MAX_BODY_BYTES": "0",
    "TOOLSAFE_GATEWAY_MAX_HEADER_BYTES": "lots",
    "TOOLSAFE_GATEWAY_MAX_WAIT": "-1",
    "TOOLSAFE_GATEWAY_MAX_WAITS": "0",
    "TOOLSAFE_GATEWAY_AUTH_FAILURES": "0",
    "TOOLSAFE_GATEWAY_AUTH_WINDOW": "-1",
    "TOOLSAFE_GATEWAY_AUTH_VERIFIERS": "two",
    "TOOLSAFE_MCP_WAIT": "soon",
    "TOOLSAFE_HEARTBEAT_INTERVAL": "10",
    "TOOLSAFE_LEASE_SECONDS": "forever",
    "TOOLSAFE_LOG_FORMAT": "xml",
    "TOOLSAFE_LONGEST_WAIT": "0",
    "TOOLSAFE_LOOP_GUARD": "0",
    "TOOLSAFE_MAX_ATTEMPTS": "2.5",
    "TOOLSAFE_MAX_ETA": "0",
    "TOOLSAFE_MAX_INPUT_BYTES": "big",
    "TOOLSAFE_MAX_LOOKUPS_UNAVAILABLE": "0",
    "TOOLSAFE_METRICS_ADDRESS": "not an address",
    "TOOLSAFE_METRICS_PORT": "http",
    "TOOLSAFE_METRICS_POLL_INTERVAL": "0",
    "TOOLSAFE_METRICS_GAP_SECONDS": "-1",
    "TOOLSAFE_NOTIFY_POLL_INTERVAL": "0",
    "TOOLSAFE_OPERATOR": "ann\tbob",
    "TOOLSAFE_REPUBLISH_AFTER": "-5",
    "TOOLSAFE_RESULT_BACKEND": "redis",
    "TOOLSAFE_RETRY_BASE_DELAY": "-1",
    "TOOLSAFE_RETRY_MAX_DELAY": "0.5",
    "TOOLSAFE_SECRET_KEYS": "not-a-fernet-key",
    "TOOLSAFE_SWEEP_BATCH": "0",
    "TOOLSAFE_SWEEP_INTERVAL": "0",
    "TOOLSAFE_TASK_SOFT_TIME_LIMIT": "70",
    "TOOLSAFE_TASK_TIME_LIMIT": "nan",
    "TOOLSAFE_TOOL_POLICIES": "[1]",
    "TOOLSAFE_VERIFY_BASE_DELAY": "-1",
    "TOOLSAFE_VERIFY_BUDGET": "0",
    "TOOLSAFE_VERIFY_MAX_DELAY": "0.1",
    "TOOLSAFE_VISIBILITY_TIMEOUT": "100",
    "TOOLSAFE_WORKER_ETA_TASK_LIMIT": "-1",
    "TOOLSAFE_UI_SESSION_KEY": "short",
}


VARIABLES = known_variables({})


def test_every_variable_has_a_bad_value() -> None:
    assert set(BAD) == set(VARIABLES), (
        f"no bad value for {sorted(set(VARIABLES) - set(BAD))}; "
        f"not a setting: {sorted(set(BAD) - set(VARIABLES))}"
    )


@pytest.fixture
def clean_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No TOOLSAFE_* variable but an SQLite store that a migration would create."""
    for key in list(os.environ):
        if key.startswith("TOOLSAFE_"):
            monkeypatch.delenv(key)
    store = tmp_path / "toolsafe.db"
    monkeypatch.setenv("TOOLSAFE_DATABASE_URL", f"sqlite:///{store}")
    monkeypatch.setattr(toolsafe.tasks.app, "_default", None)
    return store


def _one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, f"expected one line, got:\n{err}"
    return lines[0]


@pytest.mark.parametrize("variable", VARIABLES)
def test_a_bad_value_stops_the_cli_before_it_does_anything(
    variable: str,
    clean_env: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv(variable, BAD[variable])
    assert main(["migrate"]) == EXIT_USAGE
    out, err = capsys.readouterr()
    line = _one_line(err)
    assert out == ""
    assert line.startswith(f"toolsafe: error: {variable}"), line
    assert "must" in line, f"the line does not say what form {variable} needs: {line}"
    assert not clean_env.exists(), "the migration ran"
    assert toolsafe.tasks.app._default is None, "an app was built"
