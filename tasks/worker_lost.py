"""The worker's main process learns at once that a pool process died (Celery's request
handler in the parent) and sends the dead process's leases to verification (R4).

Celery calls ``Request.on_failure`` in the main process with ``WorkerLostError`` when a
pool child dies mid-task, and ``on_timeout`` when the hard time limit kills it; the
request knows the child's pid. Recovery runs on a thread of its own so the worker's
event loop never waits for the database; a fork (the pool replacing the dead child)
waits for that thread's database work, so no child inherits a lock it held.
"""

from __future__ import annotations

import logging
import os
import select
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final, Protocol, runtime_checkable

from billiard.exceptions import TimeLimitExceeded, WorkerLostError
from celery.worker.request import Request

from toolsafe.recovery.owners import process_info
from toolsafe.tasks.follow_up import Hints, carry_out
from toolsafe.tasks.lease import owner_prefix, recover_process
from toolsafe.tasks.runtime import Runtime

log = logging.getLogger("toolsafe.lease")


@runtime_checkable
class WorkerApp(Protocol):
    """What recovering a dead child's leases needs of the worker's app (``ToolsafeApp``
    has it): its runtime and its publisher. This module never imports the app."""

    @property
    def runtime(self) -> Runtime: ...

    @property
    def publisher(self) -> Hints: ...


# billiard may report a child's exit just before the kernel has finished it: look again
# for this long before leaving its leases to their expiry.
SETTLE_SECONDS: Final = 2.0
SETTLE_STEP: Final = 0.05


# Held by the recovery thread while it uses the database and the broker, and by a
# forking thread around fork(): a child forked meanwhile would inherit those libraries'
# locks held, and hang (billiard forks the dead child's replacement at that very time).
_fork_guard = threading.Lock()


def fork_guard() -> threading.Lock:
    """The lock to hold around database or broker work on a thread of the worker's main
    process (the heartbeat too), so that no pool child is forked meanwhile."""
    return _fork_guard


def _before_fork() -> None:
    _fork_guard.acquire()


def _after_fork_in_parent() -> None:
    _fork_guard.release()


def _after_fork_in_child() -> None:
    global _fork_guard
    _fork_guard = threading.Lock()


os.register_at_fork(
    before=_before_fork,
    after_in_parent=_after_fork_in_parent,
    after_in_child=_after_fork_in_child,
)


def _unwrap(exc_info: Any) -> BaseException | None:
    exc = getattr(exc_info, "exception", None)
    inner = getattr(exc, "exc", None)  # billiard's ExceptionWithTraceback
    return inner if isinstance(inner, BaseException) else exc


def recover_dead_child(app: WorkerApp, pid: int) -> int:
    """Expire the leases of pool process ``pid`` once it is gone; how many moved."""
    deadline = time.monotonic() + SETTLE_SECONDS
    while True:
        info = process_info(pid)
        if (info is not None and not info.running) or time.monotonic() >= deadline:
            break
        time.sleep(SETTLE_STEP)
    runtime = app.runtime
    with _fork_guard:
        return _recover(app, runtime, pid)


def _recover(app: WorkerApp, runtime: Runtime, pid: int) -> int:
    recovered = recover_process(runtime, owner_prefix(pid))
    for recorded in recovered:
        log.info(
            "owner_gone %s pid=%s",
            recorded.step.operation_ref,
            pid,
            extra={
                "event": "owner_gone",
                "operation_ref": recorded.step.operation_ref,
                "pid": pid,
                "state": str(recorded.step.state),
            },
        )
        carry_out(runtime, app.publisher, recorded, runtime.now())
    return len(recovered)


def _in_background(app: object, pid: int | None) -> None:
    if pid is None or not isinstance(app, WorkerApp):
        return  # not a toolsafe app: no leases of ours to recover

    def run() -> None:
        try:
            recover_dead_child(app, pid)
        except Exception as error:  # the lease expiry (the sweeper) still recovers it
            log.warning(
                "cannot recover the leases of pool process %s: %s",
                pid,
                type(error).__name__,
                extra={"event": "owner_recovery_failed", "pid": pid},
            )

    threading.Thread(target=run, name=f"toolsafe-recover-{pid}", daemon=True).start()


