"""One ``toolsafe chaos`` run inside a test: its exit code, what it printed and its JSON
report (the run's work dir and report in the test's own folder)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from toolsafe.cli.main import main


class ChaosRun(NamedTuple):
    code: int
    printed: str
    report: dict[str, Any]


def run_chaos(
    options: Sequence[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> ChaosRun:
    """``toolsafe chaos`` with ``options``, its work dir and report under ``tmp_path``."""
    report_path = tmp_path / "report.json"
    code = main(
        ["chaos", *options, "--workdir", str(tmp_path / "run"), "--report", str(report_path)]
    )
    printed = capsys.readouterr().out
    report: dict[str, Any] = json.loads(report_path.read_text("utf-8"))
    return ChaosRun(code, printed, report)
