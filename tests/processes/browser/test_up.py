"""``toolsafe up --example`` as a new user runs it: a real subprocess tree (gateway,
worker, beat, example downstream) on the embedded default; the printed curl line, run
as printed, returns ``succeeded`` with evidence and one effect at the downstream; the
status page, signed in with the printed operator key, shows the call; Ctrl-C stops
everything with exit 0, a dead child makes ``up`` exit non-zero naming it. ``up`` itself
is forked from the suite's preloaded interpreter; its children are too, but for the
second start of the Ctrl-C test, which starts them as new interpreters, as a user's
``up`` does, and finds its worker by its command line."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Browser, expect

from tests.conftest import missing
from toolsafe.harness import Process, child_env, free_port, spawn, wait_until

pytestmark = [pytest.mark.slow]

READY = "toolsafe up: running"


@dataclass
class Up:
    process: Process
    folder: Path

    def line(self, label: str) -> str:
        found = re.search(rf"^{label}\s+(\S+)", self.process.text(), re.MULTILINE)
        assert found, self.process.tail()
        return found.group(1)

    def curl(self) -> str:
        lines = [line for line in self.process.text().splitlines() if line.startswith("curl ")]
        assert len(lines) == 1, self.process.tail()
        return lines[0]


def start_up(folder: Path, *, preload_children: bool = False) -> Up:
    """``toolsafe up --example``, forked from the suite's preloaded interpreter; with
    ``preload_children``, its gateway, worker, beat and downstream are too (the same
    commands, without a second of imports each; toolsafe/harness/preload.py)."""
    argv = [sys.executable, "-m", "toolsafe", "up", "--example", "--folder", str(folder)]
    argv += ["--port", str(free_port())]
    env = {**child_env({}), "PYTHONUNBUFFERED": "1"}
    folder.mkdir(parents=True, exist_ok=True)
    process = spawn(
        "up", argv, env=env, directory=folder.parent, cwd=folder.parent,
        preload_children=preload_children,
    )  # fmt: skip
    process.wait_for_output(READY, 180)
    return Up(process, folder)


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Up]:
    running = start_up(tmp_path_factory.mktemp("up") / "toolsafe-up", preload_children=True)
    try:
        yield running
    finally:
        running.process.stop(30)


def test_the_printed_curl_returns_succeeded_with_one_effect(up: Up, browser: Browser) -> None:
    if shutil.which("curl") is None:
        missing("curl", "curl is not installed (the printed line is run as printed)")
    answer = subprocess.run(
        ["bash", "-c", up.curl()], capture_output=True, text=True, timeout=60, check=False
    )
    assert answer.returncode == 0, answer.stderr
    view = json.loads(answer.stdout)
    assert view["state"] == "succeeded", view
    assert view["envelope"]["ok"] is True and view["envelope"]["commit_state"] == "committed"
    evidence = view["envelope"]["verification"]["evidence_ref"]
    assert evidence, view
    downstream = re.search(r"example downstream (http://\S+)", up.process.text())
    assert downstream, up.process.tail()
    effects = httpx.get(f"{downstream.group(1)}/_control/effects", timeout=10).json()
    assert effects == {view["operation_ref"]: 1}, effects
    # The same line again is the same call: still one effect.
    again = subprocess.run(["bash", "-c", up.curl()], capture_output=True, text=True, check=False)
    assert json.loads(again.stdout)["operation_ref"] == view["operation_ref"]
    assert httpx.get(f"{downstream.group(1)}/_control/effects", timeout=10).json() == effects

    context = browser.new_context()
    with context:
        page = context.new_page()
        page.set_default_timeout(20_000)
        page.goto(up.line("status page"))
        page.fill("#key", up.line("operator key"))
        page.click("button[type=submit]")
        expect(page.locator("h1")).to_have_text("Steps")
        row = page.locator(f"tr[data-ref='{view['operation_ref']}']")
        expect(row).to_have_attribute("data-state", "succeeded")
        expect(row).to_contain_text(f"verified: {evidence}")
        expect(page.locator("#workers")).to_contain_text("1 worker consuming")
        expect(page.locator("#queues")).to_contain_text("toolsafe.execute 0")
        # The documented prefix form, without the agent key's namespace, points at it.
        page.goto(f"{up.line('status page')}?prefix=run_1/")
        expect(page.locator("#elsewhere a")).to_have_text(
            view["operation_ref"].rsplit("/", 1)[0] + "/"
        )


def test_ctrl_c_stops_everything_and_the_keys_are_reused(tmp_path: Path) -> None:
    first = start_up(tmp_path / "toolsafe-up", preload_children=True)
    operator = first.line("operator key")
    first.process.popen.send_signal(signal.SIGINT)
    assert first.process.popen.wait(60) == 0, first.process.tail()
    for name in ("gateway", "worker", "beat", "downstream"):
        log = (tmp_path / "toolsafe-up" / f"{name}.log").read_text()
        assert log, name
    again = start_up(tmp_path / "toolsafe-up")
    try:
        assert again.line("operator key") == operator
        assert "reused from keys.json" in again.process.text()
        # A child that dies is named, and up exits non-zero.
        worker_pid = _child_named(again.process.pid, "worker")
        os.killpg(worker_pid, signal.SIGKILL)
        wait_until(lambda: not again.process.alive(), 60, "up to exit", context=again.process.tail)
        assert again.process.returncode == 1
        assert "the worker exited" in again.process.text()
    finally:
        again.process.stop(30)


def _child_named(parent: int, name: str) -> int:
    """The pid of ``up``'s child whose command line is ``toolsafe <name> ...``."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if int(fields[1]) == parent and name.encode() in argv[:4]:
            return int(entry.name)
    raise AssertionError(f"no child {name} of {parent}")
