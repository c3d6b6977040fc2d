"""Fault points: the plan format, at-most-`times` firing across processes, each action."""

from __future__ import annotations

import pickle
import time
from pathlib import Path

import pytest

from toolsafe.tasks.faults import (
    POINTS,
    FaultInjected,
    FaultPlanError,
    Faults,
    fired,
    parse_fault,
    parse_plan,
    write_plan,
)


def make(tmp_path: Path, plan: dict[str, dict[str, object]], enabled: bool = True) -> Faults:
    path = tmp_path / "plan.json"
    write_plan(path, plan)
    return Faults(enabled, str(path), str(tmp_path / "fired"))


def test_disabled_faults_never_fire(tmp_path: Path) -> None:
    faults = make(tmp_path, {"*": {"after_claim": "raise"}}, enabled=False)
    faults.hit("after_claim", "op_1")
    with faults.during("during_call", "op_1"):
        pass
    assert fired(tmp_path / "fired") == []


def test_raise_fires_once_per_entry(tmp_path: Path) -> None:
    faults = make(tmp_path, {"op_1": {"after_call": "raise"}})
    faults.hit("after_call", "op_2")  # another ref: nothing
    faults.hit("after_claim", "op_1")  # another point: nothing
    with pytest.raises(FaultInjected) as caught:
        faults.hit("after_call", "op_1")
    assert caught.value.point == "after_call" and caught.value.operation_ref == "op_1"
    faults.hit("after_call", "op_1")  # already fired
    records = fired(tmp_path / "fired")
    assert [(r["entry"], r["point"], r["action"]) for r in records] == [
        ("op_1", "after_call", "raise")
    ]


def test_wildcard_times_counts_across_refs(tmp_path: Path) -> None:
    faults = make(tmp_path, {"*": {"before_publish": {"action": "raise", "times": 2}}})
    raised = 0
    for number in range(5):
        try:
            faults.hit("before_publish", f"op_{number}")
        except FaultInjected:
            raised += 1
    assert raised == 2


def test_pause_sleeps(tmp_path: Path) -> None:
    faults = make(tmp_path, {"op_1": {"after_record": "pause:0.3"}})
    started = time.monotonic()
    faults.hit("after_record", "op_1")
    assert time.monotonic() - started >= 0.3


def test_plan_changes_are_picked_up(tmp_path: Path) -> None:
    faults = make(tmp_path, {})
    faults.hit("after_claim", "op_1")
    write_plan(tmp_path / "plan.json", {"op_1": {"after_claim": "raise"}})
    with pytest.raises(FaultInjected):
        faults.hit("after_claim", "op_1")


def test_during_call_raises_inside_the_call(tmp_path: Path) -> None:
    faults = make(tmp_path, {"op_1": {"during_call": {"action": "raise", "delay": 0.05}}})
    with pytest.raises(FaultInjected), faults.during("during_call", "op_1"):
        for _ in range(200):  # a call that runs Python code for up to 2 s
            time.sleep(0.01)
    assert len(fired(tmp_path / "fired")) == 1


def test_during_call_that_ends_first_keeps_the_fault(tmp_path: Path) -> None:
    faults = make(tmp_path, {"op_1": {"during_call": {"action": "raise", "delay": 0.2}}})
    with faults.during("during_call", "op_1"):
        pass
    time.sleep(0.3)  # the timer was cancelled: nothing is raised later either
    assert fired(tmp_path / "fired") == []


@pytest.mark.parametrize(
    ("point", "raw", "needle"),
    [
        ("after_lunch", "kill", "unknown fault point"),
        ("after_claim", "explode", "action must be one of"),
        ("after_claim", 3, "string or an object"),
        ("after_claim", {"action": "pause", "seconds": -1}, ">= 0"),
        ("after_claim", {"action": "kill", "when": 1}, "unknown keys"),
        ("after_claim", "pause:soon", "numbers"),
        ("during_call", "pause:1", "not pause"),
    ],
)
def test_bad_plans_are_refused(point: str, raw: object, needle: str) -> None:
    with pytest.raises(FaultPlanError, match=needle):
        parse_fault(point, raw)


def test_plan_shapes() -> None:
    plan = parse_plan({"*": {point: "raise" for point in POINTS if point != "during_call"}})
    assert set(plan["*"]) == set(POINTS) - {"during_call"}
    with pytest.raises(FaultPlanError):
        parse_plan(["kill"])
    with pytest.raises(FaultPlanError):
        parse_plan({"op": "kill"})


def test_fault_errors_survive_pickling() -> None:
    error = FaultInjected("after_call", "op_1")
    assert str(pickle.loads(pickle.dumps(error))) == str(error)
    plan_error = FaultPlanError("p.json", "broken")
    assert str(pickle.loads(pickle.dumps(plan_error))) == str(plan_error)
