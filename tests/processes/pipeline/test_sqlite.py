"""The embedded default: worker processes sharing one SQLite file run the article's
timeout-after-store case to one verified invoice, as on PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.metrics.truth import both
from tests.support.pipeline.harness import Cluster, cluster_for, new_ref
from toolsafe.harness import free_port
from toolsafe.recovery.states import StepState
from toolsafe.recovery.store.sql import StepStore

pytestmark = [pytest.mark.redis, pytest.mark.slow]

S = StepState
INVOICE = {"customer_id": "cus_lite", "amount_cents": 1200, "currency": "EUR"}


@pytest.fixture(scope="module")
def cluster(redis_url: str, pipeline_dir: Path) -> Iterator[Cluster]:
    # A worker given the exporter's port must not serve store-wide figures on it.
    env = {"TOOLSAFE_METRICS_PORT": str(free_port())}
    with cluster_for("", redis_url, pipeline_dir, suffix="sqlite", sqlite=True, env=env) as running:
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
    assert cluster.went_through(stalled, S.IN_FLIGHT, S.VERIFYING, S.SUCCEEDED)
    assert cluster.violations([plain, stalled]) == []
    assert cluster.effects(plain) == 1 and cluster.effects(stalled) == 1


def test_the_exporter_figures_equal_the_sqlite_store_and_workers_serve_none(
    cluster: Cluster,
) -> None:
    import socket

    stalled = new_ref("lite/metrics")
    cluster.fault(fault="stall_after_store", operation_ref=stalled, seconds=1)
    cluster.client.submit("create_invoice", INVOICE, operation_ref=stalled)
    cluster.client.submit(
        "send_email",
        {"recipient_email": "x@example.com", "subject": "s", "body": "b"},
        operation_ref=new_ref("lite/mail"),
    )
    assert cluster.client.wait(stalled, timeout=20).state is S.SUCCEEDED, cluster.logs()
    store = cluster.client.runtime.store
    assert isinstance(store, StepStore)
    figures: list[tuple[dict[str, object], ...]] = []

    def agree() -> bool:
        figures[:] = [both(store)]
        return figures[0][0] == figures[0][1]

    cluster.wait_for(agree, timeout=20, interval=0.2, what="exporter == store")
    mine = figures[0][0]
    assert mine["resolved"].get("committed", 0) >= 1  # type: ignore[attr-defined]
    port = int(cluster.env["TOOLSAFE_METRICS_PORT"])
    with socket.socket() as probe:
        assert probe.connect_ex(("127.0.0.1", port)) != 0, "a worker serves /metrics"
    assert "workers serve no /metrics" in "".join(w.text() for w in cluster.workers)
