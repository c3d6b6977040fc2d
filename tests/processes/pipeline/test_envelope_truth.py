"""Real workers, Redis, PostgreSQL and the example downstream: the envelope a view gives
the model after an escalation and after a rejection agrees with the step's state."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.pipeline.harness import Cluster, cluster_for, new_ref
from tests.support.recovery.envelope_agreement import assert_agrees
from toolsafe.adapters.envelope import to_wire
from toolsafe.recovery.states import StepState
from toolsafe.tasks.views import StepView

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.slow]

S = StepState
INVOICE = {"customer_id": "cus_1", "amount_cents": 4200, "currency": "EUR"}


@pytest.fixture(scope="module")
def cluster(pg_url: str, redis_url: str, pipeline_dir: Path) -> Iterator[Cluster]:
    with cluster_for(pg_url, redis_url, pipeline_dir, suffix="envelopes") as running:
        running.start_worker("envelopes", concurrency=2)
        yield running


def _agrees(cluster: Cluster, view: StepView) -> None:
    step = cluster.client.runtime.store.get(view.operation_ref)
    assert_agrees(
        state=step.state,
        commit_state=step.commit_state,
        attempts=step.attempts,
        max_attempts=step.max_attempts,
        due_at=step.due_at,
        reason=step.reason,
        flagged=step.flagged_fields,
        operation_ref=step.operation_ref,
        shown=view.envelope_json(),
    )


def test_escalated_after_the_lookup_stayed_down(cluster: Cluster) -> None:
    ref = new_ref("truth/lookup_down")
    cluster.fault(fault="error_after_store", operation_ref=ref, status=500)
    cluster.fault(fault="lookup_down", operation_ref=ref, times=None)
    cluster.client.submit("create_invoice", INVOICE, operation_ref=ref)
    view = cluster.client.wait(ref, timeout=30)
    assert view.state is S.ESCALATED, cluster.logs()
    _agrees(cluster, view)
    assert view.envelope is not None
    assert (to_wire(view.envelope)["code"], to_wire(view.envelope)["next_action"]) == (
        "LOOKUP_UNAVAILABLE", "escalate",
    )  # fmt: skip
    assert "checking" not in to_wire(view.envelope)["user_message"].lower()
    # The adapter's OUTCOME_UNKNOWN stays in the history.
    codes = [entry.detail.get("code") for entry in view.history if entry.kind == "executed"]
    assert codes == ["OUTCOME_UNKNOWN"]
    assert cluster.effects(ref) == 1


def test_rejected_after_an_approval_request(cluster: Cluster) -> None:
    ref = new_ref("truth/rejected")
    cluster.fault(fault="require_approval", operation_ref=ref)
    cluster.client.submit("create_invoice", INVOICE, operation_ref=ref)
    waiting = cluster.client.wait(ref, timeout=20)
    assert waiting.state is S.AWAITING_APPROVAL, cluster.logs()
    _agrees(cluster, waiting)
    failed = cluster.client.reject(ref, approver="alice", reason="not this customer")
    assert failed.state is S.FAILED
    _agrees(cluster, failed)
    assert failed.envelope is not None and to_wire(failed.envelope)["code"] == "REJECTED"
    assert "approval" not in to_wire(failed.envelope)["user_message"].lower()
    assert cluster.effects(ref) == 0
