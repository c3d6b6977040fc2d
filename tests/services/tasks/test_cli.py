"""The ``toolsafe`` CLI in-process against an SQLite store: output, errors, exit codes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

import toolsafe.tasks.app
from tests.support.fixtures import dependency_unavailable
from tests.support.recovery.store_support import create_step
from toolsafe.cli.main import EXIT_REFUSED, EXIT_UNREACHABLE, EXIT_USAGE, main
from toolsafe.recovery.outcomes import Executed
from toolsafe.recovery.states import StepState
from toolsafe.recovery.store.sql import StepStore
from toolsafe.tasks.client import Client
from toolsafe.tasks.runtime import utcnow

INVOICE = {"customer_id": "cus_1", "amount_cents": 100, "currency": "EUR"}
EMAIL = {"recipient_email": "ada@example.org", "subject": "Your invoice", "body": "Hi"}


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    database = tmp_path / "toolsafe.db"
    monkeypatch.setenv("TOOLSAFE_DATABASE_URL", f"sqlite:///{database}")
    monkeypatch.setenv("TOOLSAFE_ADAPTERS", "toolsafe.adapters.examples")
    monkeypatch.setenv("TOOLSAFE_OPERATOR", "ops-test")
    # Publishing goes nowhere useful in these tests: an unreachable broker is never
    # contacted because no command here publishes.
    monkeypatch.setenv("TOOLSAFE_BROKER_URL", "redis://127.0.0.1:1/0")
    monkeypatch.setattr(toolsafe.tasks.app, "_default", None)
    yield database
    if toolsafe.tasks.app._default is not None:
        toolsafe.tasks.app._default.runtime.close()
    monkeypatch.setattr(toolsafe.tasks.app, "_default", None)


def _escalated_step(ref: str) -> None:
    """A step escalated by the runtime (a dependency error with no attempts left)."""
    client = Client()
    store = client.runtime.store
    assert isinstance(store, StepStore)
    create_step(
        store,
        "create_invoice",
        INVOICE,
        operation_ref=ref,
        policy=client.runtime.policy_for("create_invoice"),
        now=utcnow(),
    )
    claim = store.claim_execution(ref, "cli-test", timedelta(seconds=5), utcnow())
    assert claim is not None
    envelope = dependency_unavailable().model_copy(update={"operation_ref": ref})
    failed = envelope.model_copy(
        update={
            "next_action": "escalate",
            "retry": envelope.retry.model_copy(
                update={"directive": "never", "not_before": None, "max_attempts_remaining": 0}
            ),
        }
    )
    recorded = store.record(
        claim,
        Executed(failed),
        traits=client.runtime.traits_for("create_invoice"),
        policy=client.runtime.policy_for("create_invoice"),
        now=utcnow(),
        rng=client.runtime.rng,
    )
    assert recorded is not None and recorded.step.state is StepState.ESCALATED


def test_migrate_list_show_resolve(env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["migrate"]) == 0
    assert "up to date" in capsys.readouterr().out
    _escalated_step("cli/step_1")
    assert main(["steps", "list"]) == 0
    listing = capsys.readouterr().out
    assert "cli/step_1" in listing and "escalated" in listing
    assert main(["steps", "list", "--state", "pending"]) == 0
    assert "cli/step_1" not in capsys.readouterr().out
    assert main(["escalations", "list"]) == 0
    assert "cli/step_1" in capsys.readouterr().out
    assert main(["steps", "show", "cli/step_1"]) == 0
    shown = capsys.readouterr().out
    assert "DEPENDENCY_UNAVAILABLE" in shown and "claimed" in shown and "submitted" in shown
    assert main(["steps", "show", "cli/step_1", "--json"]) == 0
    assert '"state": "escalated"' in capsys.readouterr().out
    code = main(
        ["escalations", "resolve", "cli/step_1", "--to", "failed", "--reason", "customer left"]
    )
    assert code == 0
    assert "failed" in capsys.readouterr().out
    events = Client().view("cli/step_1").history
    assert events[-1].kind == "resolved" and events[-1].detail.get("operator") == "ops-test"


def _approval_step(ref: str, tool: str = "create_invoice") -> None:
    client = Client()
    store = client.runtime.store
    assert isinstance(store, StepStore)
    policy = client.runtime.policy_for(tool)
    create_step(store, tool, INVOICE if tool == "create_invoice" else EMAIL,
                operation_ref=ref, policy=policy, now=utcnow())  # fmt: skip


def test_steps_list_filters_and_show_has_the_redacted_input(
    env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["migrate"]) == 0
    _escalated_step("list/escalated")
    _approval_step("list/pending")
    _approval_step("list/mail", "send_email")
    _approval_step("other/pending")
    capsys.readouterr()

    def listed(*argv: str) -> list[str]:
        assert main(["steps", "list", "--json", *argv]) == 0
        return [view["operation_ref"] for view in json.loads(capsys.readouterr().out)]

    assert listed("--ref-prefix", "list/") == ["list/mail", "list/pending", "list/escalated"]
    assert listed("--group", "queued", "--ref-prefix", "list/") == ["list/mail", "list/pending"]
    assert listed("--group", "terminal", "--state", "pending") == []
    assert listed("--tool", "send_email") == ["list/mail"]
    assert listed("--group", "queued", "--tool", "create_invoice") == [
        "other/pending", "list/pending"
    ]  # fmt: skip
    assert main(["steps", "show", "list/mail", "--json"]) == 0
    # Redacted as logs are: the address is personal data, the rest is shown.
    assert json.loads(capsys.readouterr().out)["input"] == {
        **EMAIL, "recipient_email": "[REDACTED:email]"
    }  # fmt: skip
    assert main(["steps", "show", "list/mail"]) == 0
    assert "input (redacted)" in capsys.readouterr().out


def test_errors_and_exit_codes(env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["migrate"]) == 0
    capsys.readouterr()
    assert main(["steps", "show", "missing/ref"]) == EXIT_REFUSED
    assert "no step with operation_ref 'missing/ref'" in capsys.readouterr().err
    _escalated_step("cli/step_2")
    assert main(["approve", "cli/step_2", "--reason", "ok"]) == EXIT_REFUSED
    assert "toolsafe: error:" in capsys.readouterr().err
    with pytest.raises(SystemExit) as usage:
        main(["escalations", "resolve", "cli/step_2", "--to", "pending", "--reason", "x"])
    assert usage.value.code == EXIT_USAGE
    with pytest.raises(SystemExit):
        main(["steps", "list", "--bogus"])


def test_bad_settings_exit_2(env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOOLSAFE_LEASE_SECONDS", "forever")
    assert main(["migrate"]) == EXIT_USAGE


def test_unreachable_database_exits_3(
    env: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TOOLSAFE_DATABASE_URL", "postgresql://postgres:s3cret@127.0.0.1:1/none")
    assert main(["steps", "list"]) == EXIT_UNREACHABLE
    err = capsys.readouterr().err
    assert "cannot be reached" in err and "s3cret" not in err


def test_schema_still_prints(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schema"]) == 0
    assert '"title": "ToolResult"' in capsys.readouterr().out
