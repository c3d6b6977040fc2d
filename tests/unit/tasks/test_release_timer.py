"""The release timer's thread (tasks/release.py) over the in-memory store: it sends a
parked delay ahead of its due time, and outlives a store that fails."""

from __future__ import annotations

import logging
import time
from datetime import datetime, timedelta
from typing import Any, cast

import pytest

from tests.support.tasks.memory_support import (
    INPUT,
    TOOL,
    Hint,
    RecordingHints,
    ScriptedAdapter,
    memory_runtime,
    now,
    retry_in,
)
from toolsafe.recovery.states import StepState
from toolsafe.recovery.store import Backend, StepRecord, StorePort
from toolsafe.recovery.store.memory import MemoryStore
from toolsafe.settings import Settings
from toolsafe.tasks import pipeline, sweeper
from toolsafe.tasks.release import MAX_TICK, ReleaseTimer, tick_for
from toolsafe.tasks.runtime import Runtime

REF = "run_9/step_1"


def test_the_tick_is_a_quarter_of_the_lookahead_at_most_a_second() -> None:
    assert tick_for(0.4) == pytest.approx(0.1)
    assert tick_for(600) == MAX_TICK


def test_the_timer_sends_a_parked_retry_ahead_of_its_due_time() -> None:
    adapter = ScriptedAdapter()
    settings = Settings().replace(broker={"max_eta": 0.4})
    runtime, store = memory_runtime(adapter, settings)
    runtime.store.submit(TOOL, INPUT, operation_ref=REF, policy=runtime.policy_for(TOOL), now=now())
    hints = RecordingHints(max_eta=settings.broker.max_eta)
    adapter.answers.append(retry_in(1.0))
    assert pipeline.execute(runtime, hints, REF) == "run"
    due = store.get(REF).due_at
    assert store.get(REF).state is StepState.WAITING_RETRY and due is not None
    assert hints.take() == []  # parked: beyond max_eta
    timer = ReleaseTimer(runtime, hints)
    assert timer.tick == pytest.approx(0.1)
    timer.start()
    try:
        deadline = time.monotonic() + 5
        while not hints.sent and time.monotonic() < deadline:
            time.sleep(0.01)
        sent_at = now()
    finally:
        timer.stop()
    assert hints.take() == [Hint("execute", REF, due, recovery=True)]
    assert sent_at < due  # out before it falls due, to run at due_at as an ETA
    assert timer.released == 1 and store.get(REF).published_at == due


class FailingStore:
    """A store whose release statement fails while ``down`` (the database is gone)."""

    def __init__(self, inner: MemoryStore) -> None:
        self.inner = inner
        self.down = True

    def release_parked(self, now: datetime, horizon: datetime, limit: int) -> list[StepRecord]:
        if self.down:
            raise ConnectionError("the database is gone")
        return self.inner.release_parked(now, horizon, limit)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_a_failing_release_is_logged_once_and_the_timer_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    failing = FailingStore(MemoryStore())
    runtime = Runtime(Settings(), backend=Backend("failing", cast(StorePort, failing)))
    timer = ReleaseTimer(runtime, RecordingHints())
    with caplog.at_level(logging.INFO, logger="toolsafe.release"):
        assert timer.release_once() == 0
        assert timer.release_once() == 0
        failing.down = False
        assert timer.release_once() == 0
    events = [getattr(record, "event", None) for record in caplog.records]
    assert events == ["release_failed", "release_resumed"]
    assert "ConnectionError" in caplog.records[0].getMessage()
    assert "gone" not in caplog.text  # the type, never the message


def test_a_sweep_releases_one_batch_the_timer_all_of_them() -> None:
    adapter = ScriptedAdapter()
    settings = Settings().replace(sweep={"batch": 2})
    runtime, store = memory_runtime(adapter, settings)
    hints = RecordingHints(max_eta=settings.broker.max_eta)
    for n in range(5):
        ref = f"run_9/step_{n}"
        runtime.store.submit(
            TOOL, INPUT, operation_ref=ref, policy=runtime.policy_for(TOOL), now=now()
        )
        adapter.answers.append(retry_in(settings.broker.max_eta + 5))
        assert pipeline.execute(runtime, hints, ref) == "run"
    assert hints.take() == []
    later = now() + timedelta(seconds=10)  # all five due within max_eta of this
    assert sweeper.release(runtime, hints, later, batches=1) == 2
    assert sweeper.release(runtime, hints, later) == 3
    assert sorted(hint.operation_ref for hint in hints.take()) == [
        f"run_9/step_{n}" for n in range(5)
    ]
    waiting = store.list_steps(None, limit=10)
    assert len(waiting) == 5 and all(step.published_at == step.due_at for step in waiting)
