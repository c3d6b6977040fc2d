"""What a test may touch, by the folder it lives in.

- ``tests/unit/``: no I/O. No socket is connected or bound, no PostgreSQL connection or
  SQLite file is opened, no process is started or forked. Reading files and writing
  temporary ones is allowed.
- ``tests/services/``: real Redis, PostgreSQL, SQLite and HTTP servers (in-process, or a
  ``redis-server`` / PostgreSQL cluster the test starts), but no worker or other Python
  process: the only programs it may start are the servers' own.
- ``tests/processes/``: anything, real ``celery worker``, CLI, ``uvicorn`` and chaos
  processes included.

The conftest of ``tests/unit/`` and of ``tests/services/`` wrap each test's setup, call
and teardown in ``no_io()`` or ``no_processes()``; what they refuse raises
``OutOfFolder``, naming what was tried and the folder the test belongs in.
"""

from __future__ import annotations

import contextlib
import multiprocessing.util
import os
import socket
import sqlite3
import sqlite3.dbapi2
import subprocess
from collections.abc import Callable, Generator, Iterator, Sequence
from pathlib import PurePath
from typing import Any, Final, NoReturn

import psycopg
import pytest

FOLDERS: Final = ("unit", "services", "processes")

# The programs a services test may start: the servers themselves and their tools.
SERVER_PROGRAMS: Final = frozenset(
    {"redis-server", "redis-cli", "initdb", "pg_ctl", "postgres", "pg_isready", "psql"}
)

_FORK_CALLS: Final = ("fork", "forkpty", "posix_spawn", "posix_spawnp", "system")


class OutOfFolder(AssertionError):
    """A test did what its folder rules out."""


def _refuse(what: str, folder: str, belongs: str) -> NoReturn:
    raise OutOfFolder(
        f"{what}: a test in tests/{folder}/ may not do that; it belongs in tests/{belongs}/ "
        "(tests/support/guards.py)"
    )


def _memory_database(database: object) -> bool:
    name = os.fsdecode(database) if isinstance(database, (str, bytes, os.PathLike)) else ""
    return name in {"", ":memory:"} or "mode=memory" in name


def _program(args: object) -> str:
    """The program a Popen would run, past a ``runuser -u USER --`` prefix."""
    if isinstance(args, (str, bytes, os.PathLike)):
        argv: Sequence[Any] = [args]
    else:
        argv = list(args)  # type: ignore[call-overload]
    names = [PurePath(os.fsdecode(part)).name for part in argv]
    if names and names[0] == "runuser" and "--" in names:
        names = names[names.index("--") + 1 :]
    return names[0] if names else ""


def _refuse_spawns(
    patch: pytest.MonkeyPatch, folder: str, allowed: frozenset[str] = frozenset()
) -> None:
    execute_child = subprocess.Popen._execute_child  # type: ignore[attr-defined]

    def guarded_execute_child(self: subprocess.Popen[Any], args: object, *rest: Any) -> Any:
        program = _program(args)
        if program not in allowed:
            _refuse(f"starting the process {program!r}", folder, "processes")
        return execute_child(self, args, *rest)

    patch.setattr(subprocess.Popen, "_execute_child", guarded_execute_child)

    def refuse_fork(name: str) -> Any:
        def refused(*args: object, **kwargs: object) -> NoReturn:
            _refuse(f"os.{name}()", folder, "processes")

        return refused

    for name in _FORK_CALLS:
        if hasattr(os, name):
            patch.setattr(os, name, refuse_fork(name))

    def refused_spawn(*args: object, **kwargs: object) -> NoReturn:
        _refuse("a multiprocessing child", folder, "processes")

    patch.setattr(multiprocessing.util, "spawnv_passfds", refused_spawn)


def _refused_socket(method: str) -> Any:
    def refused(self: socket.socket, address: object) -> NoReturn:
        self.close()  # refused and closed, so no ResourceWarning lands on a later test
        _refuse(f"socket.{method}({address!r})", "unit", "services")

    return refused


@contextlib.contextmanager
def no_io() -> Iterator[None]:
    """The rules of ``tests/unit/`` for the duration of the block."""
    with pytest.MonkeyPatch.context() as patch:
        for method in ("connect", "connect_ex", "bind"):
            patch.setattr(socket.socket, method, _refused_socket(method))

        def refused_postgres(*args: object, **kwargs: object) -> NoReturn:
            _refuse("a PostgreSQL connection", "unit", "services")

        patch.setattr(psycopg, "connect", refused_postgres)
        patch.setattr(psycopg.Connection, "connect", refused_postgres)
        patch.setattr(psycopg.AsyncConnection, "connect", refused_postgres)

        for module in (sqlite3, sqlite3.dbapi2):
            original = module.connect

            def guarded_sqlite(
                database: object, *args: Any, _connect: Any = original, **kwargs: Any
            ) -> Any:
                if not _memory_database(database):
                    _refuse(f"opening the SQLite file {database!r}", "unit", "services")
                return _connect(database, *args, **kwargs)

            patch.setattr(module, "connect", guarded_sqlite)
        _refuse_spawns(patch, "unit")
        yield


@contextlib.contextmanager
def no_processes() -> Iterator[None]:
    """The rules of ``tests/services/`` for the duration of the block."""
    with pytest.MonkeyPatch.context() as patch:
        _refuse_spawns(patch, "services", allowed=SERVER_PROGRAMS)
        yield


Hook = Callable[..., Generator[None, None, None]]


def guarded_phases(
    guard: Callable[[], contextlib.AbstractContextManager[None]],
) -> tuple[Hook, Hook, Hook]:
    """The runtest hooks of a folder's conftest (setup, call, teardown), each under
    ``guard()``; the session's own fixtures (its databases) are finalized at the last
    test's teardown, outside the guard. A conftest assigns them to its
    ``pytest_runtest_setup``, ``pytest_runtest_call`` and ``pytest_runtest_teardown``,
    so they apply to that folder only."""

    @pytest.hookimpl(wrapper=True)
    def setup(item: pytest.Item) -> Generator[None, None, None]:
        with guard():
            return (yield)

    @pytest.hookimpl(wrapper=True)
    def call(item: pytest.Item) -> Generator[None, None, None]:
        with guard():
            return (yield)

    @pytest.hookimpl(wrapper=True)
    def teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, None, None]:
        if nextitem is None:  # the session ends here: its fixtures are finalized
            return (yield)
        with guard():
            return (yield)

    return setup, call, teardown
