"""Once corrected, the same values are fine: the CLI runs against its SQLite database."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.test_fail_fast import clean_env  # noqa: F401
from toolsafe.cli.main import main


def test_the_same_values_are_fine_once_corrected(
    clean_env: Path,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["migrate"]) == 0
    assert clean_env.exists()
