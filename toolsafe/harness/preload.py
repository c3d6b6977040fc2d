"""Children started from a preloaded interpreter: a harness child that would run
``python -m celery ...`` or ``python -m toolsafe ...`` is forked from a server process
that has imported Celery, SQLAlchemy, pydantic and toolsafe once, instead of importing
them again (over a second of CPU per process, most of a worker's start).

Off unless :func:`enable` is called (the test suite does: it starts a hundred-odd
workers and CLIs per run). The child is still a real process running the real command
(``runpy`` runs the module as ``python -m`` would, with the child's own environment,
working folder, process group and log), so a worker started this way is a real
``celery worker``; only the imports are shared. A child whose interpreter-level
environment differs from the server's (``PYTHONPATH``, ``LD_PRELOAD``, coverage,
``FAKETIME`` ...) is started the ordinary way: those act before any import.

:class:`Preloaded` answers like the ``subprocess.Popen`` it stands in for: ``pid``,
``poll``, ``wait`` (``subprocess.TimeoutExpired``), ``send_signal`` and ``returncode``
(negative: killed by that signal).
"""

from __future__ import annotations

import atexit
import contextlib
import io
import multiprocessing
import os
import runpy
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from multiprocessing import connection, forkserver
from multiprocessing.context import ForkServerContext
from pathlib import Path
from typing import Final

from toolsafe.settings import adopt_environ, child_environ

MODULES: Final = ("celery", "toolsafe")
"""The ``-m`` targets served from the preloaded interpreter (and their submodules)."""

PRELOAD: Final = (
    "celery.bin.celery",
    "celery.apps.worker",
    "celery.apps.beat",
    "celery.worker.consumer",
    "celery.concurrency.prefork",
    "kombu.transport.redis",
    "sqlalchemy.dialects.postgresql.psycopg",
    "sqlalchemy.dialects.sqlite",
    "toolsafe.worker",
    "toolsafe.cli.main",
    "toolsafe.adapters.examples",
    "uvicorn",
    "toolsafe.gateway.app",
    "toolsafe.recovery.store.sql.backend",
    "toolsafe.recovery.store.memory.backend",
    "toolsafe.metrics.exporter",
    "toolsafe.harness.frozen",  # last: freezes what the ones before imported
)
"""What the server imports once (importing reads no ``TOOLSAFE_*`` setting: apps are
built on first use, in the child), in this order."""

# Read by the interpreter before any import, so a child that changes one of them is
# started the ordinary way. PYTHONUNBUFFERED is the exception: the child sets it up.
_INTERPRETER_PREFIXES: Final = (
    "PYTHON", "LD_", "FAKETIME", "COVERAGE", "MALLOC", "TZ", "LANG", "LC_",
)  # fmt: skip
_EMULATED: Final = frozenset({"PYTHONUNBUFFERED"})

_lock = threading.Lock()
# One thread at a time reads a child's exit status: multiprocessing's forkserver hands it
# over once through a pipe, and a second reader would take the pipe's end for a status.
_polling = threading.Lock()
_context: ForkServerContext | None = None
_base_env: dict[str, str] = {}


def enable() -> None:
    """Serve eligible harness children from a preloaded interpreter in this process."""
    global _context
    with _lock:
        if _context is None:
            context = multiprocessing.get_context("forkserver")
            context.set_forkserver_preload(list(PRELOAD))
            _base_env.update(child_environ({}))  # the interpreter-level names are all kept
            _context = context


def enabled() -> bool:
    return _context is not None


def eligible(argv: Sequence[str], env: Mapping[str, str], modules: Sequence[str] = MODULES) -> bool:
    """Whether ``argv`` (with ``env``) can run in a child of the preloaded interpreter:
    ``python -m`` of one of ``modules`` (or a submodule)."""
    if _context is None or len(argv) < 3 or argv[0] != sys.executable or argv[1] != "-m":
        return False
    if not any(argv[2] == name or argv[2].startswith(f"{name}.") for name in modules):
        return False
    names = {*env, *_base_env}
    return all(
        env.get(name) == _base_env.get(name)
        for name in names
        if name.startswith(_INTERPRETER_PREFIXES) and name not in _EMULATED
    )


class Preloaded:
    """A child of the preloaded interpreter, answering like ``subprocess.Popen``."""

    def __init__(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str],
        cwd: Path | None,
        log_path: Path,
        err_path: Path | None = None,
        preload_children: bool = False,
    ) -> None:
        """Start ``argv``, its stdout appended to ``log_path``, its stderr too or to
        ``err_path`` when given; with ``preload_children``, the child serves its own
        eligible harness children from the same preloaded interpreter (its siblings, then,
        judged eligible against this process's environment). Those import the child's
        module as ``__mp_main__``, as multiprocessing's children do: its work must sit
        under ``if __name__ == "__main__"``."""
        if _context is None:
            raise RuntimeError("toolsafe.harness.preload.enable() was not called")
        self.args = list(argv)
        where = str(cwd) if cwd is not None else None
        children_env = dict(_base_env) if preload_children else None
        errors = str(err_path if err_path is not None else log_path)
        self._process = _context.Process(
            target=_run,
            args=(list(argv[2:]), dict(env), where, str(log_path), errors, children_env),
            daemon=True,
        )
        with _polling:  # start() polls the other children (multiprocessing's cleanup)
            self._process.start()
        pid = self._process.pid
        assert pid is not None
        self.pid: int = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        with _polling:
            if self.returncode is None:
                self.returncode = self._process.exitcode
            return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while (code := self.poll()) is None:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
            connection.wait([self._process.sentinel], left)
        return code

    def send_signal(self, number: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, number)


