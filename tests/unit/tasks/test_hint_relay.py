"""The hint relay (tasks/relay.py) over the in-memory store: a submit with
``TOOLSAFE_SUBMIT_HINTS=relay`` is its commit alone, and the relay publishes each
unsent step's hint once, however many relays run, after a refused publish too."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping, Sequence

import pytest

from tests.support.tasks.memory_support import (
    INPUT,
    TOOL,
    Hint,
    RecordingHints,
    ScriptedAdapter,
    memory_runtime,
    success,
)
from toolsafe.harness import wait_until
from toolsafe.recovery.states import StepState
from toolsafe.settings import Settings
from toolsafe.tasks import pipeline
from toolsafe.tasks.relay import HintRelay
from toolsafe.tasks.runtime import Runtime
from toolsafe.tasks.submitter import Submitter

RELAYED = Settings().replace(store={"submit_hints": "relay"})


def relayed_runtime() -> tuple[Runtime, ScriptedAdapter]:
    adapter = ScriptedAdapter()
    runtime, _store = memory_runtime(adapter, RELAYED)
    return runtime, adapter


class LockedHints(RecordingHints):
    """RecordingHints shared by several relays' threads."""

    def __init__(self) -> None:
        super().__init__()
        self.lock = threading.Lock()

    def execute_many(
        self,
        steps: Sequence[tuple[str, str]],
        carried: Sequence[Mapping[str, str]] | None = None,
    ) -> None:
        with self.lock:
            super().execute_many(steps, carried)


def test_a_relayed_submit_is_its_commit_and_the_relay_publishes_its_hint_once() -> None:
    runtime, adapter = relayed_runtime()
    submitter_hints = RecordingHints()
    submitter = Submitter(runtime, submitter_hints)
    relay_hints = LockedHints()
    relay = HintRelay(runtime, relay_hints)
    relay.start()
    try:
        view = submitter.submit_call(TOOL, INPUT, "run_1/step_1", None).view
        assert view.state is StepState.PENDING
        assert submitter_hints.take() == []  # the submitter published nothing
        wait_until(lambda: bool(relay_hints.sent), 5, "the relay's hint", interval=0.005)
        assert relay_hints.take() == [Hint("execute", "run_1/step_1")]
        assert runtime.store.get("run_1/step_1").published_at is not None
        # The step's later events notify too: nothing is published again.
        adapter.answers.append(success)
        assert pipeline.execute(runtime, RecordingHints(), "run_1/step_1") == "succeed"
        assert runtime.store.get("run_1/step_1").state is StepState.SUCCEEDED
        relay._heard(None)  # a catch-up: nothing unsent
        time.sleep(0.05)
        assert relay_hints.take() == []
        assert relay.relayed == 1
    finally:
        relay.stop()


def test_a_repeat_of_an_unsent_step_leaves_its_hint_to_the_relay() -> None:
    runtime, _adapter = relayed_runtime()
    hints = RecordingHints()
    submitter = Submitter(runtime, hints)
    submitter.submit_call(TOOL, INPUT, "run_1/step_1", None)
    repeat = submitter.submit_call(TOOL, INPUT, "run_1/step_1", None)
    assert repeat.created is False and hints.take() == []
    assert runtime.store.get("run_1/step_1").published_at is None


def test_steps_stored_before_the_relay_started_are_published_when_it_starts() -> None:
    runtime, _adapter = relayed_runtime()
    submitter = Submitter(runtime, RecordingHints())
    refs = [f"run_1/step_{index}" for index in range(7)]
    for ref in refs:
        submitter.submit_call(TOOL, {**INPUT, "amount": 100 + len(ref)}, ref, None)
    hints = LockedHints()
    relay = HintRelay(runtime, hints)
    relay.start()
    try:
        wait_until(
            lambda: len(hints.sent) == len(refs), 5, "every stored step's hint", interval=0.005
        )
    finally:
        relay.stop()
    assert sorted(hint.operation_ref for hint in hints.take()) == sorted(refs)


def test_several_relays_publish_each_hint_once() -> None:
    runtime, _adapter = relayed_runtime()
    hints = LockedHints()
    relays = [HintRelay(runtime, hints) for _ in range(3)]
    for relay in relays:
        relay.start()
    submitter = Submitter(runtime, RecordingHints())
    refs = [f"run_2/step_{index}" for index in range(60)]
    try:
        for ref in refs:
            submitter.submit_call(TOOL, INPUT, ref, None)
        wait_until(lambda: len(hints.sent) >= len(refs), 5, "every hint", interval=0.005)
        for relay in relays:
            relay._heard(None)  # each catches up once more: nothing is left unsent
        time.sleep(0.1)
    finally:
        for relay in relays:
            relay.stop()
    sent = [hint.operation_ref for hint in hints.take()]
    assert sorted(sent) == sorted(refs)  # each once
    assert sum(relay.relayed for relay in relays) == len(refs)


class RefusingHints(LockedHints):
    """A broker that refuses the first ``refusals`` batches."""

    def __init__(self, refusals: int) -> None:
        super().__init__()
        self.refusals = refusals

    def execute_many(
        self,
        steps: Sequence[tuple[str, str]],
        carried: Sequence[Mapping[str, str]] | None = None,
    ) -> None:
        if self.refusals > 0:
            self.refusals -= 1
            raise ConnectionError("the broker is gone")
        super().execute_many(steps, carried)


def test_a_refused_batch_is_unsent_again_and_published_once_the_broker_answers(
    caplog: pytest.LogCaptureFixture,
) -> None:
    runtime, _adapter = relayed_runtime()
    hints = RefusingHints(refusals=2)
    relay = HintRelay(runtime, hints)
    submitter = Submitter(runtime, RecordingHints())
    with caplog.at_level(logging.INFO, logger="toolsafe.relay"):
        relay.start()
        try:
            submitter.submit_call(TOOL, INPUT, "run_3/step_1", None)
            wait_until(lambda: bool(hints.sent), 5, "the hint after two refusals", interval=0.005)
        finally:
            relay.stop()
    assert hints.take() == [Hint("execute", "run_3/step_1")]
    events = [getattr(record, "event", None) for record in caplog.records]
    assert events.count("relay_failed") == 1  # said once, not per retry
    assert "relay_resumed" in events


def test_a_relay_needs_a_positive_catch_up() -> None:
    runtime, _adapter = relayed_runtime()
    with pytest.raises(ValueError, match="catch_up"):
        HintRelay(runtime, RecordingHints(), catch_up=0)


def test_the_setting_refuses_an_unknown_way() -> None:
    from toolsafe.settings import SettingsError

    with pytest.raises(SettingsError, match="TOOLSAFE_SUBMIT_HINTS"):
        Settings.from_env({"TOOLSAFE_SUBMIT_HINTS": "outbox"})
    assert Settings.from_env({"TOOLSAFE_SUBMIT_HINTS": "relay"}).store.relays_hints
    assert not Settings().store.relays_hints
