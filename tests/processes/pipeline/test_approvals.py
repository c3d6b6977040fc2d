"""Approvals bind to the approved input, end to end: real workers, Redis, PostgreSQL and
an example downstream that refuses every write of the step that carries no approval
reference (``require_approval`` until cleared), so success proves what was sent."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import update

from tests.support.pipeline.harness import Cluster, cluster_for, new_ref
from toolsafe.adapters.envelope import to_wire
from toolsafe.adapters.examples.downstream_state import Record
from toolsafe.recovery.canonical import input_hash
from toolsafe.recovery.schema import steps
from toolsafe.recovery.states import StepState
from toolsafe.recovery.store.sql import StepStore
from toolsafe.tasks.pipeline import approval_ref

pytestmark = [pytest.mark.postgres, pytest.mark.redis]

S = StepState
INVOICE = {"customer_id": "cus_7", "amount_cents": 990, "currency": "EUR"}


@pytest.fixture(scope="module")
def cluster(pg_url: str, redis_url: str, pipeline_dir: Path) -> Iterator[Cluster]:
    with cluster_for(pg_url, redis_url, pipeline_dir, suffix="approvals") as running:
        running.start_worker("approvals", concurrency=2)
        yield running


def _records(cluster: Cluster, resource: str, ref: str) -> list[Record]:
    state = cluster.downstream.state
    with state.lock:
        return [record for record in state.records[resource] if record.operation_ref == ref]


def test_the_approved_execution_carries_the_approval_reference(cluster: Cluster) -> None:
    ref = new_ref("run_a1/step_1")
    cluster.fault(fault="require_approval", operation_ref=ref, times=None)
    cluster.client.submit("create_invoice", INVOICE, operation_ref=ref)
    view = cluster.client.wait(ref, timeout=20)
    assert view.state is S.AWAITING_APPROVAL, cluster.logs()
    assert view.envelope is not None and to_wire(view.envelope)["code"] == "MISSING_APPROVAL"
    assert cluster.effects(ref) == 0

    cluster.client.approve(ref, approver="alice", reason="customer confirmed by phone")
    view = cluster.client.wait(ref, timeout=20)
    # The downstream refuses every write without the header: success means it was sent.
    assert view.state is S.SUCCEEDED, cluster.logs()
    step = cluster.client.runtime.store.get(ref)
    expected = approval_ref(step)
    assert expected is not None and expected.startswith("appr_")
    [record] = _records(cluster, "invoices", ref)
    assert record.approval_ref == expected
    assert cluster.effects(ref) == 1


def test_an_approval_does_not_carry_over_to_changed_input(cluster: Cluster) -> None:
    """The input changes between the approval and the execution (no public path does
    that: this is the defence in depth of ``approval_ref``): the worker sends no approval,
    the downstream refuses, and toolsafe asks for an approval of the changed input rather
    than retrying into success."""
    ref = new_ref("run_a2/step_1")
    cluster.fault(fault="require_approval", operation_ref=ref, times=None)
    cluster.client.submit("create_invoice", INVOICE, operation_ref=ref)
    assert cluster.client.wait(ref, timeout=20).state is S.AWAITING_APPROVAL
    # No worker runs between the approval and the change of input.
    cluster.stop_workers()
    store = cluster.client.runtime.store
    assert isinstance(store, StepStore)
    approved_for = store.get(ref).input_hash
    cluster.client.approve(ref, approver="alice", reason="approved for 9.90 EUR")
    changed = {**INVOICE, "amount_cents": 990_000}
    with store.engine.begin() as connection:
        connection.execute(
            update(steps)
            .where(steps.c.operation_ref == ref)
            .values(input=changed, input_hash=input_hash(changed))
        )
    step = store.get(ref)
    assert step.state is S.PENDING and step.approval_input_hash == approved_for
    assert approval_ref(step) is None

    cluster.start_worker("approvals-changed", concurrency=1)
    view = cluster.client.wait(ref, timeout=20)
    # Refused downstream, reported as such: the step waits for a human again, now for
    # an approval of the changed input (the old approval does not cover it). Since issue
    # 29 an approval gives the tool's whole budget, so this is no ATTEMPTS_EXHAUSTED.
    assert view.state is S.AWAITING_APPROVAL, cluster.logs()
    assert view.envelope is not None and to_wire(view.envelope)["code"] == "MISSING_APPROVAL"
    step = store.get(ref)
    assert step.approval_input_hash == input_hash(changed) != approved_for
    assert cluster.effects(ref) == 0 and _records(cluster, "invoices", ref) == []
    assert cluster.went_through(
        ref, S.AWAITING_APPROVAL, S.PENDING, S.IN_FLIGHT, S.AWAITING_APPROVAL
    )
