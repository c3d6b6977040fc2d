"""A process's clock set off the machine's (and the database's) by libfaketime: the real
thing, below Python (``LD_PRELOAD`` with ``FAKETIME=+30s``; Debian's ``faketime``
package, .ci/prerequisites). The monotonic clock is left alone, as NTP leaves it: a
lease's own timing in the process (``Hold``) and the heartbeat run as usual. With it
left alone, libfaketime 0.9.10 breaks ``time.sleep`` (``EINVAL``); the process loads
``faketime_site/sitecustomize.py``, which sleeps on ``select`` instead."""

from __future__ import annotations

import functools
import glob
import os
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import missing

SITE = Path(__file__).parent / "faketime_site"

# The multi-threaded build: a worker has a heartbeat thread beside its calls.
LIBRARY_GLOBS = (
    "/usr/lib/*/faketime/libfaketimeMT.so.1",
    "/usr/lib/faketime/libfaketimeMT.so.1",
    "/usr/local/lib/faketime/libfaketimeMT.so.1",
)


@functools.cache
def _library() -> str | None:
    for pattern in LIBRARY_GLOBS:
        found = sorted(glob.glob(pattern))
        if found:
            return found[0]
    return None


def skewed_clock(seconds: int) -> dict[str, str]:
    """The environment that puts a process's wall clock ``seconds`` off (negative:
    behind), checked once in a child Python (a library that is missing, or that
    ``datetime.now`` does not see, fails under CI and skips elsewhere)."""
    library = _library()
    if library is None:
        missing("faketime", "libfaketime is not installed (apt-get install faketime)")
        raise AssertionError("unreachable")
    path = os.environ.get("PYTHONPATH")
    env = {
        "LD_PRELOAD": library,
        "FAKETIME": f"{seconds:+d}s",
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
        "PYTHONPATH": str(SITE) if not path else f"{SITE}{os.pathsep}{path}",
    }
    _check(env, seconds)
    return env


_checked: set[int] = set()


def _check(skew: dict[str, str], seconds: int) -> None:
    if seconds in _checked:
        return
    # The clock Python reads, and a sleep that still works (beat's loop sleeps).
    probe = (
        "import datetime, time; time.sleep(0.01); "
        "print(datetime.datetime.now(datetime.UTC).timestamp())"
    )
    before = time.time()
    answer = subprocess.run(
        [sys.executable, "-c", probe],
        env={**os.environ, **skew},
        capture_output=True,
        text=True,
        check=True,
    )
    seen = float(answer.stdout)
    after = time.time()
    if not before + seconds - 5 <= seen <= after + seconds + 5:
        missing("faketime", f"libfaketime did not set Python's clock off by {seconds} s")
    _checked.add(seconds)
