"""The CLI as an operator meets it: ``python -m toolsafe`` run as a process against an
SQLite store, the broker a free port with nothing listening. Each expected condition
(an action whose hint cannot be published, its repeat, bad arguments, an unknown ref,
an unreachable database) ends in one line and the documented exit code, never a
traceback. The actions run side by side: each one is a process of its own."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest

import toolsafe
from tests.support.recovery.store_support import BLIND_WRITE, create_step, needs_approval, unknown
from tests.support.recovery.store_support import escalate as conflict
from toolsafe.adapters.envelope import ToolError
from toolsafe.cli.exits import EXIT_REFUSED, EXIT_UNREACHABLE, EXIT_USAGE
from toolsafe.cli.main import build_parser
from toolsafe.harness import free_port, preload
from toolsafe.recovery.db import migrate
from toolsafe.recovery.outcomes import Executed
from toolsafe.recovery.policy import ToolTraits
from toolsafe.recovery.states import StepState
from toolsafe.recovery.store.sql import StepStore
from toolsafe.settings import Settings
from toolsafe.tasks.runtime import Runtime, utcnow

ROOT = Path(__file__).resolve().parents[3]
S = StepState
INVOICE = {"customer_id": "cus_1", "amount_cents": 100, "currency": "EUR"}
SWEEPER_WILL = "the sweeper will publish the hint when it returns"


@dataclass(frozen=True)
class Ran:
    code: int
    out: str
    err: str

    def one_line(self) -> str:
        """The one line on stderr; no traceback, nothing else."""
        assert "Traceback" not in self.err + self.out, self.err
        lines = self.err.strip().splitlines()
        assert len(lines) == 1, self.err
        return lines[0]


@dataclass
class World:
    env: dict[str, str]
    store: StepStore

    def run(self, *argv: str, env: Mapping[str, str] | None = None) -> Ran:
        done = preload.run(
            [sys.executable, "-m", "toolsafe", *argv],
            cwd=ROOT, env={**self.env, **(env or {})}, timeout=60,
        )  # fmt: skip
        return Ran(done.returncode, done.stdout, done.stderr)

    def runs(self, *commands: tuple[str | dict[str, str], ...]) -> list[Ran]:
        """Each command as a process of its own, side by side; a command may start with
        the environment it changes."""

        def one(command: tuple[str | dict[str, str], ...]) -> Ran:
            env, argv = (command[0], command[1:]) if isinstance(command[0], dict) else ({}, command)
            assert isinstance(env, dict) and all(isinstance(arg, str) for arg in argv)
            return self.run(*(str(arg) for arg in argv), env=env)

        with ThreadPoolExecutor(max_workers=4) as pool:
            return list(pool.map(one, commands))

    def state(self, ref: str) -> StepState:
        return self.store.get(ref).state


def _step(
    runtime: Runtime, ref: str, answer: ToolError | None, traits: ToolTraits | None = None
) -> None:
    """A create_invoice step, run once by a worker that got ``answer`` (None: pending)."""
    store = runtime.store
    assert isinstance(store, StepStore)
    policy = runtime.policy_for("create_invoice")
    create_step(store, "create_invoice", INVOICE, operation_ref=ref, policy=policy, now=utcnow())
    if answer is None:
        return
    claim = store.claim_execution(ref, "cli-test", timedelta(seconds=30), utcnow())
    assert claim is not None
    traits = traits or runtime.traits_for("create_invoice")
    store.record(
        claim, Executed(answer), traits=traits, policy=policy, now=utcnow(), rng=runtime.rng
    )


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    directory = tmp_path_factory.mktemp("cli")
    settings_env = {
        "TOOLSAFE_DATABASE_URL": f"sqlite:///{directory / 'toolsafe.db'}",
        "TOOLSAFE_ADAPTERS": "toolsafe.adapters.examples",
        "TOOLSAFE_OPERATOR": "ops-test",
        # Nothing listens there: every publish is refused.
        "TOOLSAFE_BROKER_URL": f"redis://127.0.0.1:{free_port()}/0",
    }
    migrate(settings_env["TOOLSAFE_DATABASE_URL"])
    runtime = Runtime(Settings.from_env(settings_env))
    for ref in ("act/approve", "act/reject", "list/approval", "other/approval"):
        _step(runtime, ref, needs_approval(ref))
    _step(runtime, "act/redrive", conflict("act/redrive"))
    # Its outcome is unknown and was never verified: escalated at once.
    _step(runtime, "act/resolve", unknown("act/resolve"), BLIND_WRITE)
    _step(runtime, "act/cancel", None)
    _step(runtime, "list/pending", None)
    env = {key: value for key, value in os.environ.items() if not key.startswith("TOOLSAFE_")}
    store = runtime.store
    assert isinstance(store, StepStore)
    return World({**env, **settings_env}, store)


def test_actions_commit_when_the_broker_is_down_and_a_repeat_is_already_done(
    world: World,
) -> None:
    approve, redrive, reject, cancel, unproven, unconfirmed = world.runs(
        ("approve", "act/approve", "--reason", "amount matches"),
        ("escalations", "redrive", "act/redrive", "--reason", "conflict cleared"),
        ("reject", "act/reject", "--reason", "wrong customer"),
        ("cancel", "act/cancel", "--reason", "duplicate request"),
        ("escalations", "resolve", "act/resolve", "--to", "succeeded", "--reason", "seen"),
        ("escalations", "resolve", "act/resolve", "--to", "failed", "--reason", "not seen"),
    )
    # Committed; only the hint waits for the broker, and the operator is told so.
    for ran, ref, state in (
        (approve, "act/approve", S.PENDING),
        (redrive, "act/redrive", S.PENDING),
    ):
        assert ran.code == EXIT_UNREACHABLE, ran
        line = ran.one_line()
        assert (
            line.startswith(f"toolsafe: {ref}: ") and "committed" in line and SWEEPER_WILL in line
        )
        assert world.state(ref) is state and ran.out == ""
    # Nothing to publish after these: done, whatever the broker.
    assert (reject.code, reject.err) == (0, "") and "act/reject: failed" in reject.out
    assert (cancel.code, cancel.err) == (0, "") and "act/cancel: cancelled" in cancel.out
    assert unproven.code == EXIT_REFUSED and "EVIDENCE_REQUIRED" in unproven.one_line()
    assert unconfirmed.code == EXIT_REFUSED and "NOT_WRITTEN_UNCONFIRMED" in unconfirmed.one_line()
    assert world.state("act/resolve") is S.ESCALATED

    # Run again: nothing changes, and the CLI says the action took effect already.
    again = world.runs(
        ("approve", "act/approve", "--reason", "amount matches"),
        ("escalations", "redrive", "act/redrive", "--reason", "conflict cleared"),
        ("cancel", "act/cancel", "--reason", "duplicate request"),
        ("escalations", "resolve", "act/resolve", "--to", "failed", "--reason", "not in billing",
         "--confirm-not-written"),
    )  # fmt: skip
    refs = ("act/approve", "act/redrive", "act/cancel")
    for ran, ref, verb in zip(again, refs, ("approved", "re-driven", "cancelled"), strict=False):
        assert (ran.code, ran.err) == (0, ""), ran
        assert ran.out.startswith(f"{ref}: already {verb} by ops-test at "), ran.out
        assert "nothing to do" in ran.out
    resolved = again[-1]
    assert (resolved.code, resolved.err) == (0, "") and "resolved by an operator" in resolved.out
    assert world.state("act/resolve") is S.FAILED
    # The repeats wrote nothing.
    kinds = [event.kind for event in world.store.events("act/approve")]
    assert kinds.count("approved") == 1


def test_expected_failures_are_one_line_and_their_exit_code(world: World, tmp_path: Path) -> None:
    nowhere = f"postgresql://postgres:s3cret@127.0.0.1:{free_port()}/none"
    empty = f"sqlite:///{tmp_path / 'empty.db'}"
    limit, unknown_ref, bad_input, no_db, not_migrated = world.runs(
        ("steps", "list", "--limit", "-1"),
        ("steps", "show", "no/such/ref"),
        ("submit", "create_invoice", "--input", f"@{tmp_path / 'missing.json'}"),
        ({"TOOLSAFE_DATABASE_URL": nowhere}, "steps", "list"),
        ({"TOOLSAFE_DATABASE_URL": empty}, "approve", "x", "--reason", "y"),
    )
    assert limit.code == EXIT_USAGE and "-1 is not between 1 and 10000" in limit.err
    assert "Traceback" not in limit.err
    assert unknown_ref.code == EXIT_REFUSED and "no/such/ref" in unknown_ref.one_line()
    assert bad_input.code == EXIT_USAGE and "cannot read" in bad_input.one_line()
    assert no_db.code == EXIT_UNREACHABLE and "cannot be reached" in no_db.one_line()
    assert "s3cret" not in no_db.err
    assert not_migrated.code == EXIT_USAGE and "toolsafe migrate" in not_migrated.one_line()


def _arguments(parser: argparse.ArgumentParser, path: str) -> list[tuple[str, argparse.Action]]:
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found.extend(_arguments(sub, f"{path} {name}"))
        elif not isinstance(action, argparse._HelpAction):
            found.append((path, action))
    return found


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        build_parser().parse_args(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out == f"toolsafe {toolsafe.__version__}\n"


def test_every_argument_has_help() -> None:
    arguments = _arguments(build_parser(), "toolsafe")
    assert len(arguments) > 60
    missing = [f"{path} {action.option_strings or action.dest}" for path, action in arguments
               if not (action.help or "").strip()]  # fmt: skip
    assert missing == []
