"""``benchmarks.eta_lateness`` reads a retry's lateness, and which retries came due
while first attempts still ran, from steps' events (no I/O)."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType

import pytest

from toolsafe.recovery.records import EventRecord
from toolsafe.recovery.states import StepState

S = StepState
T0 = datetime(2026, 12, 6, 2, 0, tzinfo=UTC)
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def eta_lateness(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    # The benchmark programs run from the project's root (python -m benchmarks.…).
    monkeypatch.syspath_prepend(str(ROOT))
    return importlib.import_module("benchmarks.eta_lateness")


def history(ref: str, first_recorded: float, delay: float, claimed: float) -> list[EventRecord]:
    """A step whose first attempt was recorded ``first_recorded`` s after T0, due
    ``delay`` s later, its retry claimed ``claimed`` s after T0."""
    due = T0 + timedelta(seconds=first_recorded + delay)

    def event(
        n: int, at: float, kind: str, moved: tuple[S | None, S], **detail: str
    ) -> EventRecord:
        return EventRecord(
            n, ref, T0 + timedelta(seconds=at), kind, moved[0], moved[1], kind, dict(detail)
        )

    return [
        event(1, 0.0, "submitted", (None, S.PENDING)),
        event(2, first_recorded - 0.002, "claimed", (S.PENDING, S.IN_FLIGHT)),
        event(
            3,
            first_recorded,
            "executed",
            (S.IN_FLIGHT, S.WAITING_RETRY),
            due_at=due.isoformat(),
        ),
        event(4, claimed, "claimed", (S.WAITING_RETRY, S.IN_FLIGHT)),
        event(5, claimed + 0.002, "executed", (S.IN_FLIGHT, S.SUCCEEDED)),
    ]


def test_a_retrys_lateness_is_its_claim_after_the_due_time(eta_lateness: ModuleType) -> None:
    retry_lateness: Callable[[Sequence[EventRecord]], float | None] = eta_lateness.retry_lateness
    late = retry_lateness(history("a", 0.5, 2.0, 2.503))
    assert late is not None and abs(late - 0.003) < 1e-9
    # Not waiting to retry yet: no lateness to read.
    assert retry_lateness(history("b", 0.5, 2.0, 3.0)[:2]) is None


def test_retries_due_before_the_last_first_attempt_ended_are_counted(
    eta_lateness: ModuleType,
) -> None:
    due_during_first_attempts: Callable[[Sequence[Sequence[EventRecord]]], int] = (
        eta_lateness.due_during_first_attempts
    )
    runs = [
        history("early", 0.1, 1.0, 1.2),  # due at 1.1 s: the last first attempt ends at 2.0
        history("later", 0.2, 4.0, 4.201),
        history("last", 2.0, 3.0, 5.0),
    ]
    assert due_during_first_attempts(runs) == 1
    # First attempts all over before any retry is due: a clean run.
    assert (
        due_during_first_attempts([history("x", 0.1, 4.0, 4.1), history("y", 0.3, 4.0, 4.3)]) == 0
    )
    assert due_during_first_attempts([]) == 0
