"""Running a wrapped call: async functions on one event loop per process, a timeout
that abandons the call (its outcome is then unknown), and the hooks around a call."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Callable, Coroutine
from typing import Any, Final, TypeAlias, cast

Run: TypeAlias = Callable[[], object]
"""One complete call of the wrapped function (awaited when it is async)."""
Around: TypeAlias = Callable[[Run], object]
"""Wraps a call: the conformance kit uses it to raise before or after the real call."""


class CallTimedOut(Exception):
    """The wrapped call did not return within the adapter's ``timeout``."""


class _Loop:
    """One event loop per process, in a daemon thread, for the async functions: SDK
    clients bound to a loop keep working from call to call."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pid = 0

    def run(self, coroutine: Coroutine[Any, Any, object]) -> object:
        with self._lock:
            if self._loop is None or self._pid != os.getpid():
                loop = asyncio.new_event_loop()
                threading.Thread(
                    target=loop.run_forever, daemon=True, name="toolsafe-tools"
                ).start()
                self._loop, self._pid = loop, os.getpid()
            loop = self._loop
        return asyncio.run_coroutine_threadsafe(coroutine, loop).result()


LOOP: Final = _Loop()


def run_within(run: Run, timeout: float | None) -> object:
    """``run()`` in a thread of its own, abandoned (not cancelled) after ``timeout``."""
    if timeout is None:
        return run()
    outcome: dict[str, object] = {}
    done = threading.Event()

    def _target() -> None:
        try:
            outcome["value"] = run()
        except BaseException as error:  # handed back to the caller below
            outcome["error"] = error
        finally:
            done.set()

    threading.Thread(target=_target, daemon=True, name="toolsafe-call").start()
    if not done.wait(timeout):
        raise CallTimedOut(timeout)
    if "error" in outcome:
        raise cast(BaseException, outcome["error"])
    return outcome.get("value")


__all__ = ["LOOP", "Around", "CallTimedOut", "Run", "run_within"]
