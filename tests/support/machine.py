"""How slow this machine is right now: the factor a time bound that is a feature (a lease
expiry, a recovery "in about a second") is multiplied by, measured once per test session.

The known workload is a little pure computation in the test process itself (no child
process: tests/services may start none). Its wall time over the CPU time the thread got
is the share of the cores the suite gets now (1 on an idle machine, about 1.5 with a CPU
hog per core beside it); its CPU time over the reference machine's is how much slower
the cores are. The factor is their product, never below 1 and never above
``MAX_FACTOR``; a failed bound names its base and the factor.
"""

from __future__ import annotations

import functools
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Final

WORK: Final = 1_000_000  # squares summed per run
RUNS: Final = 3
# The CPU time of one run on the reference machine (two cores; the least of many runs).
REFERENCE_CPU: Final = 0.09
# A machine slowed more than this is not one the suite is made for: bounds stop growing.
MAX_FACTOR: Final = 8.0


@dataclass(frozen=True)
class Machine:
    """The workload's wall and CPU time at session start, and the factor they give."""

    wall: float
    cpu: float

    @property
    def factor(self) -> float:
        cpu = max(self.cpu, 1e-6)
        share = self.wall / cpu
        speed = max(1.0, cpu / (REFERENCE_CPU * RUNS))
        return min(MAX_FACTOR, max(1.0, share * speed))

    def seconds(self, base: float) -> float:
        """``base`` seconds (derived from the settings) on this machine."""
        return base * self.factor

    def explain(self, base: float) -> str:
        """What a failed bound says: its base, the factor and where the factor came from."""
        return (
            f"bound {self.seconds(base):.2f} s = {base:g} s x machine factor {self.factor:.2f} "
            f"(the known workload took {self.wall:.2f} s for {self.cpu:.2f} s of CPU at "
            f"session start; {REFERENCE_CPU * RUNS:g} s of CPU on the reference machine)"
        )


def measure() -> Machine:
    """Run the workload ``RUNS`` times; the totals of wall and this thread's CPU time."""
    wall = cpu = 0.0
    for _ in range(RUNS):
        started, used = time.perf_counter(), time.thread_time()
        sum(i * i for i in range(WORK))
        wall += time.perf_counter() - started
        cpu += time.thread_time() - used
    return Machine(wall, cpu)


def speed_line(start: Machine, end: Machine) -> str:
    """How fast the cores ran the known workload at a run's start and end, against the
    reference machine: this machine's speed drifts by hours (seen here: 0.032 to 0.24 s
    of CPU), and a run's time follows it, so a summary states it beside the time."""
    first, last = start.cpu / RUNS, end.cpu / RUNS
    return (
        f"machine speed: the known workload took {first:.3f} s of CPU at the start and "
        f"{last:.3f} s at the end ({REFERENCE_CPU:g} s on the reference machine: "
        f"{first / REFERENCE_CPU:.2f}x and {last / REFERENCE_CPU:.2f}x its time)"
    )


@functools.cache
def session_machine() -> Machine:
    """This process's measurement, taken once (the ``machine`` fixture's too)."""
    return measure()


@dataclass(frozen=True)
class CpuTimes:
    """The machine's CPU time since boot (``/proc/stat``'s first line), all cores."""

    busy: float  # seconds spent on anything but idle and iowait
    total: float
    cores: int

    def since(self, earlier: CpuTimes) -> str:
        """What the machine's cores did between ``earlier`` and now, in one line: the
        suite's wall time can be no shorter than its CPU time over the cores."""
        busy, total = self.busy - earlier.busy, self.total - earlier.total
        share = busy / total if total > 0 else 0.0
        return (
            f"machine CPU over the run: {busy:.0f} s busy of {total:.0f} s on {self.cores} "
            f"cores ({share:.0%}); that much work needs at least {busy / self.cores:.0f} s "
            "of wall time on these cores"
        )


def parse_proc_stat(text: str, ticks_per_second: float) -> CpuTimes:
    """``/proc/stat``'s text as ``CpuTimes`` (``cpu`` line: user nice system idle iowait
    irq softirq steal ...; one ``cpuN`` line per core)."""
    lines = text.splitlines()
    first = lines[0].split()
    if not first or first[0] != "cpu":
        raise ValueError(f"not /proc/stat: the first line is {lines[0][:40]!r}")
    ticks = [int(value) for value in first[1:9]]
    idle = ticks[3] + ticks[4]
    cores = sum(1 for line in lines[1:] if line.startswith("cpu") and line[3:4].isdigit())
    total = sum(ticks) / ticks_per_second
    return CpuTimes(busy=total - idle / ticks_per_second, total=total, cores=max(cores, 1))


def cpu_times() -> CpuTimes | None:
    """The machine's CPU times now; None where there is no ``/proc/stat``."""
    try:
        text = Path("/proc/stat").read_text()
    except OSError:
        return None
    return parse_proc_stat(text, float(os.sysconf("SC_CLK_TCK")))
