"""An early hint: a claim refused because the step is due a few milliseconds later waits
out the rest in the worker and claims once more, instead of leaving the step to the
sweeper for seconds.

A hint's ETA goes out at the publisher's best estimate of the due time on its own clock
(``Clock.local_eta``; later only by what its uncertainty exceeds half the early
allowance, ``settings.calls.early_wait``), so it may arrive early by the two processes'
errors in measuring the database's clock. The database still refuses every early claim
(R6): the store answers the refusal with the step's ``due_at`` (``Refused``), and only
when that is at most ``clock.early_bound`` ahead (twice this process's uncertainty plus
the early allowance) does the worker wait. The second claim gets its own answer: the
step may have moved meanwhile (claimed elsewhere, rescheduled, cancelled).
"""

from __future__ import annotations

import logging
import time
from datetime import datetime, timedelta

from toolsafe import tracing
from toolsafe.recovery.reasons import NOOP_NOT_DUE
from toolsafe.recovery.records import Claim, ClaimKind, Refused
from toolsafe.tasks.clock import early_bound
from toolsafe.tasks.runtime import Runtime

log = logging.getLogger("toolsafe.pipeline")


def wait_until(
    refused: Refused, claimed_at: datetime, uncertainty: timedelta, allowance: timedelta
) -> datetime | None:
    """The database time to claim again at, or None to leave the refusal as it is.

    ``claimed_at`` is the ``now`` the refused claim handed to the store: the step is
    waited for only when it was refused for not being due and nothing but time stood in
    the way (``refused.due_at``), at most ``clock.early_bound`` after ``claimed_at``."""
    if refused.reason != NOOP_NOT_DUE or refused.due_at is None:
        return None
    if refused.due_at - claimed_at > early_bound(uncertainty, allowance):
        return None
    return refused.due_at


def seconds_left(
    due_at: datetime, now: datetime, uncertainty: timedelta, allowance: timedelta
) -> float:
    """How long to sleep from ``now`` (the database's time) until ``due_at``: never
    negative, and never longer than ``clock.early_bound`` (should this process's clock
    have been measured again meanwhile, a claim made too early is refused again, as it
    was)."""
    left = min(due_at - now, early_bound(uncertainty, allowance))
    return max(left.total_seconds(), 0.0)


def claim_when_due(
    runtime: Runtime, operation_ref: str, kind: ClaimKind, traced: tracing.Off
) -> tuple[Claim | Refused, float]:
    """The store's answer to a claim of ``kind``, and the monotonic time the claim was
    made at (where the lease's own clock starts: ``tasks/lease.py``).

    A claim refused for an early hint within ``clock.early_bound`` sleeps until the due
    time on the database's clock and is made once more; that second answer stands,
    whatever it is. The sleep holds this pool slot (a few milliseconds with the default
    ``settings.calls.early_wait``) and no lease."""
    lease = timedelta(seconds=runtime.settings.calls.lease)
    claimed_at = time.monotonic()
    now = runtime.now()
    claim = runtime.store.claim(kind, operation_ref, runtime.owner, lease, now)
    if isinstance(claim, Claim):
        return claim, claimed_at
    uncertainty = runtime.clock.uncertainty
    allowance = timedelta(seconds=runtime.settings.calls.early_wait)
    due_at = wait_until(claim, now, uncertainty, allowance)
    if due_at is None:
        return claim, claimed_at
    waited = seconds_left(due_at, runtime.now(), uncertainty, allowance)
    runtime.clock.sleep(waited)
    shown = round(waited * 1000, 3)
    traced.set("toolsafe.claim.waited_ms", shown)
    if log.isEnabledFor(logging.INFO):
        event = f"{kind}_early"
        log.info(
            "%s %s waited_ms=%s",
            event,
            operation_ref,
            shown,
            extra={"event": event, "operation_ref": operation_ref, "waited_ms": shown},
        )
    claimed_at = time.monotonic()
    return runtime.store.claim(kind, operation_ref, runtime.owner, lease, runtime.now()), claimed_at
