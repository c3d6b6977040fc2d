"""The command line prints the committed envelope schema (a toolsafe subprocess)."""

from __future__ import annotations

import json
import subprocess
import sys

from toolsafe.adapters.envelope import json_schema


def test_cli_prints_the_schema() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "toolsafe", "schema"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert json.loads(done.stdout) == json_schema()
