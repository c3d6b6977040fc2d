"""The worker's main process learns at once that a pool process died (Celery's request
handler in the parent) and sends the dead process's leases to verification (R4).

Celery calls ``Request.on_failure`` in the main process with ``WorkerLostError`` when a
pool child dies mid-task, and ``on_timeout`` when the hard time limit kills it; the
request knows the child's pid. Recovery runs on a thread of its own so the worker's
event loop never waits for the database.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Final

from billiard.exceptions import TimeLimitExceeded, WorkerLostError
from celery.worker.request import Request

from toolsafe.recovery.owners import process_info
from toolsafe.tasks.lease import owner_prefix, recover_process

log = logging.getLogger("toolsafe.lease")

# billiard may report a child's exit just before the kernel has finished it: look again
# for this long before leaving its leases to their expiry.
SETTLE_SECONDS: Final = 2.0
SETTLE_STEP: Final = 0.05


def _unwrap(exc_info: Any) -> BaseException | None:
    exc = getattr(exc_info, "exception", None)
    inner = getattr(exc, "exc", None)  # billiard's ExceptionWithTraceback
    return inner if isinstance(inner, BaseException) else exc


def recover_dead_child(app: Any, pid: int) -> int:
    """Expire the leases of pool process ``pid`` once it is gone; how many moved."""
    from toolsafe.tasks.pipeline import carry_out
    from toolsafe.tasks.runtime import utcnow

    deadline = time.monotonic() + SETTLE_SECONDS
    while True:
        info = process_info(pid)
        if (info is not None and not info.running) or time.monotonic() >= deadline:
            break
        time.sleep(SETTLE_STEP)
    runtime = app.runtime
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
        carry_out(runtime, app.publisher, recorded, utcnow())
    return len(recovered)


def _in_background(app: Any, pid: int | None) -> None:
    if pid is None or not hasattr(app, "runtime"):
        return

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
