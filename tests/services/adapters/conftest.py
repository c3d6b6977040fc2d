"""Fixtures of the adapter tests: the example downstream service, in-process."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from toolsafe.adapters.examples.downstream import DownstreamService


@pytest.fixture
def downstream() -> Iterator[DownstreamService]:
    with DownstreamService() as service:
        yield service


@pytest.fixture
def naive_downstream() -> Iterator[DownstreamService]:
    with DownstreamService(naive=True) as service:
        yield service
