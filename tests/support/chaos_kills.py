"""What a chaos run with partitions may say of its planned kills."""

from __future__ import annotations

from typing import Any


def assert_planned_kills_fired(report: dict[str, Any], printed: str, concurrency: int) -> None:
    """Every kill that fired was planned at that point, and every planned kill fired but
    those a partition turned away: a partition that catches a worker holding leases
    sends those steps (at most ``concurrency`` of them) to another worker's
    verification, whose path may never reach the point a kill waited at (a verification
    that finds the write committed publishes nothing, so an ``after_publish`` kill
    planned on that step never comes)."""
    planned: dict[str, int] = report["kills_planned"]
    fired: dict[str, int] = report["kills_fired"]
    assert all(fired[point] <= planned.get(point, 0) for point in fired), printed
    held = report["faults"].get("worker partition with a lease held", 0)
    missing = sum(planned.values()) - sum(fired.values())
    assert missing <= concurrency * held, printed
