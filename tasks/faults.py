"""Named fault-injection points of the pipeline, for crash tests and the chaos run.

Off unless ``TOOLSAFE_FAULTS_ENABLED`` is on. The plan is a JSON file another process
writes (``TOOLSAFE_FAULT_PLAN``); each entry fires at most ``times`` times across all
worker processes, counted by marker files created with ``O_EXCL``. See
docs/operations.md for the format.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import json
import logging
import os
import signal
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal

from toolsafe.adapters.errors import ToolsafeError

log = logging.getLogger("toolsafe.faults")

FaultPoint = Literal[
    "after_claim",
    "before_call",
    "during_call",
    "after_call",
    "after_record",
    "before_publish",
    "after_publish",
    "after_submit_commit",
    "after_relay_take",
]
# The points every claim passes, execution and verification alike (the chaos run
# rotates its kills over these).
POINTS: Final[tuple[FaultPoint, ...]] = (
    "after_claim",
    "during_call",
    "after_call",
    "after_record",
    "before_publish",
    "after_publish",
)
# Points on the execution path only: ``before_call`` comes after an execution's claim
# and before its adapter call (a verification's claim never passes it).
EXECUTION_POINTS: Final[tuple[FaultPoint, ...]] = ("before_call",)

SUBMIT_POINTS: Final[tuple[FaultPoint, ...]] = ("after_submit_commit",)
"""In the submitting process (the gateway): the step is committed, nothing answered yet."""
RELAY_POINTS: Final[tuple[FaultPoint, ...]] = ("after_relay_take",)
"""In a worker's main process (the hint relay): the step is marked published, its hint
not out yet."""
ALL_POINTS: Final[tuple[FaultPoint, ...]] = (
    *POINTS,
    *EXECUTION_POINTS,
    *SUBMIT_POINTS,
    *RELAY_POINTS,
)
# "stop" sends the process SIGSTOP: it stays paused until someone sends it SIGCONT.
ACTIONS: Final = ("kill", "raise", "pause", "stop")
WILDCARD: Final = "*"


class FaultInjected(ToolsafeError):
    """Raised by a ``raise`` fault; survives pickling like every toolsafe error."""

    # Defaults because a fault raised inside another thread is built without arguments.
    def __init__(self, point: str = "during_call", operation_ref: str = "") -> None:
        super().__init__(point, operation_ref)
        self.point = point
        self.operation_ref = operation_ref

    def __str__(self) -> str:
        return f"fault injected at {self.point} for {self.operation_ref}"


class FaultPlanError(ToolsafeError, ValueError):
    """The fault plan file cannot be used."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(path, problem)
        self.path = path
        self.problem = problem

    def __str__(self) -> str:
        return f"fault plan {self.path}: {self.problem}"


@dataclass(frozen=True)
class Fault:
    """One planned fault: what to do, how often, and (for ``during_call``) when."""

    action: Literal["kill", "raise", "pause", "stop"]
    seconds: float = 0.0  # pause length
    delay: float = 0.1  # during_call: how long after the call started it fires
    times: int = 1


def parse_fault(point: str, raw: object, where: str = "plan") -> Fault:
    """``"kill"``, ``"raise"``, ``"pause:2.5"`` or ``{"action": ..., "seconds": ...,
    "delay": ..., "times": ...}``."""
    if point not in ALL_POINTS:
        raise FaultPlanError(
            where, f"unknown fault point {point!r}; known: {', '.join(ALL_POINTS)}"
        )
    data: dict[str, Any]
    if isinstance(raw, str):
        name, _, pause = raw.partition(":")
        data = {"action": name}
        if pause:
            data["seconds"] = pause
    elif isinstance(raw, dict):
        data = dict(raw)
    else:
        raise FaultPlanError(where, f"{point}: an action must be a string or an object")
    unknown = set(data) - {"action", "seconds", "delay", "times"}
    if unknown:
        raise FaultPlanError(where, f"{point}: unknown keys {', '.join(sorted(unknown))}")
    action = data.get("action")
    if action not in ACTIONS:
        raise FaultPlanError(where, f"{point}: action must be one of {', '.join(ACTIONS)}")
    try:
        seconds = float(data.get("seconds", 0.0))
        delay = float(data.get("delay", 0.1))
        times = int(data.get("times", 1))
    except (TypeError, ValueError):
        raise FaultPlanError(where, f"{point}: seconds, delay and times must be numbers") from None
    if seconds < 0 or delay < 0 or times < 1:
        raise FaultPlanError(where, f"{point}: seconds and delay >= 0, times >= 1")
    if action == "pause" and point == "during_call":
        # A pause belongs to the downstream (its stall faults); the worker cannot pause
        # a call that is already on the wire.
        raise FaultPlanError(where, "during_call supports kill and raise, not pause")
    return Fault(action=action, seconds=seconds, delay=delay, times=times)


def parse_plan(data: object, where: str = "plan") -> dict[str, dict[str, Fault]]:
    """operation_ref (or ``"*"``) → point → Fault."""
    if not isinstance(data, dict):
        raise FaultPlanError(where, 'must be a JSON object {"operation_ref": {"point": "kill"}}')
    plan: dict[str, dict[str, Fault]] = {}
    for ref, points in data.items():
        if not isinstance(points, dict):
            raise FaultPlanError(where, f"{ref}: must map fault points to actions")
        plan[str(ref)] = {point: parse_fault(point, raw, where) for point, raw in points.items()}
    return plan


