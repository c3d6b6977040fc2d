"""Crashes and broker loss: SIGKILLed workers and a flushed Redis never cost a duplicate
invoice or a lost step; the sweeper and verification pick up the pieces (R4, R7)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.support.pipeline.harness import Cluster, cluster_for, new_ref
from tests.support.recovery.store_support import create_step
from toolsafe.harness import flush_broker, kill_db_connections
from toolsafe.recovery.states import StepState
from toolsafe.recovery.store.sql import StepStore
from toolsafe.tasks.faults import fired, write_plan
from toolsafe.tasks.runtime import utcnow

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.slow]

S = StepState
INVOICE = {"customer_id": "cus_9", "amount_cents": 990, "currency": "EUR"}


@pytest.fixture(scope="module")
def crash_cluster(pg_url: str, redis_url: str, pipeline_dir: Path) -> Iterator[Cluster]:
    # A short consistency window: "not found" soon proves the write absent.
    # A longer adapter timeout (still under the 2 s soft limit) leaves time to kill a
    # worker while the downstream holds the stored write.
    env = {"TOOLSAFE_EXAMPLE_CONSISTENCY_WINDOW": "0.5", "TOOLSAFE_EXAMPLE_TIMEOUT": "1.8"}
    with cluster_for(pg_url, redis_url, pipeline_dir, suffix="crashes", env=env) as running:
        yield running


@pytest.fixture
def cluster(crash_cluster: Cluster) -> Iterator[Cluster]:
    yield crash_cluster
    crash_cluster.stop_workers()


def test_dead_database_connections_are_replaced_on_first_use(cluster: Cluster) -> None:
    # Pool processes do not ping a pooled connection before each transaction: one that
    # died (a database restart, a killed backend) fails its first statement, and the
    # store's infrastructure retry runs the transaction again on a fresh connection.
    cluster.start_worker("pingless", concurrency=1, beat=False)
    warm = new_ref("crash/warm")
    cluster.client.submit("create_invoice", INVOICE, operation_ref=warm)
    assert cluster.client.wait(warm, timeout=20).state is S.SUCCEEDED
    assert kill_db_connections(cluster.settings.store.url) >= 1
    ref = new_ref("crash/dead-connection")
    cluster.client.submit("create_invoice", INVOICE, operation_ref=ref)
    view = cluster.client.wait(ref, timeout=20)
    assert view.state is S.SUCCEEDED, cluster.logs()
    assert cluster.effects(ref) == 1
    # The worker met the dead connection itself (no ping replaced it first).
    assert "database connection lost; retrying" in cluster.workers[-1].text()


def test_sigkill_while_the_downstream_holds_a_stored_write(cluster: Cluster) -> None:
    victim = cluster.start_worker("victim", concurrency=1, beat=False)
    ref = new_ref("crash/stall")
    cluster.fault(fault="stall_after_store", operation_ref=ref, seconds=5)
    cluster.client.submit("create_invoice", INVOICE, operation_ref=ref)
    # The invoice is stored and the downstream holds the answer back: kill now.
    cluster.wait_for(lambda: cluster.effects(ref) == 1, timeout=15, what="the stored write")
    victim.kill()
    assert cluster.client.view(ref).state is S.IN_FLIGHT
    cluster.start_worker("rescuer", concurrency=1, beat=True)
    view = cluster.client.wait(ref, timeout=30)
    assert view.state is S.SUCCEEDED, cluster.logs()
    # Verified first, never executed again: the downstream is naive, so an execution
    # after the stored write would be a second effect.
    assert cluster.went_through(ref, S.IN_FLIGHT, S.VERIFYING, S.SUCCEEDED)
    assert cluster.violations([ref]) == []
    assert cluster.effects(ref) == 1


def test_sigkill_after_claim_verifies_then_executes_once(cluster: Cluster) -> None:
    ref = new_ref("crash/claim")
    plan = Path(cluster.env["TOOLSAFE_FAULT_PLAN"])
    write_plan(plan, {ref: {"after_claim": "kill"}})
    cluster.start_worker("claimer", concurrency=1, beat=True)
    cluster.client.submit("create_invoice", INVOICE, operation_ref=ref)
    view = cluster.client.wait(ref, timeout=40)
    assert view.state is S.SUCCEEDED, cluster.logs()
    assert [(f["entry"], f["point"]) for f in fired(f"{plan}.fired") if f["entry"] == ref] == [
        (ref, "after_claim")
    ]
    # The lease expired, the lookup found nothing after the window, the write ran once:
    # the killed claim counted as an attempt.
    assert cluster.went_through(
        ref, S.IN_FLIGHT, S.VERIFYING, S.WAITING_RETRY, S.IN_FLIGHT, S.SUCCEEDED
    )
    assert view.attempts >= 2 and cluster.violations([ref]) == []
    assert cluster.effects(ref) == 1
    # The task that proved the write absent ran the retry itself, without a hint.
    assert f"retry_here {ref}" in cluster.workers[-1].text(), cluster.logs()


def test_every_fault_point_ends_in_one_effect(cluster: Cluster) -> None:
    """Kill or raise at each named point; the step still ends succeeded with one invoice."""
    refs = {point: new_ref(f"points/{point}") for point in (
        "after_call", "during_call", "after_record", "before_publish", "after_publish"
    )}  # fmt: skip
    write_plan(
        Path(cluster.env["TOOLSAFE_FAULT_PLAN"]),
        {
            refs["after_call"]: {"after_call": "kill"},
            refs["during_call"]: {"during_call": {"action": "kill", "delay": 0.3}},
            refs["after_record"]: {"after_record": "kill"},
            refs["before_publish"]: {"before_publish": "raise"},
            refs["after_publish"]: {"after_publish": "kill"},
        },
    )
    # The call is in progress (and the invoice stored) when the timer fires.
    cluster.fault(fault="stall_after_store", operation_ref=refs["during_call"], seconds=0.8)
    # A follow-up to publish: a rate limit sends the step to waiting_retry first.
    for point in ("before_publish", "after_publish"):
        cluster.fault(fault="rate_limit", operation_ref=refs[point], retry_after=1)
    cluster.start_worker("points", concurrency=2, beat=True)
    for ref in refs.values():
        cluster.client.submit("create_invoice", INVOICE, operation_ref=ref)
    for point, ref in refs.items():
        view = cluster.client.wait(ref, timeout=40)
        assert view.state is S.SUCCEEDED, (point, view.state, cluster.logs())
        assert cluster.effects(ref) == 1, point
    records = fired(f"{cluster.env['TOOLSAFE_FAULT_PLAN']}.fired")
    assert set(refs) <= {record["point"] for record in records}
    assert cluster.violations(refs.values()) == []
    killed_at = {
        record["operation_ref"]: datetime.fromtimestamp(float(record["at"]), UTC)
        for record in records
        if record["action"] == "kill"
    }

    def executions_after_the_kill(ref: str) -> int:
        # (An attempt before the kill may have failed on its own on a loaded machine —
        # a timeout verified absent, then a second attempt: the kill struck that one.)
        return sum(
            1
            for event in cluster.client.runtime.store.events(ref)
            if event.kind == "claimed"
            and event.detail.get("claim") == "execute"
            and event.at > killed_at[ref]
        )

    # A write whose answer was lost is verified, never executed again.
    after_call = refs["after_call"]
    assert cluster.went_through(after_call, S.IN_FLIGHT, S.VERIFYING, S.SUCCEEDED)
    assert executions_after_the_kill(after_call) == 0, cluster.states(after_call)
    # Killed mid-call: verified first; found if the request had reached the downstream,
    # else proven absent after the window and executed once more.
    assert cluster.went_through(refs["during_call"], S.IN_FLIGHT, S.VERIFYING, S.SUCCEEDED)
    # Killed after recording: the redelivered message found the step done.
    after_record = refs["after_record"]
    assert executions_after_the_kill(after_record) == 0, cluster.states(after_record)


def test_a_parked_retry_whose_pool_process_died_runs_at_its_not_before(
    cluster: Cluster,
) -> None:
    """A pool process killed after recording a rate-limited step's retry and before
    publishing anything: the retry (parked: its delay is longer than ``max_eta``) still
    runs at its ``not_before``, not after the sweeper's ``republish_after``."""
    republish_after = 120.0
    ref = new_ref("crash/parked")
    write_plan(Path(cluster.env["TOOLSAFE_FAULT_PLAN"]), {ref: {"before_publish": "kill"}})
    cluster.fault(fault="rate_limit", operation_ref=ref, retry_after=1)
    settings = {"TOOLSAFE_REPUBLISH_AFTER": f"{republish_after:g}", "TOOLSAFE_MAX_ETA": "0.5"}
    cluster.start_worker("parked", concurrency=1, extra_env=settings)
    cluster.client.submit("create_invoice", INVOICE, operation_ref=ref)
    # Half the republish delay: only the release of the parked retry runs it this soon.
    view = cluster.client.wait(ref, timeout=republish_after / 2)
    assert view.state is S.SUCCEEDED, (view.state, cluster.logs())
    assert cluster.effects(ref) == 1
    records = fired(f"{cluster.env['TOOLSAFE_FAULT_PLAN']}.fired")
    assert [(r["point"], r["action"]) for r in records if r["entry"] == ref] == [
        ("before_publish", "kill")
    ]
    assert cluster.went_through(ref, S.IN_FLIGHT, S.WAITING_RETRY, S.IN_FLIGHT, S.SUCCEEDED)
    assert cluster.violations([ref]) == []


