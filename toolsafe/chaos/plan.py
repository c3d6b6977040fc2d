"""The chaos run's pure parts: scenarios, the seeded fault schedule, and the invariant
checked against the downstream's own record of effects (no I/O here)."""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Final, Literal

from toolsafe.recovery.states import NEEDS_AGENT, StepState
from toolsafe.tasks.faults import POINTS

S = StepState

AgentAction = Literal["none", "input", "approve"]


@dataclass(frozen=True)
class Timing:
    """The delays the scenarios are built from (seconds); the run's settings follow them."""

    call_timeout: float = 1.0  # the example adapters' read/write timeout
    consistency_window: float = 3.0  # the adapters' declared window
    visible_after: float = 1.0  # eventual consistency: inside the window, by design
    retry_after: float = 1.0  # the downstream's Retry-After on a rate limit
    lookup_down_times: int = 2  # lookups answered 503 (a short outage, inside the budget)

    @property
    def time_limit(self) -> float:
        """The task's hard time limit in the run (``longest_call``)."""
        return self.call_timeout + 3

    def __post_init__(self) -> None:
        if self.visible_after >= self.consistency_window:
            # A write that stays invisible past the declared window would be retried
            # as "absent": a duplicate the adapter's contract allows. Not this test.
            raise ValueError("visible_after must be below the consistency window")


@dataclass(frozen=True)
class Scenario:
    name: str
    tool: str
    faults: tuple[Mapping[str, Any], ...]  # downstream faults for this operation_ref
    agent: AgentAction = "none"
    expected: StepState = S.SUCCEEDED
    follow_up: bool = False  # its path publishes a retry, verification or escalation
    long_call: bool = False  # its first call lasts until the adapter's timeout


def scenarios(timing: Timing, *, deduplicating: bool = False) -> tuple[Scenario, ...]:
    """The article's scenarios, each a way the downstream misbehaves for one step; with a
    deduplicating downstream also ``slow_store`` (below)."""
    stored_502 = {"fault": "error_after_store", "status": 502}
    extra = (_slow_store(timing),) if deduplicating else ()
    return (*_common(timing, stored_502), *extra)


def _slow_store(timing: Timing) -> Scenario:
    """The downstream holds the request's key in flight (nothing stored) past the
    consistency window but within the time limit: the call times out, the lookup finds
    nothing after the window, and the retry that ``deduplicates_by_key`` allows then meets
    the first request at the downstream ("key in flight", or its stored record). Against
    a naive downstream that retry would be a second effect: it runs only when the
    adapters declare the trait over a downstream that enforces the key."""
    held = (timing.consistency_window + timing.time_limit) / 2
    fault = {"fault": "stall_before_store", "seconds": held}
    return Scenario("slow_store", "create_invoice", (fault,), follow_up=True, long_call=True)


def _common(timing: Timing, stored_502: Mapping[str, Any]) -> tuple[Scenario, ...]:
    return (
        Scenario("clean_success", "create_invoice", ()),
        Scenario("clean_email", "send_email", ()),
        Scenario("input_fix", "send_email", (), agent="input"),
        Scenario(
            "rate_limit",
            "create_invoice",
            ({"fault": "rate_limit", "retry_after": timing.retry_after},),
            follow_up=True,
        ),
        Scenario(
            "approval",
            "create_invoice",
            ({"fault": "require_approval", "times": None},),
            agent="approve",
        ),
        Scenario(
            "conflict",
            "create_invoice",
            ({"fault": "version_conflict", "times": None},),
            expected=S.ESCALATED,
            follow_up=True,
        ),
        Scenario(
            "stall_after_store",
            "create_invoice",
            ({"fault": "stall_after_store", "seconds": timing.call_timeout + 1.0},),
            follow_up=True,
            long_call=True,
        ),
        Scenario("502_after_store", "create_invoice", (stored_502,), follow_up=True),
        Scenario(
            "eventual_consistency",
            "create_invoice",
            ({"fault": "eventual_consistency", "seconds": timing.visible_after}, stored_502),
            follow_up=True,
        ),
        Scenario(
            "lookup_down",
            "send_email",
            (stored_502, {"fault": "lookup_down", "times": timing.lookup_down_times}),
            follow_up=True,
        ),
    )


def step_input(scenario: Scenario, index: int) -> dict[str, Any]:
    """The tool input of step ``index``; an input-fix step starts with a bad domain."""
    if scenario.tool == "send_email":
        domain = "exmaple.com" if scenario.agent == "input" else "example.com"
        return {
            "recipient_email": f"user{index}@{domain}",
            "subject": f"Chaos step {index}",
            "body": "Sent by toolsafe chaos.",
        }
    return {"customer_id": f"cust_{index}", "amount_cents": 100 + index, "currency": "EUR"}


