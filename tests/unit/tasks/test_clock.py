"""The one clock (``tasks/clock.py``) with fake time sources, no I/O: the offset is the
database's time minus the midpoint of the round trip, measured at the first use and
again when due (never per call), kept through a failed measurement, and never measured
for a database on this machine's clock; adapters' times move onto the database's."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

import pytest

from tests.support.tasks.fake_time import SKEW, T0, FakeTime
from tests.support.tasks.memory_support import INPUT, TOOL, RecordingHints, ScriptedAdapter
from toolsafe.adapters import codes
from toolsafe.adapters.envelope import AnySuccess, Verification
from toolsafe.adapters.protocol import LookupFound, LookupNotFound
from toolsafe.adapters.registry import Registry
from toolsafe.recovery.outcomes import Executed, LookedUp
from toolsafe.recovery.store.memory.backend import memory_backend
from toolsafe.settings import Settings
from toolsafe.tasks.app import Publisher
from toolsafe.tasks.client import Client
from toolsafe.tasks.clock import Clock, on_database_clock
from toolsafe.tasks.runtime import Runtime


def test_the_offset_is_the_database_minus_the_midpoint_of_the_round_trip() -> None:
    fake = FakeTime(trip=0.4)
    clock = fake.clock()
    assert clock.offset == timedelta(0) and fake.reads == 0  # nothing before the first use
    now = clock.now()
    assert fake.reads == 1
    assert clock.offset == SKEW  # the round trip's two halves cancel out
    assert now == fake.wall + SKEW
    assert clock.to_database(fake.wall) == fake.wall + SKEW
    assert clock.to_local(fake.wall + SKEW) == fake.wall
    assert clock.uncertainty == timedelta(seconds=0.2)


def test_the_shortest_round_trip_of_the_samples_is_kept() -> None:
    fake = FakeTime(trip=0.002)
    fake.setup = 0.8  # the first read opens the connection: the database answers late
    clock = fake.clock(samples=2)
    clock.now()
    assert fake.reads == 2
    assert abs(clock.offset - SKEW) < timedelta(milliseconds=1)  # not 0.4 s off
    assert clock.uncertainty == timedelta(seconds=0.001)


def test_measured_again_only_when_due_never_per_call() -> None:
    fake = FakeTime()
    clock = fake.clock(every=45)
    clock.now()
    for _ in range(1000):
        clock.now()
    fake.advance(44)
    clock.now()
    assert fake.reads == 1
    fake.ahead = timedelta(seconds=-5)  # the worker's clock was stepped (NTP)
    fake.advance(1)
    assert clock.now() == fake.wall + timedelta(seconds=-5)
    assert fake.reads == 2 and clock.offset == timedelta(seconds=-5)


def test_a_failed_measurement_keeps_the_last_offset_and_logs_one_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    fake = FakeTime()
    clock = fake.clock(every=45)
    clock.now()
    fake.failing = True
    fake.advance(45)
    with caplog.at_level(logging.WARNING, logger="toolsafe.clock"):
        assert clock.now() == fake.wall + SKEW
        for _ in range(100):
            clock.now()  # not asked again before the retry is due
    failed = [r for r in caplog.records if getattr(r, "event", None) == "clock_unmeasured"]
    assert len(failed) == 1 and "-30.000 s off" in failed[0].getMessage()
    assert fake.reads == 2
    fake.failing = False
    fake.ahead = timedelta(seconds=31)
    fake.advance(5)  # tried again after retry_after, not a whole interval
    assert clock.now() == fake.wall + timedelta(seconds=31)


def test_a_first_measurement_that_fails_leaves_the_local_clock_until_one_works() -> None:
    fake = FakeTime()
    fake.failing = True
    clock = fake.clock()
    assert clock.now() == fake.wall  # offset 0: the process's own clock, for now
    fake.failing = False
    fake.advance(5)
    assert clock.now() == fake.wall + SKEW


def test_a_database_on_this_machines_clock_is_never_asked() -> None:
    asked: list[int] = []

    def same_host() -> None:
        asked.append(1)
        return None

    fake = FakeTime()
    clock = Clock(same_host, local=fake.local, monotonic=fake.monotonic)
    for _ in range(3):
        assert clock.now() == fake.wall
        fake.advance(1000)
    assert asked == [1] and clock.offset == timedelta(0)


def test_the_memory_store_gives_offset_zero_without_a_query() -> None:
    registry = Registry()
    registry.register(ScriptedAdapter())
    runtime = Runtime(Settings(), backend=memory_backend(), registry=registry)
    before = datetime.now(UTC)
    assert before <= runtime.now() <= datetime.now(UTC)
    assert runtime.clock.offset == timedelta(0)
    client = Client(runtime=runtime, hints=RecordingHints())
    client.submit(TOOL, INPUT, operation_ref="clock/memory")


def test_adapters_times_move_onto_the_database_clock() -> None:
    local = T0
    limited = codes.build_error(
        "RATE_LIMITED", "clock/1", {}, not_before=local + timedelta(seconds=2)
    )
    moved = on_database_clock(Executed(limited), SKEW)
    assert isinstance(moved, Executed)
    assert moved.envelope.not_before == local + timedelta(seconds=2) + SKEW  # type: ignore[union-attr]
    success = AnySuccess(
        operation_ref="clock/1", result={}, verification=Verification(checked_at=local)
    )
    moved = on_database_clock(Executed(success, ()), SKEW)
    assert moved.envelope.verification.checked_at == local + SKEW  # type: ignore[union-attr]
    found = on_database_clock(LookedUp(LookupFound(checked_at=local, result={})), -SKEW)
    assert found.result.checked_at == local - SKEW  # type: ignore[union-attr]
    unmoved = LookedUp(LookupNotFound(checked_at=local))
    assert on_database_clock(unmoved, timedelta(0)) is unmoved


def test_an_eta_goes_out_on_the_publishers_own_clock() -> None:
    fake = FakeTime()
    clock = fake.clock()
    sent: list[datetime | None] = []

    class App:
        def send_task(self, *_: object, eta: datetime | None = None, **__: object) -> None:
            sent.append(eta)

    publisher = Publisher(
        App(), Settings().replace(broker={"max_eta": 10, "eta_jitter": 0.0}), clock
    )
    now = clock.now()  # the database's time
    assert publisher.execute("clock/eta", now + timedelta(seconds=3), now)
    # 3 s from now on the local clock, later only by what the offset's error (half the
    # 0.2 s round trip) exceeds half the early allowance; a consumer that finds the
    # step due a little early waits the rest out (tasks/early.py).
    assert clock.uncertainty == timedelta(seconds=0.1)
    allowance = timedelta(seconds=publisher.settings.calls.early_wait)  # 5 ms by default
    assert sent == [fake.wall + timedelta(seconds=3.1) - allowance / 2]
    # A quiet measurement (a 4 ms round trip): the best estimate, no margin at all.
    quiet = FakeTime(trip=0.004).clock()
    now = quiet.now()
    eta = quiet.local_eta(now + timedelta(seconds=3), allowance)
    assert eta == quiet.to_local(now) + timedelta(seconds=3)
