"""Unit tests do no I/O: each one's setup, call and teardown run under ``no_io()``, so a
socket, a database connection or file, or a child process fails the test loudly
(``tests/support/guards.py``). The session's own fixtures (its databases) are finalized
at the last test's teardown, outside the guard."""

from __future__ import annotations

from tests.support.guards import guarded_phases, no_io

pytest_runtest_setup, pytest_runtest_call, pytest_runtest_teardown = guarded_phases(no_io)
