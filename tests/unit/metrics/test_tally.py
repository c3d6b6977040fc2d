"""The exporter's pure parts: the histogram's buckets, the fold of each kind of event,
the follower's handling of ids that commit out of order (a list stands in for the event
log: what a reader would return at each moment), and the lines an outage of the log
prints."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import cast

import pytest

from toolsafe.metrics.exporter import Exporter
from toolsafe.metrics.follower import EventFollower
from toolsafe.metrics.tally import DURATION_BUCKETS, Histogram, Tally
from toolsafe.recovery.states import StepState
from toolsafe.recovery.store.tally import TallyPort

S = StepState
T0 = datetime(2026, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Ev:
    id: int
    kind: str = "noop"
    from_state: StepState | None = None
    to_state: StepState | None = None
    seconds: float = 0.0
    reason: str | None = None
    claim: str | None = None
    commit_state: str | None = None
    tool: str | None = "create_invoice"
    submitted_at: datetime | None = T0
    unknown_since: datetime | None = None
    now: datetime = T0

    @property
    def at(self) -> datetime:
        return self.now + timedelta(seconds=self.seconds)


def test_histogram_buckets_are_upper_bounds_inclusive_and_cumulative() -> None:
    h = Histogram((1.0, 5.0))
    for value in (0.0, 1.0, 1.0001, 5.0, 7.5):
        h.observe(value)
    assert h.cumulative() == [("1.0", 2), ("5.0", 4), ("+Inf", 5)]
    assert h.count == 5 and h.total == 14.5001
    default = Histogram()
    default.observe(DURATION_BUCKETS[-1] + 1)
    assert default.cumulative()[-2] == (str(DURATION_BUCKETS[-1]), 0)
    assert default.cumulative()[-1] == ("+Inf", 1)


def test_a_verified_step_folds_into_every_figure() -> None:
    tally = Tally()
    history = [
        Ev(1, "submitted", None, S.PENDING),
        Ev(2, "claimed", S.PENDING, S.IN_FLIGHT, 1),
        Ev(3, "executed", S.IN_FLIGHT, S.VERIFYING, 2, commit_state="unknown"),
        Ev(4, "noop", S.VERIFYING, S.VERIFYING, 3, reason="unknown_outcome", claim="execute"),
        Ev(5, "looked_up", S.VERIFYING, S.VERIFYING, 4),
        Ev(6, "looked_up", S.VERIFYING, S.SUCCEEDED, 9.5, unknown_since=T0 + timedelta(seconds=2)),
    ]
    for event in history:
        tally.fold(event)
    tool = "create_invoice"
    assert +tally.steps == {(tool, "succeeded"): 1}
    assert tally.submitted == {tool: 1} and tally.executions == {tool: 1}
    assert tally.finished == {(tool, "succeeded"): 1}
    assert tally.unknown_resolved == {(tool, "committed"): 1}
    assert tally.lookups == {(tool, "inconclusive"): 1, (tool, "found"): 1}
    assert tally.prevented == {
        ("execution_refused", "unknown_outcome"): 1,
        ("found_committed", "verification"): 1,
    }
    assert tally.recovery_wait[tool].total == 7.5 and tally.recovery_wait[tool].count == 1
    assert tally.duration[tool].total == 9.5


def test_escalations_by_reason_and_unknown_writes_without_lookup() -> None:
    tally = Tally()
    tally.fold(Ev(1, "submitted", None, S.PENDING, tool="send_email"))
    tally.fold(Ev(2, "claimed", S.PENDING, S.IN_FLIGHT, tool="send_email"))
    tally.fold(
        Ev(3, "executed", S.IN_FLIGHT, S.ESCALATED, reason="unverifiable_unknown",
           commit_state="unknown", tool="send_email")
    )  # fmt: skip
    tally.fold(
        Ev(4, "noop", S.ESCALATED, S.ESCALATED, reason="terminal", claim="verify", tool=None)
    )
    tally.fold(Ev(5, "resolved", S.ESCALATED, S.FAILED, tool="send_email"))
    assert tally.escalations == {("send_email", "unverifiable_unknown"): 1}
    assert tally.unknown_resolved == {("send_email", "escalated"): 1}
    assert tally.prevented == {("idle_redelivery", "verify:terminal"): 1}
    assert tally.finished == {("send_email", "escalated"): 1, ("send_email", "failed"): 1}
    assert +tally.steps == {("send_email", "failed"): 1}


class Log:
    """Committed events as a reader sees them: ``commit`` makes one visible."""

    def __init__(self) -> None:
        self.visible: dict[int, Ev] = {}
        self.reads = 0

    def commit(self, *events: Ev) -> None:
        for event in events:
            self.visible[event.id] = event

    def read(self, after: int, awaited: Sequence[int], limit: int) -> list[Ev]:
        self.reads += 1
        wanted = set(awaited)
        found = [e for i, e in sorted(self.visible.items()) if i > after or i in wanted]
        return found[:limit]


def noop(id_: int, now: datetime) -> Ev:
    return Ev(id_, reason=f"r{id_}", claim="verify", now=now)


def test_an_id_that_commits_after_a_later_one_is_folded_once() -> None:
    clock = [T0.timestamp()]
    log = Log()
    follower = EventFollower(log.read, gap_timeout=60, batch=2, clock=lambda: clock[0])
    log.commit(noop(1, T0), noop(3, T0), noop(4, T0))  # 2 is still in its transaction
    assert follower.poll() == 3
    assert follower.position == 4 and set(follower.awaited) == {2}
    log.commit(noop(5, T0))
    clock[0] += 5
    assert follower.poll() == 1 and set(follower.awaited) == {2}
    log.commit(noop(2, T0))
    assert follower.poll() == 1 and not follower.awaited
    assert follower.poll() == 0
    assert follower.tally.events == 5
    assert sum(follower.tally.prevented.values()) == 5  # each once, none twice
    assert follower.abandoned == 0


def test_a_rolled_back_id_is_given_up_after_the_gap_timeout() -> None:
    clock = [T0.timestamp()]
    log = Log()
    follower = EventFollower(log.read, gap_timeout=30, clock=lambda: clock[0])
    log.commit(noop(1, T0), noop(3, T0))
    follower.poll()
    clock[0] += 29
    follower.poll()
    assert set(follower.awaited) == {2}
    clock[0] += 2
    follower.poll()
    assert not follower.awaited and follower.abandoned == 1


def test_old_gaps_in_the_history_are_not_awaited() -> None:
    """A new follower reading months of log (ids freed by a purge, old rollbacks)."""
    now = T0 + timedelta(days=30)
    log = Log()
    log.commit(noop(1, T0), noop(7, T0), noop(9, now))
    follower = EventFollower(log.read, gap_timeout=60, clock=now.timestamp)
    assert follower.poll() == 3
    assert set(follower.awaited) == {8}  # only the gap before a recent event


class _LogDownFor:
    """An event log that answers with libpq's multi-line error for its first ``polls``
    reads (a database with no primary), then with no events."""

    def __init__(self, polls: int) -> None:
        self.failing = polls

    def events_after(self, after: int, awaited: Sequence[int] = (), limit: int = 0) -> list[Ev]:
        if self.failing:
            self.failing -= 1
            raise ConnectionError(
                "connection failed: connection to server at 127.0.0.1, port 1 failed\n"
                "\tIs the server running on that host and accepting TCP/IP connections?\n"
                "Multiple connection attempts failed. All failures were:\n"
            )
        return []

    def history(self, before: datetime, bounds: Sequence[float]) -> tuple[int, list[object]]:
        return 0, []


def test_an_outage_of_the_event_log_is_one_line_when_it_starts_and_one_when_it_ends(
    caplog: pytest.LogCaptureFixture,
) -> None:
    log = _LogDownFor(polls=4)
    exporter = Exporter(cast(TallyPort, log), poll_interval=0.001)
    with caplog.at_level(logging.WARNING, logger="toolsafe.metrics"):
        exporter.start()
        assert exporter.caught_up.wait(timeout=30)
        exporter.stop()
    said = [record.getMessage() for record in caplog.records]
    assert said == [
        "event log unreadable (retrying every 0.0s): ConnectionError: connection failed: "
        "connection to server at 127.0.0.1, port 1 failed",
        "event log readable again after 4 failed polls",
    ]
