"""How the sweeper reads the broker's marker: which window of hints a broker lost."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from toolsafe.tasks.broker_watch import LossWindow, Marker, judge, parse_marker

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
STARTED = NOW - timedelta(seconds=3)
SECOND = timedelta(seconds=1)


def marker(run_id: str, written_at: datetime, recovering: LossWindow | None = None) -> Marker:
    return Marker(run_id, written_at, recovering)


def test_the_same_server_with_its_marker_lost_nothing() -> None:
    assert judge(marker("a", NOW - SECOND), "a", STARTED, NOW, "a") is None


def test_a_restart_that_reloaded_its_data_lost_what_came_after_the_reloaded_marker() -> None:
    written = NOW - 10 * SECOND
    assert judge(marker("a", written), "b", STARTED, NOW, "a") == LossWindow(written, STARTED)


def test_a_fresh_server_lost_everything_sent_before_it_started() -> None:
    assert judge(None, "b", STARTED, NOW, "a") == LossWindow(None, STARTED)
    assert judge(None, "b", STARTED, NOW, None) == LossWindow(None, STARTED)


def test_keys_deleted_under_a_running_server_lost_everything_sent_until_now() -> None:
    assert judge(None, "a", STARTED, NOW, "a") == LossWindow(None, NOW)


def test_an_unfinished_recovery_is_kept_and_merged_with_a_new_loss() -> None:
    pending = LossWindow(NOW - 60 * SECOND, NOW - 50 * SECOND)
    assert judge(marker("a", NOW - SECOND, pending), "a", STARTED, NOW, "a") == pending
    # Restarted again while recovering: the reloaded marker's window and the new one.
    reloaded = marker("a", NOW - 20 * SECOND, pending)
    assert judge(reloaded, "b", STARTED, NOW, "a") == LossWindow(pending.since, STARTED)
    assert pending.merged(LossWindow(None, NOW)) == LossWindow(None, NOW)
    assert pending.merged(LossWindow(NOW - 30 * SECOND, STARTED)) == LossWindow(
        pending.since, STARTED
    )


def test_the_marker_round_trips_and_garbage_is_no_marker() -> None:
    for window in (None, LossWindow(None, STARTED), LossWindow(NOW - SECOND, NOW)):
        written = marker("r1", NOW, window)
        assert parse_marker(written.dump()) == written
    assert parse_marker(None) is None
    assert parse_marker("not json") is None
    assert parse_marker('{"run_id": "x"}') is None
