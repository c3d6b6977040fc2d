"""The documented command prints the envelope reference page."""

from __future__ import annotations

import subprocess
import sys

from tests.unit.test_envelope_reference import DOC, ROOT


def test_the_documented_command_prints_the_page() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "toolsafe.reference"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert done.stdout == DOC.read_text(encoding="utf-8")
