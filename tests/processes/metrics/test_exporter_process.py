"""toolsafe metrics as a real process: it serves until SIGTERM."""

from __future__ import annotations

from pathlib import Path

import httpx

from tests.services.metrics.test_exporter import TOOL, store  # noqa: F401
from toolsafe.recovery.store.sql import StepStore


def test_toolsafe_metrics_serves_until_sigterm(store: StepStore, tmp_path: Path) -> None:  # noqa: F811
    import os
    import signal
    import subprocess
    import sys

    url = store.engine.url.render_as_string(hide_password=False)
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("TOOLSAFE_")},
        "TOOLSAFE_DATABASE_URL": url,
        "TOOLSAFE_BROKER_URL": f"filesystem://{tmp_path / 'broker'}",
        "TOOLSAFE_METRICS_POLL_INTERVAL": "0.05",
    }
    command = [sys.executable, "-m", "toolsafe", "metrics", "--port", "0"]
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        first = process.stdout.readline()
        assert first.startswith("metrics on http://127.0.0.1:"), first
        address = first.split()[-1]
        shown = ""
        with httpx.Client(timeout=5) as http:  # one TLS context, not one per poll
            for _ in range(200):
                shown = http.get(address).text
                if "toolsafe_counts_up 1.0" in shown:
                    break
        assert f'toolsafe_steps{{state="succeeded",tool="{TOOL}"}} 2.0' in shown
        assert 'toolsafe_queue_messages{queue="toolsafe.execute"} 0.0' in shown
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=15) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        if process.stdout is not None:
            process.stdout.close()
