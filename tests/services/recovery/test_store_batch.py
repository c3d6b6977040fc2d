"""``submit_many`` on every store: one transaction for a batch, with ``submit``'s rules
call by call (R2), and a refused call leaving nothing of its batch behind."""

from __future__ import annotations

import random
from datetime import timedelta
from typing import Any

import pytest

from tests.support.recovery.store_support import INPUT, POLICY, T0
from toolsafe.recovery.canonical import input_hash
from toolsafe.recovery.records import NewStep
from toolsafe.recovery.states import StepState
from toolsafe.recovery.store import (
    InvalidOperationRef,
    OperationRefConflict,
    StepNotFound,
    StorePort,
)
from toolsafe.recovery.store.memory import MemoryStore
from toolsafe.recovery.store.sql import StepStore
from toolsafe.tasks.client import InvalidInput

TOOL = "create_invoice"


@pytest.fixture(params=["memory", "sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def store(request: pytest.FixtureRequest) -> StorePort:
    if request.param == "memory":
        return MemoryStore(rng=random.Random(0))
    name = "pg_store" if request.param == "postgresql" else "sqlite_store"
    found: StepStore = request.getfixturevalue(name)
    return found


def call(ref: str | None, input: dict[str, Any] | None = None, tool: str = TOOL) -> NewStep:
    return NewStep(tool, INPUT if input is None else input, ref, POLICY)


def gone(store: StorePort, *refs: str) -> bool:
    for ref in refs:
        with pytest.raises(StepNotFound):
            store.get(ref)
        assert store.events(ref) == []
    return True


def test_a_batch_commits_each_step_with_its_event_as_submit_does(store: StorePort) -> None:
    refs = [f"batch/new/{i}" for i in range(5)]
    inputs = [{**INPUT, "amount": i + 1} for i in range(5)]
    done = store.submit_many(
        [call(ref, body) for ref, body in zip(refs, inputs, strict=True)],
        now=T0,
        published_at=T0,
        actor="key:agent",
    )
    assert [one.step.operation_ref for one in done] == refs  # in the order given
    for one, body in zip(done, inputs, strict=True):
        assert one.created and one.event is not None
        step = one.step
        assert (step.state, step.attempts, step.max_attempts, step.version) == (
            StepState.PENDING,
            0,
            3,
            1,
        )
        assert step.input == body and step.input_hash == input_hash(body)
        assert step.due_at == T0 and step.published_at == T0 and step.created_at == T0
        assert store.get(step.operation_ref) == step
        assert store.events(step.operation_ref) == [one.event]
        assert (one.event.kind, one.event.from_state, one.event.to_state) == (
            "submitted",
            None,
            StepState.PENDING,
        )
        assert one.event.detail == {
            "tool": TOOL,
            "input_hash": step.input_hash,
            "max_attempts": 3,
            "actor": "key:agent",
        }
    # Exactly what a single submit of the same call stores.
    single = store.submit(TOOL, inputs[0], operation_ref="batch/one", policy=POLICY, now=T0)
    assert single.step.input_hash == done[0].step.input_hash
    assert single.step.input == done[0].step.input


def test_repeats_return_the_stored_step_without_an_event(store: StorePort) -> None:
    first = store.submit(TOOL, INPUT, operation_ref="batch/old", policy=POLICY, now=T0)
    later = T0 + timedelta(seconds=5)
    done = store.submit_many(
        [call("batch/old"), call("batch/twice"), call("batch/twice", dict(INPUT))], now=later
    )
    old, made, again = done
    assert not old.created and old.event is None and old.step == first.step
    assert made.created and not again.created and again.event is None
    assert again.step == made.step  # the step the earlier call of the batch made
    assert len(store.events("batch/old")) == 1 and len(store.events("batch/twice")) == 1


def test_a_repeat_under_an_equivalent_hash_or_same_input_is_the_same_call(
    store: StorePort,
) -> None:
    store.submit(TOOL, INPUT, operation_ref="batch/eq", policy=POLICY, now=T0, digest="h-old")
    equivalent = NewStep(
        TOOL, INPUT, "batch/eq", POLICY, digest="h-new", equivalent_hashes=["h-old"]
    )
    recognised = NewStep(
        TOOL, INPUT, "batch/eq", POLICY, digest="h-other", same_input=lambda _: True
    )
    done = store.submit_many([equivalent, recognised], now=T0)
    assert [one.created for one in done] == [False, False]


@pytest.mark.parametrize(
    ("conflicting", "what"),
    [
        (call("batch/held", {"amount": 1}), "input"),
        (call("batch/held", tool="send_email"), "tool"),
    ],
)
def test_a_conflict_with_a_stored_step_commits_nothing_of_the_batch(
    store: StorePort, conflicting: NewStep, what: str
) -> None:
    store.submit(TOOL, INPUT, operation_ref="batch/held", policy=POLICY, now=T0)
    with pytest.raises(OperationRefConflict, match=what) as raised:
        store.submit_many([call("batch/a"), conflicting, call("batch/b")], now=T0)
    assert any("call 1 of the batch" in note for note in raised.value.__notes__)
    assert gone(store, "batch/a", "batch/b")
    assert len(store.events("batch/held")) == 1


def test_a_conflict_inside_the_batch_commits_nothing(store: StorePort) -> None:
    with pytest.raises(OperationRefConflict, match="input") as raised:
        store.submit_many([call("batch/x"), call("batch/x", {"amount": 2})], now=T0)
    assert any("call 1 of the batch" in note for note in raised.value.__notes__)
    assert gone(store, "batch/x")


@pytest.mark.parametrize(
    ("bad", "error"),
    [
        (call("not a valid ref!"), InvalidOperationRef),
        (NewStep(TOOL, [1, 2], "batch/list", POLICY), InvalidInput),  # type: ignore[arg-type]
        (call("batch/nan", {"amount": float("nan")}), InvalidInput),
    ],
)
def test_a_malformed_call_is_refused_before_anything_is_written(
    store: StorePort, bad: NewStep, error: type[Exception]
) -> None:
    with pytest.raises(error) as raised:
        store.submit_many([call("batch/c"), call("batch/d"), bad], now=T0)
    assert any("call 2 of the batch" in note for note in raised.value.__notes__)
    assert gone(store, "batch/c", "batch/d")


def test_an_empty_batch_and_generated_refs(store: StorePort) -> None:
    assert store.submit_many([], now=T0) == []
    made = store.submit_many([call(None), call(None)], now=T0)
    refs = {one.step.operation_ref for one in made}
    assert len(refs) == 2 and all(ref.startswith("op_") for ref in refs)
