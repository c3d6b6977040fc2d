"""Loaded (through ``PYTHONPATH``) only by a process the tests run under libfaketime
(``tests/support/pipeline/skew.py``): libfaketime 0.9.10 with its monotonic clock left
alone fails Python's ``time.sleep`` (``clock_nanosleep`` on an absolute monotonic
deadline: ``EINVAL``), which would kill beat's loop. Sleeping on ``select`` instead
waits the same relative time on the real clock; nothing else is changed."""

from __future__ import annotations

import os
import select
import time
from typing import SupportsIndex

if os.environ.get("FAKETIME"):

    def _sleep(seconds: float | SupportsIndex, /) -> None:
        wait = float(seconds)
        if wait < 0:
            raise ValueError("sleep length must be non-negative")
        select.select([], [], [], wait)

    time.sleep = _sleep
