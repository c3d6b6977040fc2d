"""The demo's parts without running it: the CLI options, the verdict of a scenario, the
path shown, the filesystem broker, hidden passwords."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from toolsafe.cli.main import build_parser
from toolsafe.demo.report import Played, path_lines, render
from toolsafe.demo.scenarios import Check, Result
from toolsafe.recovery.states import StepState
from toolsafe.recovery.store import EventRecord


def test_the_cli_offers_the_demo_with_its_options() -> None:
    args = build_parser().parse_args(
        ["demo", "--broker", "redis://h/3", "--database", "sqlite:///x", "--workers", "3"]
    )
    assert (args.broker, args.database, args.workers, args.keep) == (
        "redis://h/3",
        "sqlite:///x",
        3,
        False,
    )


def test_a_scenario_with_a_failed_check_or_an_error_is_not_as_expected() -> None:
    good = Result("a", "A", "r/a", [Check("ends succeeded", True)])
    failed = Result("b", "B", "r/b", [Check("ends succeeded", True), Check("one invoice", False)])
    broken = Result("c", "C", "r/c", [Check("ends succeeded", True)], error="TimeoutError: x")
    unchecked = Result("d", "D", "r/d")
    assert good.ok
    assert not failed.ok and not broken.ok and not unchecked.ok
    report = render([Played(r, None, [], 0) for r in (good, failed, broken)], {}, 1.0)
    assert "1. A — as expected" in report
    assert "2. B — NOT AS EXPECTED" in report
    assert "[FAIL] one invoice" in report
    assert "[FAIL] TimeoutError: x" in report
    assert "1 of 3 scenarios ended as expected" in report


def test_the_path_shows_times_states_and_who_claimed() -> None:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    S = StepState
    events = [
        EventRecord(1, "r", start, "submitted", None, S.PENDING, "submitted", {}),
        EventRecord(
            2,
            "r",
            start + timedelta(seconds=0.5),
            "claimed",
            S.PENDING,
            S.IN_FLIGHT,
            "claimed by a worker",
            {"claim": "execute", "owner": "host:41", "attempt": 1},
        ),
        EventRecord(
            3,
            "r",
            start + timedelta(seconds=2),
            "noop",
            S.IN_FLIGHT,
            S.IN_FLIGHT,
            "noop",
            {"reason": "claimed"},
        ),
    ]
    lines = path_lines(events, {41: "worker1"})
    assert "+  0.00s  submitted → pending" in lines[0]
    assert "pending → in_flight" in lines[1]
    assert "execution claimed by worker1 attempt 1" in lines[1]
    assert "+  2.00s  (stays in_flight)" in lines[2]
    assert "nothing to do: claimed" in lines[2]


def test_a_filesystem_broker_url_names_its_folder() -> None:
    from toolsafe.celeryconfig import filesystem_transport_options
    from toolsafe.settings import SettingsError

    assert filesystem_transport_options("redis://127.0.0.1:6379/0") == {}
    options = filesystem_transport_options("filesystem:///tmp/demo/broker")
    assert options["data_folder_in"] == options["data_folder_out"] == "/tmp/demo/broker/queue"
    assert options["control_folder"] == "/tmp/demo/broker/control"
    with pytest.raises(SettingsError, match="absolute folder"):
        filesystem_transport_options("filesystem://relative/broker")


def test_the_demo_broker_delivers_whole_messages_and_skips_partial_files(
    tmp_path: Path,
) -> None:
    from kombu.connection import Connection

    from toolsafe.broker.filesystem import Transport
    from toolsafe.celeryconfig import filesystem_transport_options

    url = f"filesystem://{tmp_path}/broker"
    for part in ("queue", "control", "processed"):
        (tmp_path / "broker" / part).mkdir(parents=True)
    # A message still being written has a name no consumer matches.
    (tmp_path / "broker" / "queue" / "partial-0123").write_bytes(b"")
    with Connection(  # type: ignore[no-untyped-call]
        url, transport=Transport, transport_options=filesystem_transport_options(url)
    ) as conn:
        queue = conn.SimpleQueue("demo")
        queue.put({"operation_ref": "run_1/step_1"})
        message = queue.get(timeout=2)
        assert message.payload == {"operation_ref": "run_1/step_1"}
        message.ack()
        with pytest.raises(queue.Empty):
            queue.get(timeout=0.2)
        queue.close()
    names = sorted(path.name for path in (tmp_path / "broker" / "queue").iterdir())
    assert names == ["partial-0123"]


def test_progress_hides_passwords_in_urls() -> None:
    from toolsafe.demo.env import _hide_password

    shown = _hide_password("postgresql+psycopg://toolsafe:s3cret@db:5432/toolsafe")
    assert shown == "postgresql+psycopg://toolsafe:***@db:5432/toolsafe"
    assert _hide_password("redis://127.0.0.1:6379/3") == "redis://127.0.0.1:6379/3"
    assert _hide_password("filesystem:///tmp/x/broker") == "filesystem:///tmp/x/broker"
