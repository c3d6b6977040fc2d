"""Unit tests do no I/O: each one's setup, call and teardown run under ``no_io()``, so a
socket, a database connection or file, or a child process fails the test loudly
(``tests/support/guards.py``). The session's own fixtures (its databases) are finalized
at the last test's teardown, outside the guard."""

from __future__ import annotations

from collections.abc import Generator

import pytest

from tests.support.guards import no_io


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, None, None]:
    with no_io():
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    with no_io():
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(
    item: pytest.Item, nextitem: pytest.Item | None
) -> Generator[None, None, None]:
    if nextitem is None:  # the session ends here: its fixtures (databases) are finalized
        return (yield)
    with no_io():
        return (yield)
