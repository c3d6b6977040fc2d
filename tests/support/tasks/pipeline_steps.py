"""The pipeline's unit tests' steps over the memory store: one committed an hour ago,
one whose write went out an hour ago with an unknown outcome, and a step's event kinds."""

from __future__ import annotations

import random
from datetime import timedelta

from tests.support.tasks.memory_support import INPUT, SETTINGS, TOOL, now, unknown
from toolsafe.recovery.outcomes import Executed
from toolsafe.recovery.states import StepState
from toolsafe.recovery.store.memory import MemoryStore
from toolsafe.tasks.runtime import Runtime

REF = "run_81/step_4"
LEASE = timedelta(seconds=SETTINGS.calls.lease)
HOUR = timedelta(hours=1)
MINUTE = timedelta(minutes=1)


def submit(runtime: Runtime, ref: str = REF, tool: str = TOOL, ago: timedelta = HOUR) -> None:
    """A step committed ``ago`` (so that anything it waits for is due by now)."""
    runtime.store.submit(
        tool, INPUT, operation_ref=ref, policy=runtime.policy_for(tool), now=now() - ago
    )


def verifying_since(runtime: Runtime, ref: str = REF) -> None:
    """A step whose write went out an hour ago with an unknown outcome: due to verify."""
    submit(runtime, ref)
    then = now() - HOUR
    claim = runtime.store.claim_execution(ref, "old-worker", LEASE, then)
    assert claim is not None
    recorded = runtime.store.record(
        claim,
        Executed(unknown(ref)),
        traits=runtime.traits_for(TOOL),
        policy=runtime.policy_for(TOOL),
        now=then,
        rng=random.Random(0),
    )
    assert recorded is not None and recorded.step.state is StepState.VERIFYING


def kinds(store: MemoryStore, ref: str = REF) -> list[str]:
    return [event.kind for event in store.events(ref)]
