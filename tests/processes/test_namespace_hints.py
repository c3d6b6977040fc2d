"""The documented ``run_90/`` form finds steps an agent key put in its namespace: the
CLI names the namespaced refs instead of only saying "no step". Real ``toolsafe``
subprocesses on SQLite and the file-system broker."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from toolsafe.harness import child_env, preload

INVOICE = '{"customer_id": "cus_1", "amount_cents": 100, "currency": "EUR"}'


def _toolsafe(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return preload.run([sys.executable, "-m", "toolsafe", *args], env=env, cwd=cwd, timeout=120)


def test_steps_list_and_show_point_at_the_namespaced_refs(tmp_path: Path) -> None:
    broker = tmp_path / "broker"
    for part in ("queue", "control", "processed"):
        (broker / part).mkdir(parents=True)
    env = child_env(
        {
            "TOOLSAFE_DATABASE_URL": f"sqlite:///{tmp_path / 'toolsafe.db'}",
            "TOOLSAFE_BROKER_URL": f"filesystem://{broker}",
            "TOOLSAFE_ADAPTERS": "toolsafe.adapters.examples",
        }
    )
    migrated = _toolsafe(env, tmp_path, "migrate")
    assert migrated.returncode == 0 and "created 5 tables" in migrated.stdout, migrated.stdout
    again = _toolsafe(env, tmp_path, "migrate")
    assert "no table created" in again.stdout, again.stdout
    key = _toolsafe(env, tmp_path, "keys", "create", "--name", "acme", "--scope", "agent")
    assert key.returncode == 0, key.stderr
    made = _toolsafe(
        env, tmp_path, "submit", "create_invoice", "--input", INVOICE, "--ref", "acme/run_90/step_1"
    )
    assert made.returncode == 0, made.stderr

    listed = _toolsafe(env, tmp_path, "steps", "list", "--ref-prefix", "run_90/")
    assert listed.returncode == 0
    assert "try --ref-prefix acme/run_90/" in listed.stderr, listed.stderr
    shown = _toolsafe(env, tmp_path, "steps", "show", "run_90/step_1")
    assert shown.returncode == 1
    assert "try 'acme/run_90/step_1'" in shown.stderr, shown.stderr
    found = _toolsafe(env, tmp_path, "steps", "show", "acme/run_90/step_1")
    assert found.returncode == 0 and "acme/run_90/step_1" in found.stdout
