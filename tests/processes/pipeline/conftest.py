"""Fixtures of the pipeline tests (the harness itself is in ``harness.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def pipeline_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("pipeline")
