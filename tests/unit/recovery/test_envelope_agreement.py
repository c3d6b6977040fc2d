"""Every lifecycle path, driven through ``decide`` at random (outcomes, approvals,
rejections, cancellations, operator resolutions, lease expiries): after every Decision
the envelope the model would see agrees with the state it describes."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.recovery.envelope_agreement import assert_agrees
from tests.unit.recovery.test_decide_property import REF, World, next_outcome, worlds
from toolsafe.adapters.envelope import to_wire
from toolsafe.recovery.states import NO_OUTCOME_YET, TERMINAL, StepState

S = StepState
SEEN: Counter[StepState] = Counter()


def _check(world: World, reason: str | None) -> None:
    step = world.step
    shown = None if step.state in NO_OUTCOME_YET else step.envelope
    assert_agrees(
        state=step.state,
        commit_state=step.commit_state,
        attempts=step.attempts,
        max_attempts=step.max_attempts,
        due_at=step.due_at,
        reason=reason,
        flagged=step.flagged_fields,
        operation_ref=REF,
        shown=shown,
    )
    SEEN[step.state] += 1


@settings(
    max_examples=400,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(world=worlds(), data=st.data(), seed=st.integers(0, 2**32 - 1))
def test_the_envelope_agrees_with_every_state_on_every_path(
    world: World, data: st.DataObject, seed: int
) -> None:
    rng = random.Random(seed)
    reason: str | None = None
    _check(world, reason)
    for _ in range(data.draw(st.integers(1, 40), label="length")):
        if world.step.state in TERMINAL - {S.ESCALATED}:
            break
        outcome = next_outcome(data.draw, world)
        if outcome is None:
            world.claim()  # the claim leaves the stored envelope; views hide it
        else:
            decision = world.apply(outcome, rng)
            if decision is not None:
                reason = decision.reason
                shown = None if decision.envelope is None else to_wire(decision.envelope)
                # The store writes the Decision's envelope as the row's last_envelope.
                world.step = replace(world.step, envelope=shown)
        _check(world, reason)


def test_the_paths_reach_every_state() -> None:
    # Runs after the property above in the same module: its paths covered every state.
    if not SEEN:
        test_the_envelope_agrees_with_every_state_on_every_path()
    assert set(SEEN) == set(S), f"states never reached: {set(S) - set(SEEN)}"
