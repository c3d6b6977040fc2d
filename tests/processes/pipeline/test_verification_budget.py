"""Verification outlasts a short outage of the lookup with the default budget: a write
that happened is found once the lookup is back, never escalated as a false failure."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest

from tests.support.pipeline.harness import Cluster, cluster_for, new_ref
from toolsafe.recovery.states import StepState
from toolsafe.settings import PolicySettings

pytestmark = [pytest.mark.postgres, pytest.mark.redis]

S = StepState
INVOICE = {"customer_id": "cus_b", "amount_cents": 4300, "currency": "EUR"}


@pytest.fixture(scope="module")
def cluster(pg_url: str, redis_url: str, pipeline_dir: Path) -> Iterator[Cluster]:
    # The default verification budget (minutes), not the harness's short one.
    env = {"TOOLSAFE_VERIFY_BUDGET": str(PolicySettings().verify_budget)}
    with cluster_for(pg_url, redis_url, pipeline_dir, suffix="budget", env=env) as running:
        running.start_worker("budget", concurrency=2)
        yield running


def test_verification_outlasts_a_short_lookup_outage(cluster: Cluster) -> None:
    """The write happened (502 after storing), and the lookup answers 503 with a
    Retry-After for a few seconds: more unavailable lookups than the old limit, each
    after the wait the downstream asked for, then found: succeeded, not escalated."""
    ref = new_ref("run_5/outage")
    cluster.fault(fault="error_after_store", operation_ref=ref, status=502)
    state = cluster.downstream.state
    outage = state.add_fault(
        {"fault": "lookup_down", "operation_ref": ref, "times": None, "retry_after": 1}
    )
    cluster.client.submit("create_invoice", INVOICE, operation_ref=ref)
    store = cluster.client.runtime.store

    def unavailable_lookups() -> list[datetime]:
        return [
            e.at
            for e in store.events(ref)
            if e.kind == "looked_up" and e.detail.get("lookup", {}).get("unavailable")
        ]

    limit = int(cluster.env["TOOLSAFE_MAX_LOOKUPS_UNAVAILABLE"])
    cluster.wait_for(
        lambda: len(unavailable_lookups()) > limit, timeout=30, what="lookups during the outage"
    )
    assert store.get(ref).state is S.VERIFYING, cluster.logs()
    with state.lock:
        state.faults.remove(outage)  # the lookup is back
    view = cluster.client.wait(ref, timeout=30)
    assert view.state is S.SUCCEEDED, cluster.logs()
    assert cluster.effects(ref) == 1
    seen = unavailable_lookups()
    gaps = [(later - earlier).total_seconds() for earlier, later in itertools.pairwise(seen)]
    assert gaps and min(gaps) >= 0.9, gaps  # Retry-After: 1 honoured between lookups
    details = [e.detail["lookup"] for e in store.events(ref) if e.kind == "looked_up"]
    assert any(d.get("retry_after_seconds") == 1.0 for d in details)
