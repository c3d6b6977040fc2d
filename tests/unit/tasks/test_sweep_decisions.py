"""The sweep's decisions without I/O: expired leases, lost hints and the broker's loss
window over the in-memory store, with a publisher that records (the fixtures:
tests/unit/tasks/conftest.py)."""

from __future__ import annotations

from datetime import datetime

from tests.support.tasks.memory_support import (
    INPUT,
    SETTINGS,
    TOOL,
    Hint,
    RecordingHints,
    now,
)
from tests.support.tasks.pipeline_steps import (
    HOUR,
    LEASE,
    MINUTE,
    submit,
    verifying_since,
)
from toolsafe.recovery.states import StepState
from toolsafe.recovery.store.memory import MemoryStore
from toolsafe.tasks import sweeper
from toolsafe.tasks.broker_watch import LossWindow
from toolsafe.tasks.runtime import Runtime

S = StepState


def test_sweep_sends_expired_leases_to_verification_and_republishes_lost_hints(
    runtime: Runtime, store: MemoryStore, hints: RecordingHints
) -> None:
    submit(runtime, "crashed")
    then = now() - HOUR
    assert store.claim_execution("crashed", "dead-worker", LEASE, then) is not None
    submit(runtime, "lost")  # committed, its hint never went out
    verifying_since(runtime, "unchecked")
    counts = sweeper.sweep(runtime, hints)
    assert counts == {
        "expired": 1,
        "republished": 2,
        "recovered": 0,
        "released": 0,
        "notices_resent": 0,
    }
    crashed = store.get("crashed")
    assert (crashed.state, crashed.commit_state) == (S.VERIFYING, "unknown")
    sent = hints.take()
    assert sent[0] == Hint("verify", "crashed", crashed.due_at)
    assert sorted(sent[1:], key=lambda hint: hint.operation_ref) == [
        Hint("execute", "lost"),
        Hint("verify", "unchecked"),
    ]
    assert store.get("lost").published_at is not None
    # Just republished: the next sweep leaves them alone.
    assert sweeper.sweep(runtime, hints) == {
        "expired": 0,
        "republished": 0,
        "recovered": 0,
        "released": 0,
        "notices_resent": 0,
    }
    assert hints.take() == []


def test_sweep_defers_republishing_while_the_broker_holds_a_backlog(
    runtime: Runtime, store: MemoryStore, hints: RecordingHints
) -> None:
    submit(runtime, "lost")
    backlog = SETTINGS.sweep.batch + 1
    deferred = sweeper.sweep(runtime, hints, lambda: backlog)
    assert deferred == {
        "expired": 0,
        "republished": 0,
        "recovered": 0,
        "released": 0,
        "notices_resent": 0,
    }
    assert hints.take() == [] and store.get("lost").published_at is None
    resumed = sweeper.sweep(runtime, hints, lambda: None)
    assert resumed == {
        "expired": 0,
        "republished": 1,
        "recovered": 0,
        "released": 0,
        "notices_resent": 0,
    }
    assert hints.take() == [Hint("execute", "lost")]


class ScriptedWatch:
    """A broker that reports one loss window until told it was recovered."""

    def __init__(self, window: LossWindow | None) -> None:
        self.window = window
        self.closed: list[LossWindow] = []

    def losses(self, now: datetime) -> LossWindow | None:
        return self.window

    def recovered(self, window: LossWindow) -> None:
        self.closed.append(window)
        self.window = None


def test_sweep_resends_only_the_hints_sent_inside_the_brokers_loss_window(
    runtime: Runtime, store: MemoryStore, hints: RecordingHints
) -> None:
    at = now()
    for index, sent_ago in enumerate([HOUR, 20 * MINUTE, 10 * MINUTE]):
        ref = f"sent-{index}"
        runtime.store.submit(
            TOOL, INPUT, operation_ref=ref, policy=runtime.policy_for(TOOL),
            now=at - sent_ago, published_at=at - sent_ago,
        )  # fmt: skip
    # The broker lost what was sent between 30 and 15 minutes ago.
    watch = ScriptedWatch(LossWindow(at - 30 * MINUTE, at - 15 * MINUTE))
    # Two hints still wait in the broker: the stale path waits, the lost one goes out.
    counts = sweeper.sweep(runtime, hints, lambda: 2, watch)
    assert counts["recovered"] == 1 and counts["republished"] == 0
    assert hints.take() == [Hint("execute", "sent-1")]
    assert watch.closed and watch.window is None  # a short batch: the window is done
    assert sweeper.sweep(runtime, hints, lambda: 2, watch)["recovered"] == 0
    assert hints.take() == []


def test_with_a_watch_stale_hints_wait_until_the_broker_is_empty(
    runtime: Runtime, store: MemoryStore, hints: RecordingHints
) -> None:
    submit(runtime, "lost")  # committed an hour ago, its hint never went out
    quiet = ScriptedWatch(None)
    assert sweeper.sweep(runtime, hints, lambda: 1, quiet)["republished"] == 0
    assert hints.take() == []
    assert sweeper.sweep(runtime, hints, lambda: 0, quiet)["republished"] == 1
    assert hints.take() == [Hint("execute", "lost")]


def test_a_long_loss_is_recovered_a_batch_per_sweep(
    runtime: Runtime, store: MemoryStore, hints: RecordingHints
) -> None:
    at = now()
    batch = SETTINGS.sweep.batch
    for index in range(batch + 1):
        runtime.store.submit(
            TOOL, INPUT, operation_ref=f"q{index}", policy=runtime.policy_for(TOOL),
            now=at - MINUTE, published_at=at - MINUTE,
        )  # fmt: skip
    watch = ScriptedWatch(LossWindow(None, at))
    assert sweeper.sweep(runtime, hints, lambda: 1, watch)["recovered"] == batch
    assert watch.window is not None  # a full batch: more may wait
    assert sweeper.sweep(runtime, hints, lambda: 1, watch)["recovered"] == 1
    assert watch.window is None
    sent = [hint.operation_ref for hint in hints.take()]
    assert sorted(sent) == sorted(f"q{index}" for index in range(batch + 1))
