"""How `make test` splits the suite between xdist workers (tests/conftest.py): a file is
one work unit, so a module's cluster starts once; the tests of ``SERIAL`` share one unit;
and the machine factor that bounds the timings which are a feature."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import SERIAL, xdist_scope
from tests.support.machine import MAX_FACTOR, REFERENCE_CPU, RUNS, Machine

TESTS = Path(__file__).resolve().parents[1]


def test_a_file_is_one_work_unit_and_the_serial_files_share_one() -> None:
    unit = "tests/unit/test_layout.py::test_x"
    assert xdist_scope(unit) == "tests/unit/test_layout.py"
    cluster = "tests/processes/pipeline/test_leases.py::test_a[prefork]"
    assert xdist_scope(cluster) == "tests/processes/pipeline/test_leases.py"
    assert {xdist_scope(f"tests/{path}::test_y") for path in SERIAL} == {"serial"}


def test_every_serial_entry_is_a_test_file_and_says_why() -> None:
    for path, reason in SERIAL.items():
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