def write_plan(path: str | os.PathLike[str], plan: Mapping[str, Mapping[str, object]]) -> None:
    """Replace the plan file atomically (readers never see half a file)."""
    parse_plan(dict(plan), str(path))
    target = Path(path)
    temporary = target.with_name(target.name + f".{os.getpid()}.tmp")
    temporary.write_text(json.dumps(plan, indent=2, sort_keys=True), encoding="utf-8")
    os.replace(temporary, target)


def fired(state_dir: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The faults that fired, as recorded in their marker files (for reports)."""
    directory = Path(state_dir)
    if not directory.is_dir():
        return []
    found = []
    for marker in sorted(directory.glob("*.fired")):
        with contextlib.suppress(OSError, json.JSONDecodeError):
            found.append(json.loads(marker.read_text(encoding="utf-8")))
    return found


class Faults:
    """The fault points as one process sees them; a no-op when faults are disabled."""

    def __init__(self, enabled: bool, plan_path: str | None, state_dir: str | None) -> None:
        self.enabled = enabled and plan_path is not None
        self.plan_path = plan_path
        self.state_dir = Path(state_dir) if state_dir else None
        self._cache: tuple[tuple[int, int, int], dict[str, dict[str, Fault]]] | None = None

    def _plan(self) -> dict[str, dict[str, Fault]]:
        assert self.plan_path is not None
        try:
            found = os.stat(self.plan_path)
        except FileNotFoundError:
            return {}
        # write_plan replaces the file, so a new plan is a new inode even within one
        # tick of the file system's clock.
        stamp = (found.st_mtime_ns, found.st_ino, found.st_size)
        if self._cache is not None and self._cache[0] == stamp:
            return self._cache[1]
        try:
            raw = json.loads(Path(self.plan_path).read_text(encoding="utf-8"))
        except json.JSONDecodeError as error:
            raise FaultPlanError(self.plan_path, f"not JSON: {error.msg}") from None
        plan = parse_plan(raw, self.plan_path)
        self._cache = (stamp, plan)
        return plan

    def _find(self, point: FaultPoint, operation_ref: str) -> list[tuple[str, Fault]]:
        if not self.enabled:
            return []
        plan = self._plan()
        found = []
        for key in (operation_ref, WILDCARD):
            fault = plan.get(key, {}).get(point)
            if fault is not None:
                found.append((key, fault))
        return found

    def _take(self, candidates: list[tuple[str, Fault]], point: str, ref: str) -> Fault | None:
        """The first planned fault with one of its ``times`` still free (claimed now)."""
        for key, fault in candidates:
            if self._claim_marker(key, point, fault, ref):
                return fault
        return None

    def _claim_marker(self, key: str, point: str, fault: Fault, operation_ref: str) -> bool:
        directory = self.state_dir or Path(f"{self.plan_path}.fired")
        directory.mkdir(parents=True, exist_ok=True)
        digest = hashlib.sha256(f"{key}\0{point}".encode()).hexdigest()[:24]
        for number in range(fault.times):
            marker = directory / f"{digest}.{number}.fired"
            try:
                handle = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                continue
            record = {
                "entry": key,
                "point": point,
                "action": fault.action,
                "operation_ref": operation_ref,
                "pid": os.getpid(),
                "at": time.time(),
            }
            with os.fdopen(handle, "w", encoding="utf-8") as out:
                out.write(json.dumps(record))
                # The marker must be on disk before a kill, or the fault fires again.
                out.flush()
                os.fsync(out.fileno())
            return True
        return False

    def hit(self, point: FaultPoint, operation_ref: str) -> None:
        """Pass a fault point: kill, raise or pause if the plan says so."""
        candidates = self._find(point, operation_ref)
        fault = self._take(candidates, point, operation_ref) if candidates else None
        if fault is None:
            return
        _announce(point, operation_ref, fault)
        if fault.action == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        elif fault.action == "stop":
            os.kill(os.getpid(), signal.SIGSTOP)
        elif fault.action == "raise":
            raise FaultInjected(point, operation_ref)
        else:
            time.sleep(fault.seconds)

    @contextlib.contextmanager
    def during(self, point: FaultPoint, operation_ref: str) -> Iterator[None]:
        """Around the downstream call: a timer fires the fault while the call runs.

        The marker is taken only when the timer fires, so a call that ends sooner
        leaves the fault for a later call.
        """
        candidates = self._find(point, operation_ref)
        if not candidates:
            yield
            return
        caller = threading.get_ident()
        lock = threading.Lock()
        finished = False

        def fire() -> None:
            with lock:
                # Never raise into the caller once it left the call behind.
                if finished:
                    return
                fault = self._take(candidates, point, operation_ref)
                if fault is None:
                    return
                _announce(point, operation_ref, fault)
                if fault.action == "kill":
                    os.kill(os.getpid(), signal.SIGKILL)
                if fault.action == "stop":
                    os.kill(os.getpid(), signal.SIGSTOP)  # the whole process, mid-call
                    return
                # Raise inside the calling thread as soon as it runs Python code again,
                # the way a crash inside the adapter would surface.
                ctypes.pythonapi.PyThreadState_SetAsyncExc(
                    ctypes.c_ulong(caller), ctypes.py_object(FaultInjected)
                )

        delay = min(fault.delay for _, fault in candidates)
        timer = threading.Timer(delay, fire)
        timer.daemon = True
        timer.start()
        try:
            yield
        finally:
            with lock:
                finished = True
            timer.cancel()


def _announce(point: str, operation_ref: str, fault: Fault) -> None:
    log.warning(
        "fault %s at %s",
        fault.action,
        point,
        extra={"event": "fault_injected", "point": point, "operation_ref": operation_ref},
    )