class ChildWatcher:
    """In the worker's main process: one pidfd per pool child, woken the moment a child
    exits (Celery itself may notice only at its next 5 s pool check). Linux only; other
    systems rely on the request's ``on_failure`` below and on the lease's expiry."""

    def __init__(
        self,
        app: WorkerApp,
        refresh: float = 0.5,
        replace_child: Callable[[], None] | None = None,
    ) -> None:
        self.app = app
        self.refresh = refresh  # how soon a newly forked child is watched
        # Asks the pool to reap and replace a dead child now, not at its next check.
        self.replace_child = replace_child
        self.pid = os.getpid()
        self._thread: threading.Thread | None = None

    @staticmethod
    def supported() -> bool:
        return hasattr(os, "pidfd_open") and os.path.exists("/proc/self/stat")

    def start(self) -> None:
        if self._thread is None and self.supported():
            self._thread = threading.Thread(
                target=self._run, name="toolsafe-child-watcher", daemon=True
            )
            self._thread.start()

    def children(self) -> set[int]:
        """The processes this one forked (the pool children, an embedded beat)."""
        try:
            listed = Path(f"/proc/{self.pid}/task/{self.pid}/children").read_text()
            return {int(pid) for pid in listed.split()}
        except OSError:
            return self._children_by_scan()

    def _children_by_scan(self) -> set[int]:
        found: set[int] = set()
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rfind(")") + 2 :].split()
            if len(fields) > 1 and fields[1] == str(self.pid):
                found.add(int(entry.name))
        return found

    def _run(self) -> None:
        watched: dict[int, int] = {}  # pidfd -> pid
        while True:
            try:
                known = set(watched.values())
                for pid in self.children() - known:
                    try:
                        watched[os.pidfd_open(pid)] = pid
                    except ProcessLookupError:
                        continue  # gone already: reaped after a failure Celery reports
                ready, _, _ = select.select(list(watched), [], [], self.refresh)
                for fd in ready:
                    pid = watched.pop(fd)
                    os.close(fd)
                    if self.replace_child is not None:
                        self.replace_child()
                    self._recover(pid)
            except Exception as error:  # the watcher must outlive any one failure
                log.warning(
                    "child watcher: %s",
                    type(error).__name__,
                    extra={"event": "child_watcher_failed"},
                )
                time.sleep(self.refresh)

    def _recover(self, pid: int) -> None:
        try:
            recover_dead_child(self.app, pid)
        except Exception as error:  # the lease expiry (the sweeper) still recovers it
            log.warning(
                "cannot recover the leases of pool process %s: %s",
                pid,
                type(error).__name__,
                extra={"event": "owner_recovery_failed", "pid": pid},
            )


def pool_nudge(consumer: Any) -> Callable[[], None] | None:
    """A thread-safe "maintain the pool now" for the consumer's event loop, if it has one
    (the prefork pool under kombu's hub; kombu's ``call_soon`` wakes the loop)."""
    hub = getattr(consumer, "hub", None)
    maintain = getattr(getattr(consumer, "pool", None), "maintain_pool", None)
    if hub is None or maintain is None or not hasattr(hub, "call_soon"):
        return None

    def nudge() -> None:
        hub.call_soon(maintain)

    return nudge


class LeaseAwareRequest(Request):  # type: ignore[misc]
    """A Celery request that, in the main process, recovers a dead child's leases."""

    def on_failure(
        self, exc_info: Any, send_failed_event: bool = True, return_ok: bool = False
    ) -> Any:
        exc = _unwrap(exc_info)
        if isinstance(exc, WorkerLostError | TimeLimitExceeded | SystemExit | KeyboardInterrupt):
            _in_background(self.task.app, self.worker_pid)
        return super().on_failure(
            exc_info, send_failed_event=send_failed_event, return_ok=return_ok
        )

    def on_timeout(self, soft: bool, timeout: float) -> Any:
        if not soft:
            # The hard limit kills the child: whatever it held goes to verification.
            _in_background(self.task.app, self.worker_pid)
        return super().on_timeout(soft, timeout)
