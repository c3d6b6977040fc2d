"""Services tests use real servers but start no worker or other Python process: each
one's setup, call and teardown run under ``no_processes()``, which lets through only the
servers' own programs (``tests/support/guards.py``); the session's own fixtures are
finalized at the last test's teardown, outside the guard."""

from __future__ import annotations

from tests.support.guards import guarded_phases, no_processes

pytest_runtest_setup, pytest_runtest_call, pytest_runtest_teardown = guarded_phases(no_processes)
