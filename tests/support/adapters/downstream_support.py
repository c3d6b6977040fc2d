"""Conditions on the example downstream's state, for tests that would otherwise sleep:
a request held in flight, a stored write, and eventual consistency ended on demand."""

from __future__ import annotations

import time
from datetime import UTC, datetime

from toolsafe.adapters.examples.downstream import DownstreamService


def wait_in_flight(
    service: DownstreamService, resource: str, ref: str, timeout: float = 10
) -> None:
    """Until the service holds ``ref``'s write in flight (a stall before the store)."""
    state = service.state
    deadline = time.monotonic() + timeout
    while True:
        with state.lock:
            if (resource, ref) in state.in_flight:
                return
        assert time.monotonic() < deadline, f"{ref} never went in flight"
        time.sleep(0.005)


def wait_stored(service: DownstreamService, ref: str, timeout: float = 10) -> None:
    """Until the service has stored a write under ``ref``."""
    deadline = time.monotonic() + timeout
    while service.effects().get(ref, 0) < 1:
        assert time.monotonic() < deadline, f"{ref} was never stored"
        time.sleep(0.005)


def make_visible(service: DownstreamService, ref: str) -> None:
    """End the eventual consistency of ``ref``'s records now: lookups see them."""
    state = service.state
    now = datetime.now(UTC)
    with state.lock:
        found = [r for records in state.records.values() for r in records if r.operation_ref == ref]
        assert found, f"no record under {ref}"
        for record in found:
            record.visible_at = min(record.visible_at, now)
