"""How slow this machine is right now: the factor a time bound that is a feature (a lease
expiry, a recovery "in about a second") is multiplied by, measured once per test session.

The known workload is what dominates the process tests' own timings: a Python process
that starts and imports Celery, kombu, SQLAlchemy and pydantic (a worker's start, a CLI
call), plus a little pure computation. On the reference machine (two cores, idle) it
takes ``REFERENCE_SECONDS``; a session that measures three times that, because other jobs
share the cores, allows three times the base of every bound, and says so when one fails.
"""

from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Final

WORKLOAD: Final = "import celery, kombu, sqlalchemy, pydantic; sum(i * i for i in range(300_000))"
# The fastest of several runs on a two-core machine at a load average below 2.
REFERENCE_SECONDS: Final = 0.45
RUNS: Final = 3
# A machine slower than this is not one the suite is made for: bounds stop growing, and a
# failure names the factor it was measured at.
MAX_FACTOR: Final = 4.0


@dataclass(frozen=True)
class Machine:
    """The workload's time at session start, and the factor it gives over the reference."""

    measured: float

    @property
    def factor(self) -> float:
        """Never below 1 (a fast machine keeps the bounds the settings give), never above
        ``MAX_FACTOR``."""
        return min(MAX_FACTOR, max(1.0, self.measured / REFERENCE_SECONDS))

    def seconds(self, base: float) -> float:
        """``base`` seconds (derived from the settings) on this machine."""
        return base * self.factor

    def explain(self, base: float) -> str:
        """What a failed bound says: its base, the factor and where the factor came from."""
        return (
            f"bound {self.seconds(base):.2f} s = {base:g} s x machine factor {self.factor:.2f} "
            f"(the known workload took {self.measured:.2f} s at session start, "
            f"{REFERENCE_SECONDS:g} s on an idle two-core machine)"
        )


def _once() -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", WORKLOAD], check=True, timeout=120)
    return time.perf_counter() - started


def measure() -> Machine:
    """Run the workload once to warm the file cache, then ``RUNS`` times: the fastest,
    so that a moment's stampede (every xdist worker starting at once) does not count as
    the machine's speed, while a load that lasts (a CPU hog per core) does."""
    _once()
    return Machine(min(_once() for _ in range(RUNS)))