def _streams(unbuffered: bool) -> None:
    """Fresh ``sys.stdout``/``sys.stderr`` over descriptors 1 and 2, buffered as a new
    interpreter's would be for a file (stdout by block, stderr by line; neither with
    ``PYTHONUNBUFFERED``)."""

    def stream(fd: int, **options: object) -> io.TextIOWrapper:
        raw = io.FileIO(fd, "w", closefd=False)
        binary: io.RawIOBase | io.BufferedWriter = raw if unbuffered else io.BufferedWriter(raw)
        return io.TextIOWrapper(
            binary,  # type: ignore[arg-type]
            encoding="utf-8",
            write_through=unbuffered,
            **options,  # type: ignore[arg-type]
        )

    sys.stdout = stream(1)
    sys.stderr = stream(2, errors="backslashreplace", line_buffering=True)
    # Celery's logging writes to the interpreter's original streams.
    setattr(sys, "__stdout__", sys.stdout)  # noqa: B010 - a final name to mypy
    setattr(sys, "__stderr__", sys.stderr)  # noqa: B010


def run(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: Path | None = None,
    timeout: float | None = None,
    modules: Sequence[str] = MODULES,
    preload_children: bool = False,
) -> subprocess.CompletedProcess[str]:
    """``subprocess.run(argv, capture_output=True, text=True)``: from the preloaded
    interpreter when ``argv`` is eligible (``modules``: the ``-m`` targets allowed, for
    a caller that runs a program of its own, such as a benchmark), else as a new
    interpreter. ``preload_children``: as for :class:`Preloaded`."""
    if not eligible(argv, env, modules):
        return subprocess.run(
            list(argv), env=dict(env), cwd=cwd, capture_output=True, text=True,
            timeout=timeout, check=False,
        )  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="toolsafe-run-") as folder:
        out, err = Path(folder, "stdout"), Path(folder, "stderr")
        child = Preloaded(
            argv, env=env, cwd=cwd, log_path=out, err_path=err,
            preload_children=preload_children,
        )  # fmt: skip
        try:
            code = child.wait(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signal.SIGKILL)
            child.wait()
            raise
        return subprocess.CompletedProcess(
            list(argv), code, out.read_text("utf-8", "replace"), err.read_text("utf-8", "replace")
        )


def _serve_children(base_env: Mapping[str, str]) -> None:
    """In a child of the server: serve this process's eligible children from that server
    too, eligibility judged against the environment it was started with (``base_env``).

    A child inherits the server's address and the write end of its "alive" pipe (the
    server runs while a holder lives: this process, then), all multiprocessing needs to
    ask for a fork; only ``ensure_running`` would start a second server, a new
    interpreter importing everything again, as it knows no server pid here. Where that
    inheritance is missing (another Python), a server of its own is started instead."""
    global _context
    server = forkserver._forkserver  # the module's own instance, as its children use it
    inherited = ("_forkserver_address", "_forkserver_alive_fd")
    if any(getattr(server, name, None) is None for name in inherited):
        enable()
        return
    setattr(server, "ensure_running", lambda: None)  # noqa: B010 - a method to mypy
    with _lock:
        _base_env.clear()
        _base_env.update(base_env)
        _context = multiprocessing.get_context("forkserver")


def _run(
    tail: list[str],
    env: dict[str, str],
    cwd: str | None,
    out: str,
    err: str,
    children_env: dict[str, str] | None,
) -> None:
    """In the child: become a process group's leader, write to the log(s), take the
    child's environment and folder (and, given the server's ``children_env``, serve its
    own children from the server too), then run ``python -m <tail>``."""
    os.setsid()
    current = multiprocessing.current_process()
    current.name = "MainProcess"  # as logs name a main process
    # A program of its own, as ``python -m`` would start it: it may start children
    # (multiprocessing refuses a daemon's), which it joins or stops itself.
    current.daemon = False
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    for fd, path in ((1, out), (2, err)):
        opened = os.open(path, flags, 0o644)
        os.dup2(opened, fd)
        os.close(opened)
    adopt_environ(env)
    if cwd is not None:
        os.chdir(cwd)
    if children_env is not None:
        _serve_children(children_env)
    _streams(bool(env.get("PYTHONUNBUFFERED")))
    sys.path.insert(0, os.getcwd())  # what ``python -m`` puts first
    module, *args = tail
    sys.argv = [module, *args]
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    finally:
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
