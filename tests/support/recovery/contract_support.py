"""What the store port's contract tests share (tests/services/recovery/test_store_contract*.py):
the step they act on, short ways to bring it to a state, and checks that a refused
action wrote nothing, on any implementation."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any

import pytest

from tests.support.recovery.store_support import (
    INPUT,
    LEASE,
    POLICY,
    T0,
    WRITE,
    force,
    unknown,
)
from toolsafe.adapters.protocol import FieldError
from toolsafe.recovery.outcomes import Executed, TransitionRefused
from toolsafe.recovery.states import StepState
from toolsafe.recovery.store import Claim, StorePort
from toolsafe.recovery.store.memory import MemoryStore
from toolsafe.recovery.store.sql import StepStore

S = StepState
REF = "run_81/step_4"
MINUTE = timedelta(minutes=1)
LATER = T0 + timedelta(minutes=5)


def set_columns(store: StorePort, ref: str, **values: Any) -> None:
    """Rows that only old data or another writer could produce, on any implementation."""
    if isinstance(store, StepStore):
        force(store, ref, **{k: v.value if isinstance(v, S) else v for k, v in values.items()})
    else:
        assert isinstance(store, MemoryStore)
        store._tables.steps[ref] = dataclasses.replace(store._tables.steps[ref], **values)


def rng() -> random.Random:
    return random.Random(7)


def submit(store: StorePort, ref: str = REF, **kwargs: Any) -> None:
    kwargs.setdefault("now", T0)
    store.submit(
        "create_invoice", {**INPUT, "ref": ref}, operation_ref=ref, policy=POLICY, **kwargs
    )


def claimed(store: StorePort, ref: str = REF, now: datetime = T0) -> Claim:
    submit(store, ref, now=now)
    claim = store.claim_execution(ref, "worker-1", LEASE, now)
    assert claim is not None
    return claim


def after(
    store: StorePort, envelope_for: Callable[[str], Any], ref: str = REF, traits: Any = WRITE
) -> None:
    claim = claimed(store, ref)
    store.record(
        claim, Executed(envelope_for(ref)), traits=traits, policy=POLICY, now=T0, rng=rng()
    )


def verifying(store: StorePort, ref: str = REF) -> datetime:
    after(store, unknown, ref)
    step = store.get(ref)
    assert step.state is S.VERIFYING and step.due_at is not None
    return step.due_at


def last(store: StorePort, ref: str = REF) -> tuple[str, Any, Any, dict[str, Any]]:
    event = store.events(ref)[-1]
    return event.kind, event.from_state, event.to_state, event.detail


def unchanged(store: StorePort, ref: str, call: Callable[[], Any]) -> TransitionRefused:
    """Run a refused action; it wrote nothing."""
    before, events = store.get(ref), store.events(ref)
    with pytest.raises(TransitionRefused) as raised:
        call()
    assert store.get(ref) == before and store.events(ref) == events
    return raised.value


def valid(_: Mapping[str, Any]) -> list[FieldError]:
    return []
