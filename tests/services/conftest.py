"""Services tests use real servers but start no worker or other Python process: each
one's setup, call and teardown run under ``no_processes()``, which lets through only the
servers' own programs (``tests/support/guards.py``); the session's own fixtures are
finalized at the last test's teardown, outside the guard."""

from __future__ import annotations

from collections.abc import Generator

import pytest

from tests.support.guards import no_processes


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, None, None]:
    with no_processes():
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    with no_processes():
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(
    item: pytest.Item, nextitem: pytest.Item | None
) -> Generator[None, None, None]:
    if nextitem is None:  # the session ends here: its fixtures (databases) are finalized
        return (yield)
    with no_processes():
        return (yield)
