"""The exporter's figures beside the same figures from the store itself (its steps and
the whole-table counts of docs/counts.md), for tests that compare the two."""

from __future__ import annotations

from collections import Counter
from typing import Any

from toolsafe.metrics.exporter import Exporter, read_counts
from toolsafe.metrics.tally import Tally
from toolsafe.recovery.store.sql import StepStore
from toolsafe.recovery.store.sql.tally import SqlTally


def tally_figures(tally: Tally) -> dict[str, Any]:
    resolved: Counter[str] = Counter()
    for (_, resolution), n in tally.unknown_resolved.items():
        resolved[resolution] += n
    return {
        "steps": {key: n for key, n in tally.steps.items() if n},
        "submitted": sum(tally.submitted.values()),
        "executions": sum(tally.executions.values()),
        "resolved": +resolved,
        "refused": {
            r: n for (kind, r), n in tally.prevented.items() if kind == "execution_refused"
        },
        "idle": {r: n for (kind, r), n in tally.prevented.items() if kind == "idle_redelivery"},
        "found_committed": tally.prevented.get(("found_committed", "verification"), 0),
    }


def store_figures(store: StepStore) -> dict[str, Any]:
    steps = store.list_steps(None, 1_000_000)
    counts = read_counts(store)
    v = counts.verification
    resolved = Counter(
        committed=v.committed, absent=v.absent, escalated=v.escalated, cancelled=v.cancelled
    )
    return {
        "steps": dict(Counter((step.tool, step.state.value) for step in steps)),
        "submitted": len(steps),
        "executions": counts.attempts_total,
        "resolved": +resolved,
        "refused": dict(counts.prevented.refused),
        "idle": dict(counts.prevented.idle_redeliveries),
        "found_committed": counts.prevented.found_committed,
    }


def both(store: StepStore, exporter: Exporter | None = None) -> tuple[dict[str, Any], ...]:
    """(exporter's, store's) after one poll (of ``exporter``, or of a new one)."""
    exporter = exporter if exporter is not None else Exporter(SqlTally(store))
    exporter.poll()
    with exporter.follower.lock:
        mine = tally_figures(exporter.follower.tally)
    return mine, store_figures(store)