def corrected_input(scenario: Scenario, index: int) -> dict[str, Any]:
    """What the agent sends back for a step in ``needs_input``."""
    fixed = step_input(scenario, index)
    if "recipient_email" in fixed:
        fixed["recipient_email"] = f"user{index}@example.com"
    return fixed


# ------------------------------------------------------------------ the schedule

ActionKind = Literal[
    "submit",
    "flush_broker",
    "restart_broker",
    "kill_db_connections",
    "restart_database",
    "duplicate",
    "partition_worker",
    "fail_over",
]


@dataclass(frozen=True)
class Action:
    """One move of the run, in order; ``steps`` are step indices."""

    kind: ActionKind
    steps: tuple[int, ...] = ()
    task: Literal["execute", "verify", ""] = ""


@dataclass(frozen=True)
class PlannedStep:
    index: int
    scenario: str
    kill_at: str | None = None  # a fault point where the worker running it is SIGKILLed


@dataclass(frozen=True)
class Schedule:
    seed: int
    steps: tuple[PlannedStep, ...]
    actions: tuple[Action, ...]

    def kills(self) -> dict[str, int]:
        found: dict[str, int] = {point: 0 for point in POINTS}
        for step in self.steps:
            if step.kill_at is not None:
                found[step.kill_at] += 1
        return found

    def count(self, kind: ActionKind) -> int:
        return sum(1 for action in self.actions if action.kind == kind)

    def duplicates(self) -> int:
        return sum(len(a.steps) for a in self.actions if a.kind == "duplicate")

    def fingerprint(self) -> str:
        """A short hash of the whole schedule: equal seeds and sizes give equal hashes."""
        data = json.dumps(asdict(self), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(data.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class ScheduleSize:
    steps: int = 300
    kills: int = 30
    broker_flushes: int = 1
    db_kill_rounds: int = 1
    db_restarts: int = 0
    redis_restarts: int = 0  # kill -9 and start again of the run's own Redis server
    partitions: int = 0  # one worker cut off from database and broker, longer than a lease
    failovers: int = 0  # the run's own PostgreSQL primary killed, its standby promoted
    duplicates: int = 60
    batch: int = 20


def build_schedule(
    seed: int, size: ScheduleSize, timing: Timing | None = None, *, deduplicating: bool = False
) -> Schedule:
    """The whole run decided up front from the seed: scenarios, kills, broker flushes and
    restarts, database connection kills, restarts and failovers and duplicate messages, in
    the order they happen."""
    if size.steps < 1 or size.batch < 1:
        raise ValueError("need at least one step and a batch of at least one")
    rng = random.Random(seed)
    known = scenarios(timing or Timing(), deduplicating=deduplicating)
    names = [known[i % len(known)].name for i in range(size.steps)]
    rng.shuffle(names)
    by_name = {scenario.name: scenario for scenario in known}
    kill_at = _plan_kills(rng, names, by_name, size.kills)
    planned = tuple(PlannedStep(i, names[i], kill_at.get(i)) for i in range(size.steps))

    batches = [
        tuple(range(start, min(start + size.batch, size.steps)))
        for start in range(0, size.steps, size.batch)
    ]
    # Infrastructure faults strike after some batch; the broker flush waits until at
    # least half the steps are in flight somewhere, so it has messages to destroy.
    flush_after = _spread(rng, len(batches), size.broker_flushes, earliest=len(batches) // 2)
    db_after = _spread(rng, len(batches), size.db_kill_rounds, earliest=0)
    # Drawn only when asked for: a schedule without restarts is the same as before.
    restart_after = (
        _spread(rng, len(batches), size.db_restarts, earliest=len(batches) // 3)
        if size.db_restarts
        else []
    )
    # Broker restarts strike while work is in flight: from the second batch on, never
    # after the last, so that steps are still arriving when the broker comes back. Drawn
    # from a generator of their own: adding them moves no other fault of the schedule.
    broker_rng = random.Random(f"{seed}/redis-restarts")
    broker_after = (
        _spread(broker_rng, max(len(batches) - 1, 1), size.redis_restarts, earliest=1)
        if size.redis_restarts
        else []
    )
    # Partitions of one worker likewise strike while work arrives, from a generator of
    # their own (docs/chaos.md).
    partition_rng = random.Random(f"{seed}/partitions")
    partition_after = (
        _spread(partition_rng, max(len(batches) - 1, 1), size.partitions, earliest=0)
        if size.partitions
        else []
    )
    # Failovers strike while steps still arrive, from a generator of their own too.
    failover_rng = random.Random(f"{seed}/failovers")
    failover_after = (
        _spread(failover_rng, max(len(batches) - 1, 1), size.failovers, earliest=1)
        if size.failovers
        else []
    )
    duplicates_per_batch = _share(size.duplicates, len(batches))
    actions: list[Action] = []
    submitted: list[int] = []
    for number, batch in enumerate(batches):
        actions.append(Action("submit", batch))
        submitted.extend(batch)
        if duplicates_per_batch[number]:
            chosen = tuple(rng.choice(submitted) for _ in range(duplicates_per_batch[number]))
            execute = tuple(i for k, i in enumerate(chosen) if k % 3 != 2)
            verify = tuple(i for k, i in enumerate(chosen) if k % 3 == 2)
            if execute:
                actions.append(Action("duplicate", execute, "execute"))
            if verify:
                actions.append(Action("duplicate", verify, "verify"))
        actions.extend(Action("kill_db_connections") for _ in range(db_after.count(number)))
        actions.extend(Action("flush_broker") for _ in range(flush_after.count(number)))
        actions.extend(Action("restart_database") for _ in range(restart_after.count(number)))
        actions.extend(Action("restart_broker") for _ in range(broker_after.count(number)))
        actions.extend(Action("partition_worker") for _ in range(partition_after.count(number)))
        actions.extend(Action("fail_over") for _ in range(failover_after.count(number)))
    return Schedule(seed=seed, steps=planned, actions=tuple(actions))


def _eligible(point: str, scenario: Scenario) -> bool:
    """Whether a step of this scenario passes ``point`` on its first execution."""
    if point == "during_call":
        return scenario.long_call  # the timer fires while the downstream stalls
    if point in ("before_publish", "after_publish"):
        return scenario.follow_up
    return True


def _plan_kills(
    rng: random.Random, names: Sequence[str], by_name: Mapping[str, Scenario], kills: int
) -> dict[int, str]:
    """Spread ``kills`` over every fault point in turn, one kill per step at most."""
    free = list(range(len(names)))
    rng.shuffle(free)
    chosen: dict[int, str] = {}
    for number in range(kills):
        point = POINTS[number % len(POINTS)]
        for position, index in enumerate(free):
            if _eligible(point, by_name[names[index]]):
                chosen[index] = point
                del free[position]
                break
    return chosen


def _spread(rng: random.Random, slots: int, count: int, earliest: int) -> list[int]:
    """``count`` slot numbers in [earliest, slots), repeats allowed, sorted."""
    if count <= 0 or slots <= 0:
        return []
    low = min(earliest, slots - 1)
    return sorted(rng.randrange(low, slots) for _ in range(count))


def _share(total: int, parts: int) -> list[int]:
    base, extra = divmod(max(total, 0), parts)
    return [base + (1 if number < extra else 0) for number in range(parts)]


# ------------------------------------------------------------------ the invariant

EFFECT_REPORTED: Final = frozenset({"committed", "unknown"})


@dataclass(frozen=True)
class Observed:
    """A step as the store has it at the end of the run."""

    state: StepState
    commit_state: str | None


@dataclass(frozen=True)
class Violation:
    operation_ref: str
    rule: str
    detail: str

    def __str__(self) -> str:
        return f"{self.operation_ref}: {self.rule} ({self.detail})"


@dataclass(frozen=True)
class Verdict:
    violations: tuple[Violation, ...]
    by_rule: Mapping[str, int] = field(default_factory=dict)


def check_invariant(
    submitted: Sequence[str],
    observed: Mapping[str, Observed],
    effects: Mapping[str, int],
) -> Verdict:
    """The downstream's record against the store's, step by step (issue 6 §2):

    per operation_ref at most one effect; a step with an effect is ``succeeded`` or
    ``escalated`` with the effect recorded as committed/unknown; a step without an
    effect is not ``succeeded``; every submitted step exists and is terminal or waits on
    a human; and the downstream saw no write that toolsafe did not submit.
    """
    found: list[Violation] = []
    expected_refs = set(submitted)
    for ref in submitted:
        count = effects.get(ref, 0)
        step = observed.get(ref)
        if count > 1:
            found.append(Violation(ref, "duplicate_effect", f"{count} effects downstream"))
        if step is None:
            found.append(Violation(ref, "lost", "submitted but not in the store"))
            continue
        state = step.state
        if state not in NEEDS_AGENT:  # neither terminal nor waiting on a human
            found.append(Violation(ref, "stuck", f"still {state}"))
        if count >= 1:
            escalated_ok = state is S.ESCALATED and step.commit_state in EFFECT_REPORTED
            if state is not S.SUCCEEDED and not escalated_ok:
                found.append(
                    Violation(
                        ref,
                        "effect_not_reported",
                        f"written downstream, step is {state} (commit_state {step.commit_state})",
                    )
                )
        elif state is S.SUCCEEDED:
            found.append(Violation(ref, "success_without_effect", "succeeded, nothing downstream"))
    for ref, count in sorted(effects.items()):
        if ref not in expected_refs and count > 0:
            found.append(Violation(ref, "stray_effect", f"{count} writes toolsafe never submitted"))
    by_rule: dict[str, int] = {}
    for violation in found:
        by_rule[violation.rule] = by_rule.get(violation.rule, 0) + 1
    return Verdict(tuple(found), dict(sorted(by_rule.items())))
