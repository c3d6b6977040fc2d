"""Waiting on a condition instead of sleeping: poll until it holds or time runs out."""

from __future__ import annotations

import time
from collections.abc import Callable

from toolsafe.harness.errors import WaitTimeout


def wait_until(
    check: Callable[[], bool],
    timeout: float,
    what: str = "the condition",
    *,
    interval: float = 0.05,
    context: Callable[[], str] | None = None,
) -> None:
    """Return as soon as ``check()`` is true; raise ``WaitTimeout`` naming ``what`` (and
    ``context()``, e.g. the workers' logs) once ``timeout`` seconds have passed.

    ``check`` runs once more after the deadline, so a condition that became true while
    the last interval elapsed is not reported as a timeout.
    """
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() >= deadline:
            if check():
                return
            detail = f"\n{context()}" if context is not None else ""
            raise WaitTimeout(f"timed out after {timeout:g}s waiting for {what}{detail}")
        time.sleep(interval)
