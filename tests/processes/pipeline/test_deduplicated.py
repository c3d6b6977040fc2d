"""A downstream that deduplicates by key, declared by the adapters
(``deduplicates_by_key``), through real workers: a killed call is retried one consistency
window after its send instead of after the longest call, and the retry that meets the
killed request still in flight at the downstream makes no second effect and no false
failure."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.support.machine import session_machine
from tests.support.pipeline.harness import FAST_SETTINGS, Cluster, cluster_for, new_ref
from toolsafe.chaos.recovery_time import recovered_after
from toolsafe.recovery.states import StepState
from toolsafe.tasks.faults import fired, write_plan

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.slow]

S = StepState
INVOICE = {"customer_id": "cus_dedup", "amount_cents": 4200, "currency": "EUR"}
WINDOW = 1.0  # the adapters' consistency window here
# What recovery after a kill right after the claim costs besides the window: the last
# lookup's delay, the retry's delay, the call itself and a hint through the broker.
OVERHEAD = (
    float(FAST_SETTINGS["TOOLSAFE_VERIFY_MAX_DELAY"])
    + float(FAST_SETTINGS["TOOLSAFE_RETRY_MAX_DELAY"])
    + float(FAST_SETTINGS["TOOLSAFE_EXAMPLE_TIMEOUT"])
    + 1.0
)


def settle_bound() -> float:
    """Kill → settled, from the settings and the machine: the window, not the call."""
    return session_machine().seconds(WINDOW + OVERHEAD)


def longest_call() -> float:
    """The task time limit (``longest_call``): far beyond the bound, so that a step that
    waited it out would fail the bound, whatever the machine."""
    return min(120.0, max(30.0, 3 * settle_bound()))


@pytest.fixture(scope="module")
def dedup_cluster(pg_url: str, redis_url: str, pipeline_dir: Path) -> Iterator[Cluster]:
    limit = longest_call()
    env = {
        "TOOLSAFE_EXAMPLE_DEDUPLICATES_BY_KEY": "true",
        "TOOLSAFE_EXAMPLE_CONSISTENCY_WINDOW": str(WINDOW),
        "TOOLSAFE_TASK_TIME_LIMIT": f"{limit:.1f}",
        "TOOLSAFE_TASK_SOFT_TIME_LIMIT": f"{limit - 1:.1f}",
    }
    with cluster_for(
        pg_url, redis_url, pipeline_dir, suffix="dedup", env=env, naive=False
    ) as running:
        yield running


@pytest.fixture
def cluster(dedup_cluster: Cluster) -> Iterator[Cluster]:
    yield dedup_cluster
    dedup_cluster.stop_workers()


def killed_at(cluster: Cluster, ref: str, point: str) -> datetime:
    plan = Path(cluster.env["TOOLSAFE_FAULT_PLAN"])
    [kill] = [f for f in fired(f"{plan}.fired") if f["entry"] == ref and f["point"] == point]
    return datetime.fromtimestamp(float(kill["at"]), UTC)


def test_a_kill_right_after_the_claim_settles_within_the_window(cluster: Cluster) -> None:
    traits = cluster.client.runtime.traits_for("create_invoice")
    assert traits.deduplicates_by_key
    assert abs(traits.longest_call.total_seconds() - longest_call()) < 0.1
    ref = new_ref("dedup/claim")
    write_plan(Path(cluster.env["TOOLSAFE_FAULT_PLAN"]), {ref: {"after_claim": "kill"}})
    cluster.start_worker("claimer", concurrency=1, beat=True)
    cluster.client.submit("create_invoice", INVOICE, operation_ref=ref)
    view = cluster.client.wait(ref, timeout=longest_call() + 30)
    assert view.state is S.SUCCEEDED, cluster.logs()
    # Verified first, found absent, executed again under the same operation_ref: one
    # invoice, and the envelope the model sees is the success with its evidence.
    assert cluster.went_through(
        ref, S.IN_FLIGHT, S.VERIFYING, S.WAITING_RETRY, S.IN_FLIGHT, S.SUCCEEDED
    )
    assert view.attempts >= 2 and cluster.effects(ref) == 1
    assert cluster.violations([ref]) == []
    stored = cluster.client.runtime.store.get(ref)
    assert stored.last_envelope is not None and stored.last_envelope["ok"] is True
    # Settled a consistency window after the kill, not a longest call.
    events = cluster.client.runtime.store.events(ref)
    waited = recovered_after(killed_at(cluster, ref, "after_claim"), events)
    assert waited is not None
    assert waited <= settle_bound(), session_machine().explain(WINDOW + OVERHEAD)


def test_a_retry_meeting_the_killed_request_in_flight_makes_no_second_effect(
    cluster: Cluster,
) -> None:
    ref = new_ref("dedup/in-flight")
    write_plan(
        Path(cluster.env["TOOLSAFE_FAULT_PLAN"]),
        {ref: {"during_call": {"action": "kill", "delay": 0.3}}},
    )
    # The downstream holds the key in flight (nothing stored yet) well past the window:
    # the lookup says "not found", the step is retried, and the retry meets the killed
    # request at the downstream ("key in flight", or the stored record once it is in).
    stall = WINDOW + session_machine().seconds(3.0)
    cluster.fault(fault="stall_before_store", operation_ref=ref, seconds=stall)
    cluster.start_worker("stalled", concurrency=1, beat=True)
    cluster.client.submit("create_invoice", INVOICE, operation_ref=ref)
    view = cluster.client.wait(ref, timeout=longest_call() + stall + 30)
    assert view.state is S.SUCCEEDED, cluster.logs()
    assert cluster.effects(ref) == 1
    # The retry was sent before the longest call was over, and the key deduplicated it.
    assert view.attempts >= 2
    assert cluster.downstream.deduplicated().get(ref, 0) >= 1
    assert cluster.violations([ref]) == []
