"""The article's scenarios end to end: real workers, Redis, PostgreSQL and the naive
example downstream, asserting each step's path and the downstream's effect count."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest

from tests.support.pipeline.harness import ROOT, Cluster, cluster_for, new_ref
from toolsafe.adapters.envelope import to_wire
from toolsafe.harness import preload
from toolsafe.recovery.outcomes import TransitionRefused
from toolsafe.recovery.states import StepState
from toolsafe.tasks.views import SAFE_ENVELOPE_FIELDS

pytestmark = [pytest.mark.postgres, pytest.mark.redis]

S = StepState
INVOICE = {"customer_id": "cus_1", "amount_cents": 4200, "currency": "EUR"}
EMAIL = {"recipient_email": "ada@example.org", "subject": "Your invoice", "body": "Hi"}


@pytest.fixture(scope="module")
def cluster(pg_url: str, redis_url: str, pipeline_dir: Path) -> Iterator[Cluster]:
    with cluster_for(pg_url, redis_url, pipeline_dir, suffix="scenarios") as running:
        running.start_worker("scenarios", concurrency=2)
        yield running


def test_success_with_evidence(cluster: Cluster) -> None:
    ref = new_ref("run_1/step_1")
    submitted = cluster.client.submit("create_invoice", INVOICE, operation_ref=ref)
    assert submitted.operation_ref == ref
    view = cluster.client.wait(ref, timeout=20)
    assert view.state is S.SUCCEEDED, cluster.logs()
    assert view.commit_state == "committed"
    assert view.envelope is not None and to_wire(view.envelope)["ok"] is True
    assert to_wire(view.envelope)["verification"]["checked_at"]
    assert to_wire(view.envelope)["result"]["customer_id"] == "cus_1"
    assert cluster.effects(ref) == 1 and cluster.violations([ref]) == []
    # Submitting the same call again returns the same step and runs nothing.
    again = cluster.client.submit("create_invoice", INVOICE, operation_ref=ref)
    assert again.state is S.SUCCEEDED and again.attempts == view.attempts
    assert cluster.effects(ref) == 1


def test_invalid_recipient_needs_input_then_corrected(cluster: Cluster) -> None:
    ref = new_ref("run_81/step_4")
    bad = {**EMAIL, "recipient_email": "ada@example.invalid"}
    cluster.client.submit("send_email", bad, operation_ref=ref)
    view = cluster.client.wait(ref, timeout=20)
    assert view.state is S.NEEDS_INPUT, cluster.logs()
    assert view.ui_group == "waiting for input"
    assert view.fields == ("recipient_email",)
    assert (
        view.envelope is not None and to_wire(view.envelope)["code"] == "INVALID_RECIPIENT_ADDRESS"
    )
    assert "recipient_email" in view.text
    with pytest.raises(TransitionRefused):
        cluster.client.provide_input(ref, bad)  # identical input
    with pytest.raises(TransitionRefused):
        cluster.client.provide_input(ref, {**bad, "subject": "Another"})  # flagged unchanged
    assert cluster.client.view(ref).state is S.NEEDS_INPUT
    fixed = cluster.client.provide_input(ref, {**bad, "recipient_email": "ada@example.org"})
    assert fixed.operation_ref == ref
    view = cluster.client.wait(ref, timeout=20)
    assert view.state is S.SUCCEEDED, cluster.logs()
    assert cluster.went_through(ref, S.NEEDS_INPUT, S.PENDING, S.IN_FLIGHT, S.SUCCEEDED)
    assert cluster.violations([ref]) == []
    assert cluster.effects(ref) == 1


def test_rate_limit_waits_for_not_before(cluster: Cluster) -> None:
    ref = new_ref("run_2/step_1")
    cluster.fault(fault="rate_limit", operation_ref=ref, retry_after=1)
    cluster.client.submit("create_invoice", INVOICE, operation_ref=ref)
    view = cluster.client.wait(ref, timeout=20)
    assert view.state is S.SUCCEEDED, cluster.logs()
    events = cluster.client.runtime.store.events(ref)
    # The rate limit's own event (a lease lost on a starved machine may add another).
    limited = next(e for e in events if e.to_state is S.WAITING_RETRY and "envelope" in e.detail)
    step_after = [e for e in events if e.kind == "claimed" and e.at > limited.at]
    assert step_after, "the retry was never claimed"
    envelope = limited.detail.get("envelope", {})
    not_before = datetime.fromisoformat(envelope["retry"]["not_before"])
    assert step_after[0].at >= not_before
    assert cluster.went_through(ref, S.WAITING_RETRY, S.IN_FLIGHT, S.SUCCEEDED)
    assert cluster.violations([ref]) == []
    assert cluster.effects(ref) == 1


def test_missing_approval_then_approved(cluster: Cluster) -> None:
    ref = new_ref("run_3/step_1")
    cluster.fault(fault="require_approval", operation_ref=ref)
    cluster.client.submit("create_invoice", INVOICE, operation_ref=ref)
    view = cluster.client.wait(ref, timeout=20)
    assert view.state is S.AWAITING_APPROVAL, cluster.logs()
    assert view.ui_group == "waiting for approval"
    assert cluster.effects(ref) == 0
    cluster.client.approve(ref, approver="alice", reason="customer confirmed by phone")
    view = cluster.client.wait(ref, timeout=20)
    assert view.state is S.SUCCEEDED, cluster.logs()
    assert cluster.went_through(ref, S.AWAITING_APPROVAL, S.PENDING, S.IN_FLIGHT, S.SUCCEEDED)
    assert cluster.violations([ref]) == []
    assert cluster.effects(ref) == 1
    approved = [entry for entry in view.history if entry.kind == "approved"]
    assert approved and approved[0].detail.get("approver") == "alice"


def test_version_conflict_asks_for_a_new_plan(cluster: Cluster) -> None:
    ref = new_ref("run_4/step_1")
    cluster.fault(fault="version_conflict", operation_ref=ref)
    cluster.client.submit("create_invoice", INVOICE, operation_ref=ref)
    view = cluster.client.wait(ref, timeout=20)
    assert view.state is S.ESCALATED, cluster.logs()
    assert view.reason == "VERSION_CONFLICT"
    assert "new plan" in view.text
    assert cluster.effects(ref) == 0


def test_timeout_after_store_is_verified_not_repeated(cluster: Cluster) -> None:
    ref = new_ref("run_5/step_1")
    # The downstream stores the invoice, then stalls past the adapter's 1 s timeout.
    cluster.fault(fault="stall_after_store", operation_ref=ref, seconds=2)
    cluster.client.submit("create_invoice", INVOICE, operation_ref=ref)
    view = cluster.client.wait(ref, timeout=20)
    assert view.state is S.SUCCEEDED, cluster.logs()
    assert cluster.went_through(ref, S.IN_FLIGHT, S.VERIFYING, S.SUCCEEDED)
    assert cluster.effects(ref) == 1  # naive downstream: no execution after the write
    assert cluster.violations([ref]) == []


def test_eventual_consistency_found_after_a_delay(cluster: Cluster) -> None:
    ref = new_ref("run_6/step_1")
    # A gateway 502 hides the stored write, which the lookup sees only after 1.5 s
    # (inside the adapter's 2 s consistency window).
    cluster.fault(fault="error_after_store", operation_ref=ref, status=502)
    cluster.fault(fault="eventual_consistency", operation_ref=ref, seconds=1.5)
    cluster.client.submit("create_invoice", INVOICE, operation_ref=ref)
    view = cluster.client.wait(ref, timeout=20)
    assert view.state is S.SUCCEEDED, cluster.logs()
    looked_up = [e for e in cluster.client.runtime.store.events(ref) if e.kind == "looked_up"]
    found = [bool(e.detail["lookup"]["found"]) for e in looked_up]
    # Every lookup before the write became visible missed it (inside the window, so
    # no retry); the one after it found it.
    assert found[-1] is True and not any(found[:-1]) and len(found) >= 2, found
    state = cluster.downstream.state
    with state.lock:
        [record] = [r for r in state.records["invoices"] if r.operation_ref == ref]
    # A lookup is stamped when its answer arrives: the one that found the write came after
    # it became visible. (A miss may be stamped after that moment too, when its answer was
    # slow to arrive on a loaded machine: the downstream looked before it.)
    checked = [datetime.fromisoformat(e.detail["lookup"]["checked_at"]) for e in looked_up]
    assert checked[-1] >= record.visible_at
    assert cluster.went_through(ref, S.IN_FLIGHT, S.VERIFYING, S.SUCCEEDED)
    assert cluster.effects(ref) == 1 and cluster.violations([ref]) == []


@pytest.mark.slow
def test_lookup_down_escalates_notifies_and_shows_in_the_cli(cluster: Cluster) -> None:
    ref = new_ref("run_7/step_1")
    cluster.fault(fault="error_after_store", operation_ref=ref, status=502)
    cluster.fault(fault="lookup_down", operation_ref=ref, times=None)
    cluster.client.submit("create_invoice", INVOICE, operation_ref=ref)
    view = cluster.client.wait(ref, timeout=30)
    assert view.state is S.ESCALATED, cluster.logs()
    assert cluster.went_through(ref, S.IN_FLIGHT, S.VERIFYING, S.ESCALATED)
    assert cluster.effects(ref) == 1 and cluster.violations([ref]) == []
    cluster.wait_for(
        lambda: any(n["operation_ref"] == ref for n in cluster.webhook.received),
        what="the escalation webhook",
    )
    notice = next(n for n in cluster.webhook.received if n["operation_ref"] == ref)
    assert notice["reason"] == view.reason and notice["tool"] == "create_invoice"
    # The notice carries the runtime's escalation envelope, not the stale "checking".
    assert notice["history"] and notice["envelope"]["code"] == "LOOKUP_UNAVAILABLE"
    assert notice["envelope"]["next_action"] == "escalate"
    assert set(notice["envelope"]) <= set(SAFE_ENVELOPE_FIELDS)
    assert "input" not in notice and "cus_1" not in json.dumps(notice)

    env = {**os.environ, **cluster.env}
    listed = preload.run(
        [sys.executable, "-m", "toolsafe", "escalations", "list"], cwd=ROOT, env=env, timeout=60
    )
    assert listed.returncode == 0, listed.stderr
    assert ref in listed.stdout
    # The operator closes it: the invoice exists, so it succeeded; they must say where.
    resolve = [
        sys.executable,
        "-m",
        "toolsafe",
        "escalations",
        "resolve",
        ref,
        "--to",
        "succeeded",
        "--reason",
        "invoice found in the billing UI",
        "--operator",
        "bob",
    ]
    unproven = preload.run(resolve, cwd=ROOT, env=env, timeout=60)
    assert unproven.returncode == 1 and "EVIDENCE_REQUIRED" in unproven.stderr
    assert cluster.client.view(ref).state is S.ESCALATED
    resolved = preload.run(
        [*resolve, "--evidence", "billing/inv_81"], cwd=ROOT, env=env, timeout=60
    )
    assert resolved.returncode == 0, resolved.stderr
    closed = cluster.client.view(ref)
    assert closed.state is S.SUCCEEDED and closed.ui_group == "resolved by an operator"
    assert closed.envelope is not None
    assert to_wire(closed.envelope)["verification"]["evidence_ref"] == "billing/inv_81"
    again = preload.run(
        [sys.executable, "-m", "toolsafe", "escalations", "redrive", ref, "--reason", "x"],
        cwd=ROOT, env=env, timeout=60,
    )  # fmt: skip
    assert again.returncode == 1 and "toolsafe: error:" in again.stderr
