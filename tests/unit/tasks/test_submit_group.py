"""Concurrent single submits share one transaction (``tasks/submit_group.py``), over the
in-memory store: every caller answered after the commit that holds its step, a refused
call refused alone, a lone caller never waiting for company."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

import pytest

from tests.support.tasks.memory_support import (
    INPUT,
    SETTINGS,
    TOOL,
    Hint,
    RecordingHints,
    ScriptedAdapter,
)
from toolsafe.adapters.registry import Registry
from toolsafe.recovery.records import NewStep
from toolsafe.recovery.store import OperationRefConflict, Submitted
from toolsafe.recovery.store.memory import MemoryStore
from toolsafe.recovery.store.memory.backend import memory_backend
from toolsafe.settings import Settings, SettingsError
from toolsafe.tasks.client import Client, Submission
from toolsafe.tasks.runtime import Runtime

CALLERS = 8


class CountingStore(MemoryStore):
    """The in-memory store, remembering the size of every shared transaction; a lone
    submit takes as long as a commit to a disk does (so others come meanwhile)."""

    def __init__(self) -> None:
        super().__init__()
        self.groups: list[int] = []

    def submit(self, *args: Any, **kwargs: Any) -> Submitted:
        time.sleep(0.01)
        return super().submit(*args, **kwargs)

    def submit_many(
        self,
        calls: Sequence[NewStep],
        *,
        now: datetime,
        published_at: datetime | None = None,
        actor: str | None = None,
    ) -> list[Submitted]:
        self.groups.append(len(calls))
        return super().submit_many(calls, now=now, published_at=published_at, actor=actor)


def world(window: float) -> tuple[Client, CountingStore, RecordingHints]:
    registry = Registry()
    registry.register(ScriptedAdapter())
    store = CountingStore()
    settings = SETTINGS.replace(store={"submit_window": window})
    hints = RecordingHints()
    runtime = Runtime(settings, backend=memory_backend(store), registry=registry)
    return Client(runtime=runtime, hints=hints), store, hints


def at_once(calls: list[Callable[[], Submission]]) -> list[Submission | BaseException]:
    """Run the calls in threads that start together; each one's result or error."""
    start = threading.Barrier(len(calls))
    results: list[Submission | BaseException | None] = [None] * len(calls)

    def run(index: int) -> None:
        start.wait()
        try:
            results[index] = calls[index]()
        except Exception as error:
            results[index] = error

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert all(result is not None for result in results)
    return [result for result in results if result is not None]


def submit(client: Client, ref: str, input: dict[str, Any] = INPUT) -> Callable[[], Submission]:
    return lambda: client.submit_call(TOOL, input, ref)


def test_concurrent_submits_share_a_commit_and_each_is_durable_when_answered() -> None:
    client, store, hints = world(window=0.02)
    refs = [f"run/{i}" for i in range(CALLERS)]
    results = at_once([submit(client, ref) for ref in refs])
    for ref, result in zip(refs, results, strict=True):
        assert isinstance(result, Submission) and result.created
        assert result.view.operation_ref == ref
    assert {step.operation_ref for step in store.list_steps(None, 100)} == set(refs)
    assert sorted(hints.take(), key=lambda h: h.operation_ref) == [
        Hint("execute", ref) for ref in sorted(refs)
    ]
    assert max(store.groups) > 1  # some of them shared one transaction


def test_a_refused_call_does_not_sink_the_others_it_shared_a_commit_with() -> None:
    client, store, hints = world(window=0.02)
    client.submit_call(TOOL, INPUT, "run/taken")
    other = {**INPUT, "amount": INPUT["amount"] + 1}
    refs = [f"run/{i}" for i in range(CALLERS - 1)]
    results = at_once([submit(client, "run/taken", other), *(submit(client, r) for r in refs)])
    refused, *accepted = results
    assert isinstance(refused, OperationRefConflict)
    assert all(isinstance(result, Submission) and result.created for result in accepted)
    assert {step.operation_ref for step in store.list_steps(None, 100)} == {"run/taken", *refs}
    assert store.get("run/taken").input == INPUT
    sent = sorted(hint.operation_ref for hint in hints.take())
    assert sent == sorted(["run/taken", *refs])  # each accepted step's hint, once


def test_the_same_operation_ref_at_once_makes_one_step() -> None:
    client, store, hints = world(window=0.02)
    results = at_once([submit(client, "run/same") for _ in range(CALLERS)])
    assert [step.operation_ref for step in store.list_steps(None, 100)] == ["run/same"]
    created = [r for r in results if isinstance(r, Submission) and r.created]
    repeats = [r for r in results if isinstance(r, Submission) and not r.created]
    assert len(created) == 1 and len(repeats) == CALLERS - 1
    assert hints.take() == [Hint("execute", "run/same")]


def test_a_lone_submit_commits_alone_without_waiting() -> None:
    client, store, _ = world(window=0.05)
    assert client.submit_call(TOOL, INPUT, "run/alone").created
    assert store.groups == []  # no shared transaction, so no window waited for


def test_a_zero_window_turns_sharing_off() -> None:
    client, store, _ = world(window=0)
    results = at_once([submit(client, f"run/{i}") for i in range(CALLERS)])
    assert all(isinstance(result, Submission) for result in results)
    assert store.groups == []


@pytest.mark.parametrize("raw", ["-0.001", "0.5", "soon"])
def test_the_window_setting_is_checked(raw: str) -> None:
    with pytest.raises(SettingsError, match="TOOLSAFE_SUBMIT_WINDOW"):
        Settings.from_env({"TOOLSAFE_SUBMIT_WINDOW": raw})
