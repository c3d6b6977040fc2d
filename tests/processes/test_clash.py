"""A user's project with its own ``tasks.py`` and ``celeryconfig.py`` (and ``adapters``,
``recovery``, ``settings``) uses toolsafe's public face and runs toolsafe's workers from
its own folder: real subprocesses, an SQLite store, the file-system broker and the example
downstream. And the distribution installs one top-level package, ``toolsafe``."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from toolsafe.adapters.examples.downstream import DownstreamService
from toolsafe.celeryconfig import QUEUES
from toolsafe.settings import child_environ

ROOT = Path(__file__).resolve().parents[2]

# Each of the user's modules records that it was imported and then blows up: toolsafe
# must never pick one of them up in place of its own.
TRAP = """
from pathlib import Path

Path(__file__).with_name("IMPORTED").open("a").write(__name__ + "\\n")
raise RuntimeError("toolsafe imported the user's own {name}")
"""
USER_MODULES = ("tasks", "celeryconfig", "adapters", "recovery", "settings")

AGENT = '''
"""The user's agent service: the public face only."""
import sys

from toolsafe import (
    AdapterSettings, Client, HttpWriteAdapter, Registry, ToolError, ToolSuccess, parse_result,
)

ref = sys.argv[1]
client = Client()
client.submit(
    "create_invoice", {"customer_id": "C-7", "amount_cents": 900, "currency": "EUR"}, ref
)
view = client.wait(ref, timeout=60)
assert view.state == "succeeded", view
assert issubclass(HttpWriteAdapter, object) and ToolError and ToolSuccess and parse_result
assert Registry and AdapterSettings
stray = sorted(name for name in sys.modules if name.split(".")[0] in
               ("tasks", "celeryconfig", "adapters", "recovery", "settings"))
assert not stray, stray
client.close()
print("state", view.state)
'''


@dataclass
class Project:
    folder: Path
    env: dict[str, str]
    downstream: DownstreamService

    def run(self, *argv: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, *argv],
            cwd=self.folder,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def start(self, name: str, *argv: str) -> tuple[subprocess.Popen[bytes], Path]:
        log = self.folder / f"{name}.log"
        with log.open("wb") as out:
            process = subprocess.Popen(
                [sys.executable, *argv],
                cwd=self.folder,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            text = log.read_text(errors="replace")
            if " ready." in text:
                return process, log
            if process.poll() is not None:
                break
            time.sleep(0.05)
        _stop(process)
        raise AssertionError(f"{name} did not start:\n{log.read_text(errors='replace')[-3000:]}")


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)


@pytest.fixture
def project(tmp_path: Path) -> Iterator[Project]:
    folder = tmp_path / "myshop"
    folder.mkdir()
    for name in USER_MODULES:
        (folder / f"{name}.py").write_text(TRAP.format(name=f"{name}.py"), encoding="utf-8")
    (folder / "agent.py").write_text(AGENT, encoding="utf-8")
    broker = tmp_path / "broker"
    for part in ("queue", "control", "processed"):
        (broker / part).mkdir(parents=True)
    downstream = DownstreamService(naive=True).start()
    env = child_environ(
        {
            "TOOLSAFE_BROKER_URL": f"filesystem://{broker}",
            "TOOLSAFE_DATABASE_URL": f"sqlite:///{tmp_path / 'store.db'}",
            "TOOLSAFE_ADAPTERS": "toolsafe.adapters.examples",
            "TOOLSAFE_EXAMPLE_DOWNSTREAM_URL": downstream.url,
        }
    )
    # The user's folder comes first, as in their own processes.
    env["PYTHONPATH"] = os.pathsep.join([str(folder), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["PYTHONUNBUFFERED"] = "1"
    try:
        yield Project(folder, env, downstream)
    finally:
        downstream.stop()


def test_a_project_with_its_own_tasks_and_celeryconfig_runs_toolsafe(project: Project) -> None:
    # The user's modules really are the ones their folder's processes import first.
    probe = project.run("-c", "import tasks")
    assert "toolsafe imported the user's own tasks.py" in probe.stderr
    (project.folder / "IMPORTED").unlink()

    migrated = project.run("-m", "toolsafe", "migrate")
    assert migrated.returncode == 0, migrated.stderr
    runs = [
        ("celery", ["-m", "celery", "-A", "toolsafe", "worker", "-Q", ",".join(QUEUES)]),
        ("cli", ["-m", "toolsafe", "worker", "--"]),
    ]
    for name, argv in runs:
        worker, log = project.start(
            name, *argv, "-P", "solo", "-n", f"{name}@%h", "--without-mingle", "-l", "INFO"
        )
        try:
            ref = f"clash/{name}-1"
            done = project.run("agent.py", ref)
            assert done.returncode == 0, done.stdout + done.stderr + log.read_text()[-3000:]
            assert done.stdout.strip() == "state succeeded"
            assert project.downstream.effects().get(ref) == 1
            assert "toolsafe.execute[" in log.read_text(errors="replace")
        finally:
            _stop(worker)
    assert not (project.folder / "IMPORTED").exists(), (project.folder / "IMPORTED").read_text()


# ----------------------------------------------------------------------------- the wheel


@dataclass
class WheelBuild:
    process: subprocess.Popen[str]
    out: Path
    log: Path


@pytest.fixture(scope="module")
def wheel_build(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WheelBuild]:
    """``pip wheel`` of a copy of the source, started with the module: it builds while
    the project test runs its workers, and the wheel test collects it."""
    tmp_path = tmp_path_factory.mktemp("wheel")
    source = tmp_path / "source"
    shutil.copytree(
        ROOT,
        source,
        symlinks=True,
        ignore=shutil.ignore_patterns(
            ".git", ".venv", "*.egg-info", "build", "dist", "__pycache__", ".*_cache", "*.db"
        ),
    )
    log = tmp_path / "pip.log"
    with log.open("w") as output:
        process = subprocess.Popen(
            [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path / "out"),
             str(source)],
            stdout=output, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
    try:
        yield WheelBuild(process, tmp_path / "out", log)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


@pytest.fixture(autouse=True, scope="module")
def _wheel_builds_alongside(wheel_build: WheelBuild) -> None:
    """Start the wheel build before the first test of the module runs."""


def test_the_wheel_holds_only_the_toolsafe_package(wheel_build: WheelBuild) -> None:
    try:
        wheel_build.process.wait(300)
    except subprocess.TimeoutExpired:
        wheel_build.process.kill()
        wheel_build.process.wait()
    built = subprocess.CompletedProcess(
        wheel_build.process.args, wheel_build.process.returncode, wheel_build.log.read_text(), ""
    )
    assert built.returncode == 0, built.stdout + built.stderr
    (wheel,) = wheel_build.out.glob("toolsafe-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        top_level = next(n for n in names if n.endswith(".dist-info/top_level.txt"))
        assert archive.read(top_level).decode().split() == ["toolsafe"]
    tops = {name.split("/")[0] for name in names}
    metadata = {top for top in tops if top.endswith(".dist-info")}
    assert len(metadata) == 1 and tops - metadata == {"toolsafe"}, sorted(tops)
    # The linked rooms are inside the package, with their data files.
    for inside in (
        "toolsafe/tasks/app.py",
        "toolsafe/celeryconfig.py",
        "toolsafe/settings.py",
        "toolsafe/adapters/envelope.py",
        "toolsafe/adapters/schema/envelope.schema.json",
        "toolsafe/recovery/store/sql/steps.py",
        "toolsafe/recovery/store/memory/store.py",
        "toolsafe/recovery/migrations/env.py",
    ):
        assert inside in names, f"the wheel lacks {inside}"
