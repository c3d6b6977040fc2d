"""How `make test` splits the suite between xdist workers (tests/conftest.py): a file is
one work unit, so a module's cluster starts once; the tests of ``SERIAL`` share one unit;
and the machine factor that bounds the timings which are a feature."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import PER_TEST, SERIAL, xdist_scope
from tests.support.machine import (
    MAX_FACTOR,
    REFERENCE_CPU,
    RUNS,
    Machine,
    parse_proc_stat,
    speed_line,
)
from tests.support.schedule import Recorder, longest_first, read_durations, unit_costs

TESTS = Path(__file__).resolve().parents[1]


def test_a_file_is_one_work_unit_and_the_serial_files_share_one() -> None:
    unit = "tests/unit/test_layout.py::test_x"
    assert xdist_scope(unit) == "tests/unit/test_layout.py"
    cluster = "tests/processes/pipeline/test_leases.py::test_a[prefork]"
    assert xdist_scope(cluster) == "tests/processes/pipeline/test_leases.py"
    assert {xdist_scope(f"tests/{path}::test_y") for path in SERIAL} == {"serial"}


def test_a_per_test_file_gives_each_test_its_own_unit() -> None:
    for path in PER_TEST:
        assert xdist_scope(f"tests/{path}::test_y[a]") == f"tests/{path}::test_y[a]"
    assert not set(PER_TEST) & set(SERIAL)


def test_every_serial_entry_is_a_test_file_and_says_why() -> None:
    for path, reason in {**SERIAL, **PER_TEST}.items():
        assert (TESTS / path).is_file(), path
        assert len(reason) > 20, path


@pytest.mark.parametrize(
    ("wall", "cpu", "factor"),
    [
        (REFERENCE_CPU * RUNS, REFERENCE_CPU * RUNS, 1.0),  # idle reference machine
        (0.1, 0.2, 1.0),  # never below 1
        (3 * REFERENCE_CPU * RUNS, REFERENCE_CPU * RUNS, 3.0),  # a third of the cores
        (2 * REFERENCE_CPU * RUNS, 2 * REFERENCE_CPU * RUNS, 2.0),  # cores half as fast
        (100.0, REFERENCE_CPU * RUNS, MAX_FACTOR),  # never above the cap
    ],
)
def test_the_machine_factor_is_the_share_of_the_cores_times_their_slowness(
    wall: float, cpu: float, factor: float
) -> None:
    machine = Machine(wall, cpu)
    assert machine.factor == pytest.approx(factor)
    assert machine.seconds(2.0) == pytest.approx(2.0 * factor)
    assert f"machine factor {factor:.2f}" in machine.explain(2.0)


@dataclass(frozen=True)
class _Item:
    nodeid: str


def test_the_longest_units_go_first_and_a_units_tests_stay_together() -> None:
    items = [
        _Item("tests/unit/test_a.py::t1"),
        _Item("tests/unit/test_a.py::t2"),
        _Item("tests/processes/chaos/test_chaos.py::t1"),  # serial
        _Item("tests/processes/x/test_long.py::t1"),
        _Item("tests/services/test_s.py::t1"),
        _Item("tests/processes/pipeline/test_duplicates.py::t1"),  # serial
        _Item("tests/processes/x/test_long.py::t2"),
        _Item("tests/processes/x/test_new.py::t1"),  # not measured yet
    ]
    measured = {
        "serial": 200.0,
        "tests/processes/x/test_long.py": 100.0,
        "tests/processes/x/test_short.py": 20.0,
        "tests/unit/test_a.py": 0.5,
    }
    ordered = [item.nodeid for item in longest_first(items, xdist_scope, measured)]
    assert ordered == [
        "tests/processes/chaos/test_chaos.py::t1",
        "tests/processes/pipeline/test_duplicates.py::t1",
        "tests/processes/x/test_long.py::t1",
        "tests/processes/x/test_long.py::t2",
        # Unmeasured: the median of the measured process units (serial, 100, 20).
        "tests/processes/x/test_new.py::t1",
        # No services unit measured: the kind's guess (3 s) beats unit's measured 0.5 s.
        "tests/services/test_s.py::t1",
        "tests/unit/test_a.py::t1",
        "tests/unit/test_a.py::t2",
    ]
    costs = unit_costs(["tests/processes/x/test_new.py", "tests/services/test_s.py"], measured)
    assert costs == {"tests/processes/x/test_new.py": 100.0, "tests/services/test_s.py": 3.0}


def test_the_recorded_table_is_read_back_and_a_partial_run_keeps_the_rest(
    tmp_path: Path,
) -> None:
    table = tmp_path / "durations.json"
    assert read_durations(table) == {}  # missing: the kinds' guesses order the run
    first = Recorder(xdist_scope)
    first.add("tests/unit/test_a.py::t1", 0.25)
    first.add("tests/unit/test_a.py::t2", 0.5)
    first.add("tests/processes/chaos/test_chaos.py::t", 90.0)
    first.write(table)
    assert read_durations(table) == {"serial": 90.0, "tests/unit/test_a.py": 0.8}
    again = Recorder(xdist_scope)
    again.add("tests/unit/test_a.py::t1", 2.0)
    again.write(table)
    assert read_durations(table) == {"serial": 90.0, "tests/unit/test_a.py": 2.0}
    table.write_text("not json", encoding="utf-8")
    assert read_durations(table) == {}


def test_the_committed_table_names_units_of_the_suite() -> None:
    measured = read_durations()
    assert measured, "tests/support/durations.json is missing or empty: make test-durations"
    for scope in measured:
        path = scope.split("::", 1)[0]
        assert scope == "serial" or (TESTS.parent / path).is_file(), scope


PROC_STAT_BEFORE = """cpu  1000 0 500 8000 500 0 0 0 0 0
cpu0 500 0 250 4000 250 0 0 0 0 0
cpu1 500 0 250 4000 250 0 0 0 0 0
intr 1 2 3
"""
PROC_STAT_AFTER = """cpu  61000 0 20500 8000 10500 0 0 0 0 0
cpu0 30500 0 10250 4000 5250 0 0 0 0 0
cpu1 30500 0 10250 4000 5250 0 0 0 0 0
"""


def test_the_summary_says_how_busy_the_cores_were_and_the_least_wall_time() -> None:
    before = parse_proc_stat(PROC_STAT_BEFORE, 100.0)
    after = parse_proc_stat(PROC_STAT_AFTER, 100.0)
    assert (before.busy, before.total, before.cores) == (15.0, 100.0, 2)
    # 800 s busy of 900 s: iowait counts as idle; 800 s on 2 cores is at least 400 s.
    assert after.since(before) == (
        "machine CPU over the run: 800 s busy of 900 s on 2 cores (89%); that much work "
        "needs at least 400 s of wall time on these cores"
    )


def test_the_summary_says_how_fast_the_cores_were_at_the_start_and_the_end() -> None:
    start = Machine(wall=0.2, cpu=RUNS * REFERENCE_CPU / 2)  # twice the reference's speed
    end = Machine(wall=0.9, cpu=RUNS * REFERENCE_CPU * 1.5)
    assert speed_line(start, end) == (
        "machine speed: the known workload took 0.045 s of CPU at the start and 0.135 s at "
        "the end (0.09 s on the reference machine: 0.50x and 1.50x its time)"
    )


def test_a_file_that_is_not_proc_stat_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="not /proc/stat"):
        parse_proc_stat("intr 1 2 3\n", 100.0)
