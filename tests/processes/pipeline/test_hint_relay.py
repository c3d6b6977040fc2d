"""The hint relay (``TOOLSAFE_SUBMIT_HINTS=relay``) in real workers: a submit is its
commit, the workers publish the hints, and every call ends in one effect — submitted
while no worker ran, in a batch, with the relay killed between its mark and its publish,
and on the embedded SQLite store."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.pipeline.harness import Cluster, cluster_for, new_ref
from toolsafe.recovery.states import StepState
from toolsafe.tasks.faults import fired, write_plan

pytestmark = [pytest.mark.redis, pytest.mark.slow]

S = StepState
INVOICE = {"customer_id": "cus_relay", "amount_cents": 700, "currency": "EUR"}
RELAY = {"TOOLSAFE_SUBMIT_HINTS": "relay"}


@pytest.fixture(scope="module")
def relay_cluster(pg_url: str, redis_url: str, pipeline_dir: Path) -> Iterator[Cluster]:
    with cluster_for(pg_url, redis_url, pipeline_dir, suffix="relay", env=RELAY) as running:
        yield running


@pytest.fixture
def cluster(relay_cluster: Cluster) -> Iterator[Cluster]:
    yield relay_cluster
    relay_cluster.stop_workers()


@pytest.mark.postgres
def test_a_step_submitted_while_no_worker_ran_is_published_by_the_first_relay(
    cluster: Cluster,
) -> None:
    ref = new_ref("relay/early")
    view = cluster.client.submit("create_invoice", INVOICE, operation_ref=ref)
    store = cluster.client.runtime.store
    assert view.state is S.PENDING and store.get(ref).published_at is None  # stored unsent
    # No beat: the sweeper cannot be what sends it.
    cluster.start_worker("first", concurrency=1, beat=False)
    assert cluster.client.wait(ref, timeout=30).state is S.SUCCEEDED, cluster.logs()
    assert store.get(ref).published_at is not None
    assert cluster.effects(ref) == 1 and cluster.violations([ref]) == []


@pytest.mark.postgres
def test_every_call_of_a_batch_and_of_two_workers_runs_once(cluster: Cluster) -> None:
    cluster.start_worker("one", concurrency=2, beat=False)
    cluster.start_worker("two", concurrency=2, beat=False)
    refs = [new_ref(f"relay/batch_{n}") for n in range(30)]
    cluster.client.submit_many([("create_invoice", INVOICE, ref) for ref in refs[:20]])
    for ref in refs[20:]:
        cluster.client.submit("create_invoice", INVOICE, operation_ref=ref)
    for ref in refs:
        assert cluster.client.wait(ref, timeout=60).state is S.SUCCEEDED, cluster.logs()
    assert [cluster.effects(ref) for ref in refs] == [1] * len(refs)
    assert cluster.violations(refs) == []


@pytest.mark.postgres
def test_a_relay_killed_between_its_mark_and_its_publish_loses_no_call(
    cluster: Cluster,
) -> None:
    ref = new_ref("relay/killed")
    plan = Path(cluster.env["TOOLSAFE_FAULT_PLAN"])
    write_plan(plan, {ref: {"after_relay_take": "kill"}})
    victim = cluster.start_worker("victim", concurrency=1, beat=False)
    cluster.client.submit("create_invoice", INVOICE, operation_ref=ref)
    cluster.wait_for(lambda: not victim.alive(), timeout=30, what="the relay's process to die")
    assert [f["point"] for f in fired(f"{plan}.fired") if f["entry"] == ref] == ["after_relay_take"]
    store = cluster.client.runtime.store
    stuck = store.get(ref)
    # Marked published, its hint never out: the sweeper's rule re-sends it (R7).
    assert stuck.state is S.PENDING and stuck.published_at is not None
    cluster.start_worker("rescuer", concurrency=1, beat=True)
    assert cluster.client.wait(ref, timeout=40).state is S.SUCCEEDED, cluster.logs()
    assert cluster.effects(ref) == 1 and cluster.violations([ref]) == []


@pytest.fixture(scope="module")
def sqlite_cluster(redis_url: str, pipeline_dir: Path) -> Iterator[Cluster]:
    with cluster_for(
        "", redis_url, pipeline_dir, suffix="relay-lite", sqlite=True, env=RELAY
    ) as running:
        running.start_worker("lite", concurrency=2, beat=False)
        yield running


def test_the_relay_on_the_embedded_sqlite_store(sqlite_cluster: Cluster) -> None:
    refs = [new_ref(f"relay/lite_{n}") for n in range(5)]
    for ref in refs:
        sqlite_cluster.client.submit("create_invoice", INVOICE, operation_ref=ref)
    for ref in refs:
        view = sqlite_cluster.client.wait(ref, timeout=30)
        assert view.state is S.SUCCEEDED, sqlite_cluster.logs()
    assert [sqlite_cluster.effects(ref) for ref in refs] == [1] * len(refs)
    assert sqlite_cluster.violations(refs) == []
