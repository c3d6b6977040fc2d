"""A person's decision is not spent by a transient fault (issue 29), end to end: real
workers, Redis, PostgreSQL and the naive example downstream (every POST that reaches its
store is an effect). After an approval, or a corrected input accepted, a rate limit or a
worker lost during the call is retried within the tool's whole budget and the step ends
succeeded with exactly one effect — before, the "1 attempt left" of the request escalated
``ATTEMPTS_EXHAUSTED``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.pipeline.harness import Cluster, cluster_for, new_ref
from tests.support.recovery.envelope_agreement import assert_agrees
from toolsafe.adapters.envelope import to_wire
from toolsafe.recovery.states import StepState
from toolsafe.tasks.faults import fired, write_plan
from toolsafe.tasks.pipeline import approval_ref
from toolsafe.tasks.views import StepView

pytestmark = [pytest.mark.postgres, pytest.mark.redis]

S = StepState
INVOICE = {"customer_id": "cus_29", "amount_cents": 2900, "currency": "EUR"}
EMAIL = {"recipient_email": "ada@example.invalid", "subject": "Your invoice", "body": "Hi"}
FIXED = {**EMAIL, "recipient_email": "ada@example.org"}


@pytest.fixture(scope="module")
def cluster(pg_url: str, redis_url: str, pipeline_dir: Path) -> Iterator[Cluster]:
    with cluster_for(pg_url, redis_url, pipeline_dir, suffix="decisions") as running:
        running.start_worker("decisions", concurrency=2)
        yield running


def settled(cluster: Cluster, ref: str, timeout: float = 30.0) -> StepView:
    """The view once the step needs the agent or is over (the wait scales with the
    machine factor)."""
    cluster.wait_for(
        lambda: cluster.client.view(ref).needs_agent, timeout=timeout, what=f"{ref} settled"
    )
    return cluster.client.view(ref)


def agrees(view: StepView) -> None:
    """The envelope the view shows agrees with the step's state and counts."""
    assert_agrees(
        state=view.state,
        commit_state=view.commit_state,
        attempts=view.attempts,
        max_attempts=view.max_attempts,
        due_at=view.due_at,
        reason=view.reason,
        flagged=view.fields,
        operation_ref=view.operation_ref,
        shown=None if view.envelope is None else to_wire(view.envelope),
    )


def budget(cluster: Cluster, tool: str) -> int:
    return cluster.settings.policies.for_tool(tool).retry.max_attempts


def waiting_says_the_budget(cluster: Cluster, view: StepView) -> None:
    """While it waits on a person, the step and its envelope promise the whole budget."""
    agrees(view)
    assert view.envelope is not None
    left = to_wire(view.envelope)["retry"]["max_attempts_remaining"]
    assert left == view.max_attempts - view.attempts == budget(cluster, view.tool)


def test_approve_then_rate_limited_succeeds_with_one_effect(cluster: Cluster) -> None:
    ref = new_ref("run_29a/step_1")
    gate = cluster.fault(fault="require_approval", operation_ref=ref, times=None)
    cluster.client.submit("create_invoice", INVOICE, operation_ref=ref)
    view = settled(cluster, ref)
    assert view.state is S.AWAITING_APPROVAL, cluster.logs()
    assert view.envelope is not None and to_wire(view.envelope)["code"] == "MISSING_APPROVAL"
    waiting_says_the_budget(cluster, view)
    # The approved call and its first retry are rate limited: each fault is spent by one
    # call, and no call runs while the step waits for the approval.
    cluster.fault(fault="rate_limit", operation_ref=ref, times=2, retry_after=1)
    approved = cluster.client.approve(ref, approver="alice", reason="customer confirmed")
    # The whole budget counted from the approval: the answer is the step as the approval
    # left it (read before the hint goes out, so no worker has run it yet).
    assert approved.state is S.PENDING
    assert approved.max_attempts - approved.attempts == budget(cluster, "create_invoice")
    view = settled(cluster, ref)
    assert view.state is S.SUCCEEDED, (view.state, view.reason, cluster.logs())
    agrees(view)
    assert cluster.effects(ref) == 1 and cluster.violations([ref]) == []
    assert cluster.went_through(ref, S.AWAITING_APPROVAL, S.PENDING, S.WAITING_RETRY, S.SUCCEEDED)
    # The retries carried the approval: the stored invoice holds it.
    step = cluster.client.runtime.store.get(ref)
    state = cluster.downstream.state
    with state.lock:
        [record] = [r for r in state.records["invoices"] if r.operation_ref == ref]
    assert record.approval_ref is not None and record.approval_ref == approval_ref(step)
    cluster.clear_fault(gate)


def test_corrected_input_then_a_dropped_call_is_verified_and_succeeds_once(
    cluster: Cluster,
) -> None:
    ref = new_ref("run_29b/step_4")
    cluster.client.submit("send_email", EMAIL, operation_ref=ref)
    view = settled(cluster, ref)
    assert view.state is S.NEEDS_INPUT and view.fields == ("recipient_email",), cluster.logs()
    waiting_says_the_budget(cluster, view)
    # The corrected call's connection drops before the downstream stores it: the outcome
    # is unknown, verification finds it absent after the window, and the step retries.
    cluster.fault(fault="drop_before_store", operation_ref=ref, times=1)
    corrected = cluster.client.provide_input(ref, FIXED)
    assert corrected.max_attempts == view.attempts + budget(cluster, "send_email")
    view = settled(cluster, ref, timeout=40)
    assert view.state is S.SUCCEEDED, (view.state, view.reason, cluster.logs())
    agrees(view)
    assert cluster.went_through(ref, S.NEEDS_INPUT, S.PENDING, S.VERIFYING, S.WAITING_RETRY)
    assert cluster.effects(ref) == 1 and cluster.violations([ref]) == []


def test_corrected_input_then_a_killed_worker_is_verified_and_succeeds_once(
    cluster: Cluster,
) -> None:
    ref = new_ref("run_29c/step_4")
    cluster.client.submit("send_email", EMAIL, operation_ref=ref)
    view = settled(cluster, ref)
    assert view.state is S.NEEDS_INPUT, cluster.logs()
    waiting_says_the_budget(cluster, view)
    # The pool process that claims the corrected call is SIGKILLed before it sends: the
    # lease runs out, verification finds nothing, and the step runs again.
    plan = Path(cluster.env["TOOLSAFE_FAULT_PLAN"])
    write_plan(plan, {ref: {"before_call": "kill"}})
    cluster.client.provide_input(ref, FIXED)
    view = settled(cluster, ref, timeout=40)
    assert view.state is S.SUCCEEDED, (view.state, view.reason, cluster.logs())
    agrees(view)
    assert [f["point"] for f in fired(f"{plan}.fired") if f["entry"] == ref] == ["before_call"]
    assert cluster.went_through(ref, S.NEEDS_INPUT, S.PENDING, S.VERIFYING, S.WAITING_RETRY)
    assert cluster.effects(ref) == 1 and cluster.violations([ref]) == []
