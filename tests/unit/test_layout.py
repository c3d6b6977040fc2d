"""The test folders say what their tests touch, and the rule is enforced.

Every test file lives under ``tests/unit/`` (no I/O), ``tests/services/`` (real servers,
no worker processes) or ``tests/processes/`` (real worker, CLI and gateway processes);
helpers live under ``tests/support/`` and hold no tests. The unit and services conftests
apply the guards of ``tests/support/guards.py``; these tests prove the guards refuse what
they must (the unit ones run under ``no_io()`` themselves), and that every named doc path
of a test file exists.
"""

from __future__ import annotations

import os
import re
import socket
import sqlite3
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from tests.support.guards import FOLDERS, SERVER_PROGRAMS, OutOfFolder, no_io, no_processes

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"


def _test_files() -> list[Path]:
    return sorted(TESTS.rglob("test_*.py"))


def test_every_test_file_lives_under_one_of_the_three_folders() -> None:
    files = _test_files()
    assert len(files) > 100
    outside = [
        str(path.relative_to(TESTS))
        for path in files
        if path.relative_to(TESTS).parts[0] not in FOLDERS
    ]
    assert outside == [], "move these under tests/unit, tests/services or tests/processes"


def test_support_modules_hold_no_tests() -> None:
    support = TESTS / "support"
    modules = sorted(support.rglob("*.py"))
    assert modules, "tests/support holds the shared helpers"
    for path in modules:
        text = path.read_text(encoding="utf-8")
        assert not re.search(r"^(?:async )?def test_", text, flags=re.MULTILINE), path
        assert not path.name.startswith("test_"), path


def test_the_top_level_holds_only_the_folders_the_conftest_and_the_package() -> None:
    names = {
        path.name
        for path in TESTS.iterdir()
        if path.name != "__pycache__" and not path.name.startswith(".")
    }
    assert names == {*FOLDERS, "support", "conftest.py", "__init__.py"}


def test_the_unit_and_services_folders_apply_their_guards() -> None:
    from tests.services import conftest as services
    from tests.unit import conftest as unit

    for module, guard in ((unit, no_io), (services, no_processes)):
        for hook in ("pytest_runtest_setup", "pytest_runtest_call", "pytest_runtest_teardown"):
            function = getattr(module, hook)
            # Built by guarded_phases around this folder's guard, and a hook wrapper.
            closed_over = [cell.cell_contents for cell in function.__closure__ or ()]
            assert guard in closed_over, (module.__name__, hook)
            assert function.pytest_impl["wrapper"] is True, (module.__name__, hook)
    assert not (TESTS / "processes" / "conftest.py").exists() or "guards" not in (
        TESTS / "processes" / "conftest.py"
    ).read_text(encoding="utf-8")


def test_docs_name_only_test_files_that_exist() -> None:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    missing = []
    for page in pages:
        for named in re.findall(r"\btests/[\w/]+\.py\b", page.read_text(encoding="utf-8")):
            if not (ROOT / named).exists():
                missing.append(f"{page.name}: {named}")
    assert missing == []


# The guards themselves: this module runs under no_io(), so each way out must be refused.


def test_a_unit_test_cannot_connect_a_socket() -> None:
    with pytest.raises(OutOfFolder, match=r"socket\.connect.*tests/services/"):
        socket.create_connection(("127.0.0.1", 9), timeout=0.1)


def test_a_unit_test_cannot_bind_a_socket() -> None:
    with socket.socket() as sock, pytest.raises(OutOfFolder, match=r"socket\.bind"):
        sock.bind(("127.0.0.1", 0))


def test_a_unit_test_cannot_reach_postgresql() -> None:
    with pytest.raises(OutOfFolder, match="PostgreSQL"):
        psycopg.connect("postgresql://postgres@127.0.0.1:5432/postgres", connect_timeout=1)


def test_a_unit_test_cannot_open_an_sqlite_file_but_may_use_memory(tmp_path: Path) -> None:
    with pytest.raises(OutOfFolder, match="SQLite file"):
        sqlite3.connect(tmp_path / "steps.db")
    with pytest.raises(OutOfFolder, match="SQLite file"):
        sqlite3.dbapi2.connect(str(tmp_path / "steps.db"))
    assert not (tmp_path / "steps.db").exists()
    memory = sqlite3.connect(":memory:")
    assert memory.execute("SELECT 1").fetchone() == (1,)
    memory.close()


def test_a_unit_test_cannot_start_or_fork_a_process() -> None:
    with pytest.raises(OutOfFolder, match=r"starting the process .*tests/processes/"):
        subprocess.run([sys.executable, "-c", "pass"], check=False)
    with pytest.raises(OutOfFolder, match=r"os\.fork"):
        os.fork()
    import multiprocessing

    process = multiprocessing.get_context("spawn").Process(target=print)
    with pytest.raises(OutOfFolder, match="multiprocessing"):
        process.start()


def test_services_may_start_servers_but_no_worker_or_python_process() -> None:
    """``no_processes()`` is what tests/services/conftest.py wraps every test in; here it
    is nested inside the unit guard, which lets the refusal be observed without a spawn."""
    assert {"redis-server", "initdb", "pg_ctl"} <= SERVER_PROGRAMS
    with no_processes():
        for argv in (
            [sys.executable, "-m", "celery", "-A", "toolsafe", "worker"],
            [sys.executable, "-m", "toolsafe", "serve"],
            ["runuser", "-u", "postgres", "--", sys.executable, "-c", "pass"],
        ):
            with pytest.raises(OutOfFolder, match=r"tests/services/ may not.*tests/processes/"):
                subprocess.Popen(argv)
        with pytest.raises(OutOfFolder, match=r"os\.fork"):
            os.fork()
