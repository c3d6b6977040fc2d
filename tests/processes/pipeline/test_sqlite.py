"""The embedded default: worker processes sharing one SQLite file run the article's
timeout-after-store case to one verified invoice, as on PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.pipeline.harness import Cluster, cluster_for, new_ref
from toolsafe.recovery.states import StepState

pytestmark = [pytest.mark.redis, pytest.mark.slow]

S = StepState
INVOICE = {"customer_id": "cus_lite", "amount_cents": 1200, "currency": "EUR"}


@pytest.fixture(scope="module")
def cluster(redis_url: str, pipeline_dir: Path) -> Iterator[Cluster]:
    with cluster_for("", redis_url, pipeline_dir, suffix="sqlite", sqlite=True) as running:
        running.start_worker("lite", concurrency=2, beat=True)
        yield running


def test_sqlite_store_runs_success_and_verification(cluster: Cluster) -> None:
    assert cluster.env["TOOLSAFE_DATABASE_URL"].startswith("sqlite:///")
    plain = new_ref("lite/plain")
    stalled = new_ref("lite/stall")
    cluster.fault(fault="stall_after_store", operation_ref=stalled, seconds=2)
    cluster.client.submit("create_invoice", INVOICE, operation_ref=plain)
    cluster.client.submit("create_invoice", INVOICE, operation_ref=stalled)
    assert cluster.client.wait(plain, timeout=20).state is S.SUCCEEDED, cluster.logs()
    assert cluster.client.wait(stalled, timeout=20).state is S.SUCCEEDED, cluster.logs()
    assert cluster.states(stalled) == [S.PENDING, S.IN_FLIGHT, S.VERIFYING, S.SUCCEEDED]
    assert cluster.effects(plain) == 1 and cluster.effects(stalled) == 1
