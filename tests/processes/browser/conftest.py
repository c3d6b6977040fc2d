"""The status page in a real browser: Playwright driving the system's Chromium (Debian's
``chromium`` package, which ``.ci/run`` installs). No browser is ever downloaded."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import pytest

os.environ.setdefault("PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD", "1")

from playwright.sync_api import Browser, Playwright, sync_playwright

from tests.conftest import missing

ROOT: Final = Path(__file__).resolve().parents[3]
CHROMIUM: Final = Path("/usr/bin/chromium")
ARGS: Final = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)
OUTPUT: Final = ROOT / "test-output" / "browser"
"""Screenshots of each run (git-ignored)."""


# Module scope, not session: while Playwright's sync API runs, its event loop counts as
# running on the main thread, and any later test that calls asyncio.run() would fail.
@pytest.fixture(scope="module")
def playwright() -> Iterator[Playwright]:
    with sync_playwright() as running:
        yield running


@pytest.fixture(scope="module")
def browser(playwright: Playwright) -> Iterator[Browser]:
    if not CHROMIUM.exists():
        # The one rule for every browser test (tests/conftest.py): fail in CI, else skip.
        missing("Chromium", f"{CHROMIUM} is missing (apt-get install chromium)")
    launched = playwright.chromium.launch(
        executable_path=str(CHROMIUM), args=list(ARGS), headless=True
    )
    yield launched
    launched.close()


@pytest.fixture(scope="session")
def screenshots() -> Path:
    OUTPUT.mkdir(parents=True, exist_ok=True)
    return OUTPUT