def test_broker_loss_is_repaired_by_the_sweeper(cluster: Cluster, redis_url: str) -> None:
    waiting = [new_ref("loss/retry") for _ in range(3)]
    verifying = [new_ref("loss/verify") for _ in range(3)]
    unpublished = [new_ref("loss/unpublished") for _ in range(2)]
    for ref in waiting:
        cluster.fault(fault="rate_limit", operation_ref=ref, retry_after=5)
    for ref in verifying:
        cluster.fault(fault="error_after_store", operation_ref=ref, status=502)
        cluster.fault(fault="lookup_down", operation_ref=ref, times=2)
    first = cluster.start_worker("before-loss", concurrency=2, beat=False)
    for ref in waiting + verifying:
        cluster.client.submit("create_invoice", INVOICE, operation_ref=ref)
    store = cluster.client.runtime.store
    assert isinstance(store, StepStore)
    # Every step past its first attempt and some still waiting when the broker goes: on
    # a starved machine a first attempt can time out and take another path (an unknown
    # outcome verified absent, a retry), and a step may even finish first; the promise
    # below (one effect each, all succeeded) holds whichever path it took.
    held = (S.WAITING_RETRY, S.VERIFYING)
    cluster.wait_for(
        lambda: (
            all(store.get(ref).state in (*held, S.SUCCEEDED) for ref in waiting + verifying)
            and any(store.get(ref).state in held for ref in waiting + verifying)
        ),
        what="steps waiting to retry and to verify",
    )
    # Committed but never published (the submitter died between the two, R2/R7).
    for ref in unpublished:
        create_step(
            store,
            "create_invoice",
            INVOICE,
            operation_ref=ref,
            policy=cluster.settings.policies.for_tool("create_invoice"),
            now=utcnow(),
        )
    first.kill()
    flush_broker(redis_url)
    cluster.start_worker("after-loss", concurrency=2, beat=True)
    for ref in waiting + verifying + unpublished:
        view = cluster.client.wait(ref, timeout=40)
        assert view.state is S.SUCCEEDED, (ref, view.state, cluster.logs())
        assert cluster.effects(ref) == 1, ref
    # The unpublished steps succeeding with one effect each is the sweeper's republish at
    # work (nothing else knew of them); no count of claim events: a lease lost on a
    # starved machine adds a claim, and that is recovery, not a duplicate.
    assert cluster.violations(waiting + verifying + unpublished) == []
