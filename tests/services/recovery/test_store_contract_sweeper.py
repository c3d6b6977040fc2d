"""The store port's contract for the sweeper, on every implementation: expired leases
(R4), due work handed out once and oldest first, publish stamps (R7)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tests.support.recovery.contract_support import (
    MINUTE,
    REF,
    S,
    after,
    claimed,
    last,
    rng,
    set_columns,
    submit,
    verifying,
)
from tests.support.recovery.store_support import (
    BLIND_WRITE,
    LEASE,
    POLICY,
    READ,
    T0,
    WRITE,
    correct_input,
)
from toolsafe.recovery.policy import ToolTraits
from toolsafe.recovery.states import StepState
from toolsafe.recovery.store import (
    StepNotFound,
    StorePort,
)


@pytest.fixture
def store(any_store: StorePort) -> StorePort:
    """Each implementation of the port, empty."""
    return any_store


# ------------------------------------------------------------------ the sweeper


def test_expired_execution_lease_goes_to_verification(store: StorePort) -> None:
    claimed(store)
    just_before = T0 + LEASE - timedelta(microseconds=1)
    assert store.expire_leases(just_before, lambda _: WRITE, lambda _: POLICY) == []
    [recorded] = store.expire_leases(T0 + LEASE, lambda _: WRITE, lambda _: POLICY, rng=rng())
    step = recorded.step
    assert (step.state, step.commit_state, step.lease_owner, step.attempts) == (
        S.VERIFYING,
        "unknown",
        None,
        1,
    )
    assert store.get(REF) == step and recorded.decision.action == "verify"
    kind, src, dst, detail = last(store)
    assert (kind, src, dst) == ("lease_expired", S.IN_FLIGHT, S.VERIFYING)
    assert detail["owner"] == "worker-1"
    assert detail["lease_expires_at"] == (T0 + LEASE).isoformat()
    # Never straight back to execution (R4), and not expired twice.
    assert store.claim_execution(REF, "worker-2", LEASE, T0 + MINUTE) is None
    assert store.expire_leases(T0 + MINUTE, lambda _: WRITE, lambda _: POLICY) == []


@pytest.mark.parametrize(("traits", "state"), [(BLIND_WRITE, S.ESCALATED), (READ, S.WAITING_RETRY)])
def test_expired_lease_follows_the_tools_traits(
    store: StorePort, traits: ToolTraits, state: StepState
) -> None:
    claimed(store)
    [recorded] = store.expire_leases(T0 + LEASE, lambda _: traits, lambda _: POLICY)
    assert recorded.step.state is state


def test_expired_verification_lease_is_released(store: StorePort) -> None:
    due = verifying(store)
    assert store.claim_verification(REF, "checker", LEASE, due) is not None
    [recorded] = store.expire_leases(due + LEASE, lambda _: WRITE, lambda _: POLICY)
    assert (recorded.step.state, recorded.step.lease_owner) == (S.VERIFYING, None)
    assert recorded.step.due_at == due + LEASE
    assert store.claim_verification(REF, "checker-2", LEASE, due + LEASE) is not None


def test_expire_leases_respects_its_limit_oldest_first(store: StorePort) -> None:
    for index in range(5):
        claimed(store, f"r{index}", T0 + timedelta(seconds=index))
    late = T0 + MINUTE
    first = store.expire_leases(late, lambda _: WRITE, lambda _: POLICY, limit=3)
    second = store.expire_leases(late, lambda _: WRITE, lambda _: POLICY, limit=3)
    assert [r.step.operation_ref for r in first] == ["r0", "r1", "r2"]
    assert [r.step.operation_ref for r in second] == ["r3", "r4"]


def test_due_work_publishes_each_due_step_once_per_interval(store: StorePort) -> None:
    for index in range(3):
        submit(store, f"r{index}", now=T0 + timedelta(seconds=index))
    submit(store, "future", now=T0 + 2 * MINUTE)
    now = T0 + timedelta(seconds=2)
    due = store.due_work(now, limit=10, republish_after=MINUTE)
    assert [step.operation_ref for step in due] == ["r0", "r1", "r2"]
    assert all(step.published_at == now and step.version == 1 for step in due)
    assert [store.get(step.operation_ref) for step in due] == due
    assert store.due_work(now + timedelta(seconds=59), limit=10, republish_after=MINUTE) == []
    again = store.due_work(now + MINUTE, limit=2, republish_after=MINUTE)
    assert [step.operation_ref for step in again] == ["r0", "r1"]
    assert [e.kind for e in store.events("r0")] == ["submitted"]  # bookkeeping, no event


def test_due_work_breaks_equal_due_times_by_age(store: StorePort) -> None:
    for index in range(3):
        submit(store, f"r{index}")
    submit(store, "future", now=T0 + MINUTE)
    due = store.due_work(T0, limit=10, republish_after=MINUTE)
    assert [step.operation_ref for step in due] == ["r0", "r1", "r2"]
    # Equal due times: the oldest step first, so a limit takes the oldest steps; the rest
    # come with the next batch, before a step due later.
    again = store.due_work(T0 + MINUTE, limit=2, republish_after=MINUTE)
    assert [step.operation_ref for step in again] == ["r0", "r1"]
    rest = store.due_work(T0 + MINUTE, limit=2, republish_after=MINUTE)
    assert [step.operation_ref for step in rest] == ["r2", "future"]


def test_due_work_skips_leased_in_flight_and_waiting_steps(store: StorePort) -> None:
    due = verifying(store, "checking")
    assert store.claim_verification("checking", "checker", LEASE, due) is not None
    claimed(store, "running", due)
    after(store, correct_input, "human")
    submit(store, "stale-human")
    set_columns(store, "stale-human", state=S.NEEDS_INPUT)  # its due time stays in the past
    submit(store, "future", now=due + MINUTE)
    assert store.due_work(due, limit=10, republish_after=MINUTE) == []
    later = store.due_work(due + MINUTE, limit=10, republish_after=MINUTE)
    assert {step.operation_ref for step in later} == {"checking", "future"}
    assert {step.state for step in later} == {S.VERIFYING, S.PENDING}


def test_a_stamped_step_is_left_to_the_sweeper_until_republish_after(store: StorePort) -> None:
    submit(store, published_at=T0)
    wait = timedelta(seconds=30)
    assert store.due_work(T0 + timedelta(seconds=29), limit=10, republish_after=wait) == []
    [due] = store.due_work(T0 + wait, limit=10, republish_after=wait)
    assert due.operation_ref == REF and due.published_at == T0 + wait


def test_due_work_needs_a_positive_republish_interval(store: StorePort) -> None:
    with pytest.raises(ValueError, match="republish_after"):
        store.due_work(T0, limit=1, republish_after=timedelta(0))


def test_mark_published(store: StorePort) -> None:
    submit(store)
    store.mark_published(REF, T0 + MINUTE)
    step = store.get(REF)
    assert step.published_at == T0 + MINUTE and step.version == 1
    assert len(store.events(REF)) == 1
    assert store.due_work(T0 + MINUTE, 10, MINUTE) == []
    with pytest.raises(StepNotFound):
        store.mark_published("ghost", T0)


def test_due_work_hands_out_the_longest_due_first(store: StorePort) -> None:
    submit(store, "second", now=T0 + timedelta(seconds=5))
    submit(store, "first", now=T0 + timedelta(seconds=1))
    now = T0 + MINUTE
    [due] = store.due_work(now, limit=1, republish_after=MINUTE)
    assert due.operation_ref == "first"
    [due] = store.due_work(now, limit=1, republish_after=MINUTE)
    assert due.operation_ref == "second"
    assert store.due_work(now, limit=1, republish_after=MINUTE) == []


# ------------------------------------------------------------- hints a broker lost


def test_lost_hints_hands_out_only_hints_sent_inside_the_window(store: StorePort) -> None:
    second = timedelta(seconds=1)
    submit(store, "before", now=T0, published_at=T0)
    submit(store, "inside", now=T0 + 5 * second, published_at=T0 + 5 * second)
    submit(store, "after", now=T0 + 20 * second, published_at=T0 + 20 * second)
    submit(store, "never", now=T0 + 6 * second)  # no hint went out: not the broker's loss
    claimed(store, "running", T0 + 6 * second)
    now = T0 + 30 * second
    since, until = T0 + 2 * second, T0 + 10 * second
    [lost] = store.lost_hints(now, since, until, until + second, limit=10)
    assert lost.operation_ref == "inside" and lost.published_at == now and lost.version == 1
    assert store.get("inside") == lost
    assert [e.kind for e in store.events("inside")] == ["submitted"]  # bookkeeping only
    # Handed out once: stamped at ``now``, it has left the window.
    assert store.lost_hints(now, since, until, until + second, limit=10) == []
    # From the beginning: the older hint too.
    [older] = store.lost_hints(now, None, until, until + second, limit=10)
    assert older.operation_ref == "before"


def test_lost_hints_is_bounded_and_oldest_due_first(store: StorePort) -> None:
    for index in range(5):
        at = T0 + timedelta(seconds=index)
        submit(store, f"r{index}", now=at, published_at=at)
    now = T0 + MINUTE
    first = store.lost_hints(now, None, T0 + MINUTE, T0 + MINUTE, limit=2)
    second = store.lost_hints(now, None, T0 + MINUTE, T0 + MINUTE, limit=2)
    rest = store.lost_hints(now, None, T0 + MINUTE, T0 + MINUTE, limit=2)
    assert [s.operation_ref for s in first + second + rest] == [f"r{i}" for i in range(5)]
    assert len(rest) == 1


def test_a_lost_eta_hint_is_unparked_for_the_release_timer(store: StorePort) -> None:
    due = verifying(store, "checking")  # waits until ``due``; its ETA hint went out
    store.mark_published("checking", due)  # an ETA hint is stamped with its due time
    until = due - timedelta(seconds=1)  # the broker started just before it fell due
    assert store.lost_hints(until, None, until, until, limit=10) == []  # sent after until
    [lost] = store.lost_hints(until, None, until, due + timedelta(seconds=1), limit=10)
    assert lost.operation_ref == "checking" and lost.published_at is None
    assert store.release_parked(until, due, limit=10)[0].operation_ref == "checking"


def test_lost_hints_refuses_a_window_in_the_future(store: StorePort) -> None:
    with pytest.raises(ValueError, match="loss window"):
        store.lost_hints(T0, None, T0 + MINUTE, T0 + MINUTE, limit=1)


# ------------------------------------------------------------------ the hint relay


def test_take_hints_takes_pending_unsent_steps_once_oldest_first(store: StorePort) -> None:
    submit(store, "second", now=T0 + timedelta(seconds=2))
    submit(store, "first", now=T0 + timedelta(seconds=1))
    submit(store, "stamped", now=T0, published_at=T0)  # its submitter published it
    claimed(store, "running")
    now = T0 + MINUTE
    assert store.take_hints(now, 1) == [("first", "create_invoice")]
    assert store.take_hints(now, 10) == [("second", "create_invoice")]
    assert store.take_hints(now, 10) == []
    for ref in ("first", "second"):
        step = store.get(ref)
        assert step.published_at == now and step.version == 1  # bookkeeping only
        assert [e.kind for e in store.events(ref)] == ["submitted"]


def test_take_hints_of_the_steps_heard_of(store: StorePort) -> None:
    for ref in ("a", "b", "c"):
        submit(store, ref)
    claimed(store, "running")
    now = T0 + MINUTE
    # Only those named, and only while pending and unsent: a claimed step, a step not
    # there and one already taken come back as nothing.
    assert store.take_hints(now, 10, ["c", "a", "running", "ghost"]) == [
        ("a", "create_invoice"),
        ("c", "create_invoice"),
    ]
    assert store.take_hints(now, 10, ["a", "c"]) == []
    assert store.take_hints(now, 10, []) == []
    assert store.take_hints(now, 10) == [("b", "create_invoice")]


def test_take_hints_of_refs_is_bounded(store: StorePort) -> None:
    for ref in ("a", "b", "c"):
        submit(store, ref)
    taken = store.take_hints(T0, 2, ["a", "b", "c"])
    assert taken == [("a", "create_invoice"), ("b", "create_invoice")]
    assert store.take_hints(T0, 2, ["a", "b", "c"]) == [("c", "create_invoice")]


def test_hints_not_sent_makes_them_unsent_again(store: StorePort) -> None:
    submit(store, "a")
    submit(store, "b")
    stamp = T0 + MINUTE
    assert len(store.take_hints(stamp, 10)) == 2
    store.mark_published("b", stamp + MINUTE)  # sent again meanwhile, by someone else
    store.hints_not_sent(["a", "b", "ghost"], stamp)
    assert store.get("a").published_at is None
    assert store.get("b").published_at == stamp + MINUTE  # not this caller's stamp
    assert store.take_hints(stamp + MINUTE, 10) == [("a", "create_invoice")]
    store.hints_not_sent([], stamp)  # nothing to do


def test_an_unsent_step_is_due_work_for_the_sweeper_too(store: StorePort) -> None:
    # No relay ran: the sweeper's due_work sends a never-published step (R7).
    submit(store)
    [due] = store.due_work(T0, limit=10, republish_after=MINUTE)
    assert due.operation_ref == REF and due.published_at == T0
    assert store.take_hints(T0, 10) == []  # handed out once, whoever takes it
