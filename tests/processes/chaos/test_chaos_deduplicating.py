"""``toolsafe chaos --deduplicating-downstream``: the example service enforces the
idempotency key and the adapters declare ``deduplicates_by_key``. A small run of its
own, beside the others (not in the serial unit: 66 steps and two workers)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.processes.chaos.test_chaos import chaos_database  # noqa: F401 - the fixture
from tests.support.chaos_runs import run_chaos
from toolsafe.chaos.plan import Timing, scenarios

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.redis]


def test_a_deduplicating_downstream_keeps_the_invariant_and_deduplicates_retries(
    chaos_database: str,  # noqa: F811 - the fixture
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``--deduplicating-downstream``: the example service enforces the key and the
    adapters declare ``deduplicates_by_key``. Killed calls are retried one window after
    their claim; the run still ends with no violation, every step as its scenario says,
    and ``slow_store``'s retries answered from the key (the trait at work)."""
    code, printed, report = run_chaos(
        [
            "--deduplicating-downstream",
            "--database", chaos_database,
            "--steps", "66",
            "--workers", "2",
            "--pool", "prefork",
            "--kills", "12",
            "--broker-flushes", "0",
            "--db-kill-rounds", "0",
            "--duplicates", "10",
            "--seed", "11",
            "--bound", "150",
        ],
        tmp_path,
        capsys,
    )  # fmt: skip
    assert report["violations"] == [], printed
    assert code == 0, printed
    assert report["settled"] and report["downstream"] == "deduplicating", printed
    known = scenarios(Timing(), deduplicating=True)
    assert report["scenarios"] == {s.name: {s.expected.value: 6} for s in known}, printed
    assert report["unplanned_worker_exits"] == 0, printed
    # Six steps whose key the downstream held in flight past the window: a retry that
    # met the first request (in flight, or stored by then) was answered from the key.
    assert report["deduplicated_requests"] >= 1, printed
    assert "requests the downstream deduplicated by key" in printed
