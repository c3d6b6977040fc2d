"""The sweeper's work (beat's ``sweep`` task, and the release timer's): expired leases sent
to verification (R4), the hints the broker lost sent again (R7), escalation notices
whose hint was lost sent again (R9), and parked delays released to the broker ahead of
their due time (R6). Like the pipeline's, every hint it sends is only a hint (R1)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta

from toolsafe.recovery.states import StepState
from toolsafe.recovery.store import StepRecord
from toolsafe.tasks.broker_watch import BrokerWatch
from toolsafe.tasks.follow_up import Hints, carry_out, log_event, retrying
from toolsafe.tasks.runtime import Runtime

log = logging.getLogger("toolsafe.pipeline")


def sweep(
    runtime: Runtime,
    hints: Hints,
    backlog: Callable[[], int | None] | None = None,
    watch: BrokerWatch | None = None,
) -> dict[str, int]:
    """Expired leases → verification (R4); due work whose hint was lost → published (R7).

    ``watch`` tells when the broker lost what it held (``tasks/broker_watch.py``): the
    steps whose hint went out in that window are re-sent, a batch per sweep, and
    nothing else ("recovered"). Stale hints (a publish that never happened after its
    commit, a message lost between a worker's fetch and its acknowledgement) are
    re-sent only while no hint waits in the broker (``backlog``, with a watch) or while
    no more than a sweep batch waits (without one): until then a step's hint may still
    be queued, and re-sending it would pile duplicates onto a queue being drained.
    """
    store = runtime.store
    settings = runtime.settings
    now = runtime.now()
    expired = store.expire_leases(
        now, runtime.traits_for, runtime.policy_for, limit=settings.sweep.batch
    )
    for recorded in expired:
        log_event(
            "lease_expired",
            recorded.step.operation_ref,
            state=str(recorded.step.state),
        )
        carry_out(runtime, hints, recorded, now)
    recovered = recover_lost(runtime, hints, watch, now) if watch is not None else 0
    waiting = backlog() if backlog is not None else None
    allowed = 0 if watch is not None else settings.sweep.batch
    if waiting is not None and waiting > allowed:
        log_event("republish_deferred", "-", backlog=waiting)
        due: list[StepRecord] = []
    else:
        due = store.due_work(
            now,
            limit=settings.sweep.batch,
            republish_after=timedelta(seconds=settings.sweep.republish_after),
        )
    for step in due:
        send_hint(hints, step, None, now)
        log_event("republished", step.operation_ref, state=str(step.state))
    # Escalation notices whose hint was lost, or whose handlers failed (R9, at least once).
    resend = store.outbox.due(
        now,
        limit=settings.sweep.batch,
        resend_after=timedelta(seconds=settings.escalation.resend_after),
    )
    for notice in resend:
        hints.escalation(notice.operation_ref)
        log_event("escalation_resent", notice.operation_ref, sends=notice.sends)
    # The release timer's work too, in case beat runs without it (tasks/release.py):
    # one batch, so a burst of due delays never holds the sweep past its time limit.
    released = release(runtime, hints, now, batches=1)
    counts = {
        "expired": len(expired),
        "republished": len(due),
        "recovered": recovered,
        "released": released,
        "notices_resent": len(resend),
    }
    if expired or due or recovered or resend or released:
        log.info("sweep %s", counts, extra={"event": "sweep", **counts})
    return counts


def send_hint(hints: Hints, step: StepRecord, due_at: datetime | None, now: datetime) -> None:
    """A waiting step's hint again: its lookup when it is verifying, else its execution,
    in the recovery lane when it waits to retry (``retrying``)."""
    if step.state is StepState.VERIFYING:
        hints.verify(step.operation_ref, due_at, now, tool=step.tool)
    else:
        hints.execute(step.operation_ref, due_at, now, tool=step.tool, recovery=retrying(step))


def recover_lost(runtime: Runtime, hints: Hints, watch: BrokerWatch, now: datetime) -> int:
    """One batch of the steps whose hint the broker lost (``watch``): those due now are
    sent at once; those due later are un-parked, and ``release`` (later in the same
    sweep) sends them with their ETA. Returns how many steps were handed out."""
    window = watch.losses(now)
    if window is None:
        return 0
    settings = runtime.settings
    lost = runtime.store.lost_hints(
        now,
        window.since,
        window.until,
        window.until + timedelta(seconds=settings.broker.max_eta),
        limit=settings.sweep.batch,
    )
    for step in lost:
        if step.published_at is not None:  # due now (the others wait for ``release``)
            send_hint(hints, step, None, now)
        log_event("recovered", step.operation_ref, state=str(step.state))
    if lost:
        log.warning(
            "the broker lost the hints of %d steps (sent %s to %s); re-sent",
            len(lost),
            "from the start" if window.since is None else window.since.isoformat(),
            window.until.isoformat(),
            extra={"event": "broker_loss", "steps": len(lost)},
        )
    if len(lost) < settings.sweep.batch:
        watch.recovered(window)
    return len(lost)


def release(runtime: Runtime, hints: Hints, now: datetime, *, batches: int | None = None) -> int:
    """Parked delays out to the broker: the hints of waiting steps due within
    ``TOOLSAFE_MAX_ETA``, each with its due time as ETA (R6); returns how many went out.

    A delay longer than ``max_eta`` is not published when it is decided
    (``carry_out``); the step waits in the store, and this publishes its hint ``max_eta``
    before it falls due, so it reaches a worker ahead of time and runs at ``due_at`` as
    precisely as any ETA message, while workers hold no more of the future than
    ``max_eta``. A hint lost after its release is re-published by ``due_work``.
    ``batches`` bounds the work (``TOOLSAFE_SWEEP_BATCH`` steps each); None: until done.
    """
    settings = runtime.settings
    horizon = now + timedelta(seconds=settings.broker.max_eta)
    released = 0
    while batches is None or batches > 0:
        if batches is not None:
            batches -= 1
        batch = runtime.store.release_parked(now, horizon, limit=settings.sweep.batch)
        for step in batch:
            send_hint(hints, step, step.due_at, now)
        released += len(batch)
        if len(batch) < settings.sweep.batch:
            break
    return released
