"""The example downstream's command line prints its URL and stops on SIGTERM."""

from __future__ import annotations

import os
from pathlib import Path

import httpx
import pytest

from toolsafe.harness import DownstreamProcess


@pytest.mark.parametrize("naive", [False, True])
def test_command_line_prints_its_url_and_stops_on_sigterm(naive: bool, tmp_path: Path) -> None:
    service = DownstreamProcess(tmp_path, {**os.environ, "PYTHONUNBUFFERED": "1"}, naive=naive)
    try:
        url = service.url
        assert url.startswith("http://127.0.0.1:")
        health = httpx.get(f"{url}/_control/health", timeout=5).json()
        assert health == {"ok": True, "naive": naive}
        assert service.stop(grace=5) == 0  # SIGTERM
    finally:
        service.process.kill()
