"""The chaos run's configuration and its report: what was asked, what happened, as text
and as JSON."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from toolsafe.chaos.plan import Schedule, ScheduleSize, Timing, Verdict
from toolsafe.chaos.recovery_time import summary
from toolsafe.harness.local import LOCAL_PG_ADMIN, LOCAL_REDIS
from toolsafe.recovery.counts import Counts, WaitTimes, as_json, render


@dataclass(frozen=True)
class ChaosConfig:
    # A dedicated Redis db (not 0). With ``size.redis_restarts`` the run starts a Redis
    # server of its own instead, and this must be None.
    broker: str | None = None
    # A PostgreSQL database URL; None: a new database on ``pg_admin``'s server.
    database: str | None = None
    size: ScheduleSize = field(default_factory=ScheduleSize)
    workers: int = 3
    # "solo": a SIGKILL at a fault point kills the whole worker (recovered after its
    # lease); "prefork": it kills a pool process of a live worker (recovered at once).
    pool: str = "solo"
    concurrency: int = 2  # pool processes per worker under "prefork"
    seed: int = 6
    timing: Timing = field(default_factory=Timing)
    batch_interval: float = 0.25  # seconds between batches of submissions
    # Submit only while fewer steps than this are being worked on: a backlog far beyond
    # what the workers drain tests the broker's patience, not toolsafe's recovery.
    max_in_progress: int = 150
    bound: float = 150.0  # seconds allowed to settle after the last submission
    workdir: Path | None = None
    keep_keys: tuple[str, ...] = ()  # broker keys a flush leaves alone
    metrics: bool = True  # run the store-wide exporter; the report scrapes it
    # How to restart the PostgreSQL server (needed when size.db_restarts > 0), e.g.
    # "pg_ctlcluster --skip-systemctl-redirect 15 main restart".
    pg_restart_command: str | None = None
    # Run the example downstream enforcing Idempotency-Key, with the adapters declaring
    # ``deduplicates_by_key``; by default it runs naive, so that a duplicate shows.
    deduplicating: bool = False
    # Submit with TOOLSAFE_SUBMIT_HINTS=relay: the workers' hint relays publish the
    # submits' hints (tasks/relay.py), under the same faults.
    relay: bool = False
    local_redis: str = LOCAL_REDIS  # where a run without --broker takes a db of its own
    pg_admin: str = LOCAL_PG_ADMIN  # where a run without --database creates its own


@dataclass(frozen=True)
class KillRecovery:
    """One fired SIGKILL: where it struck, its step's scenario, and the seconds until
    the step was final or waiting on the agent again."""

    point: str
    scenario: str
    seconds: float


def _grouped(pairs: Iterable[tuple[str, float]]) -> dict[str, list[float]]:
    """The seconds of ``pairs`` by their key, keys in order."""
    groups: dict[str, list[float]] = {}
    for key, seconds in sorted(pairs, key=lambda pair: pair[0]):
        groups.setdefault(key, []).append(seconds)
    return groups


def _p50_max(groups: dict[str, list[float]], *, counted: bool) -> str:
    """``name [count, ]p50 / max`` of each group, for the report's text."""
    return ", ".join(
        f"{name} {f'{len(seconds)}, ' if counted else ''}"
        f"{summary(seconds)['p50']:.2f}s / {max(seconds):.2f}s"
        for name, seconds in groups.items()
    )


@dataclass
class ChaosReport:
    config: ChaosConfig
    schedule: Schedule
    prefix: str
    workdir: Path
    started_at: datetime
    submitted: list[str] = field(default_factory=list)
    faults: Counter[str] = field(default_factory=Counter)
    kills_fired: Counter[str] = field(default_factory=Counter)
    worker_exits: Counter[str] = field(default_factory=Counter)
    agent: Counter[str] = field(default_factory=Counter)
    scenario_states: dict[str, Counter[str]] = field(default_factory=dict)
    submit_seconds: float = 0.0
    settle_seconds: float = 0.0
    settled: bool = False
    verdict: Verdict | None = None
    counts: Counts | None = None
    exported: dict[str, float] = field(default_factory=dict)
    restart_seconds: list[float] = field(default_factory=list)
    broker_restart_seconds: list[float] = field(default_factory=list)
    failover_seconds: list[float] = field(default_factory=list)  # primary killed → promoted
    # Per fired SIGKILL: its fault point, its step's scenario, and the seconds until the
    # step was final or waiting on the agent again. A scenario that waits by itself (a
    # rate limit's not_before, a stalled store, an approval) counts its own wait too.
    kills: list[KillRecovery] = field(default_factory=list)
    # The recovery wait (first failure → terminal) of each scenario's steps.
    recovery_by_scenario: dict[str, WaitTimes] = field(default_factory=dict)
    beat_exits: Counter[str] = field(default_factory=Counter)
    # Envelopes checked while their step waited to retry or verified (toolsafe.chaos.checks).
    checked_in_passing: int = 0
    # Requests per operation_ref the downstream answered from its key (a replay of the
    # stored record, or "key in flight"): the deduplicating downstream at work.
    deduplicated: dict[str, int] = field(default_factory=dict)

    @property
    def kill_recovery_seconds(self) -> list[float]:
        """Every fired kill's recovery time, whatever its fault point."""
        return [kill.seconds for kill in self.kills]

    @property
    def kill_recovery(self) -> dict[str, list[float]]:
        """The kills' recovery times by fault point."""
        return _grouped((kill.point, kill.seconds) for kill in self.kills)

    @property
    def kill_recovery_by_scenario(self) -> dict[str, list[float]]:
        """The kills' recovery times by the killed step's scenario."""
        return _grouped((kill.scenario, kill.seconds) for kill in self.kills)

    @property
    def unplanned_worker_exits(self) -> int:
        """Worker exits that were not a SIGKILL the run sent at a fault point: any other
        exit code, and SIGKILLs beyond those the fault points fired."""
        sigkills = self.worker_exits.get("SIGKILL", 0)
        others = sum(n for kind, n in self.worker_exits.items() if kind != "SIGKILL")
        return others + max(0, sigkills - sum(self.kills_fired.values()))

    @property
    def violations(self) -> int:
        return 0 if self.verdict is None else len(self.verdict.violations)

    @property
    def ok(self) -> bool:
        return (
            self.verdict is not None
            and not self.verdict.violations
            and self.unplanned_worker_exits == 0
        )

    def text(self) -> str:
        c, size = self.config, self.config.size
        kills = ", ".join(f"{p} {n}" for p, n in sorted(self.kills_fired.items())) or "none"
        planned = ", ".join(f"{p} {n}" for p, n in self.schedule.kills().items())
        lines = [
            f"toolsafe chaos — {self.started_at:%Y-%m-%d %H:%M:%S} UTC",
            f"seed {c.seed} (schedule {self.schedule.fingerprint()}), {size.steps} steps, "
            f"{c.workers} workers ({pool_shown(c)}), "
            f"at most {c.max_in_progress} steps in progress, operation_refs {self.prefix}*",
            f"work dir: {self.workdir}",
            f"broker {c.broker}, database {hide_password(c.database or '')}",
            f"downstream: {downstream_shown(c)}; submits' hints: {hints_shown(c)}",
            "",
            f"steps submitted: {len(self.submitted)} in {self.submit_seconds:.1f}s; "
            f"settled: {'yes' if self.settled else 'NO'} after {self.settle_seconds:.1f}s "
            f"more (bound {c.bound:g}s)",
            f"SIGKILLs at fault points: {sum(self.kills_fired.values())} ({kills}); "
            f"planned: {planned}",
            "faults injected: "
            + ", ".join(f"{kind} {n}" for kind, n in sorted(self.faults.items())),
            "worker exits: "
            + (", ".join(f"{kind} {n}" for kind, n in sorted(self.worker_exits.items())) or "none")
            + f"; unplanned (not a SIGKILL the run sent): {self.unplanned_worker_exits}",
        ]
        recovery = summary(self.kill_recovery_seconds)
        if recovery["count"]:
            lines.append(
                f"kill → final or waiting on the agent ({recovery['count']:.0f} kills): "
                f"p50 {recovery['p50']:.2f}s, p95 {recovery['p95']:.2f}s, "
                f"max {recovery['max']:.2f}s; by point (p50 / max): "
                + _p50_max(self.kill_recovery, counted=False)
            )
            lines.append(
                "  by the killed step's scenario (kills, p50 / max): "
                + _p50_max(self.kill_recovery_by_scenario, counted=True)
            )
        if c.deduplicating:
            lines.append(
                f"requests the downstream deduplicated by key: {sum(self.deduplicated.values())} "
                f"(of {len(self.deduplicated)} steps)"
            )
        if self.broker_restart_seconds:
            away = self.broker_restart_seconds
            lines.append(
                f"redis server restarts (kill -9, start): {len(away)}, away "
                f"{min(away):.1f}-{max(away):.1f}s"
            )
        if self.failover_seconds:
            away = self.failover_seconds
            lines.append(
                f"postgres failovers (primary killed, standby promoted): {len(away)}, "
                f"writes refused {min(away):.1f}-{max(away):.1f}s"
            )
        if self.beat_exits:
            lines.append(
                "beat exits (restarted): "
                + ", ".join(f"{kind} {n}" for kind, n in sorted(self.beat_exits.items()))
            )
        lines += [
            "agent: " + (", ".join(f"{k} {n}" for k, n in sorted(self.agent.items())) or "none"),
            "scenarios (final states):",
        ]
        for name, states in sorted(self.scenario_states.items()):
            shown = ", ".join(f"{state} {n}" for state, n in sorted(states.items()))
            lines.append(f"  {name:<22} {shown}")
        verdict = self.verdict
        lines.append("")
        lines.append(
            f"invariant violations: {self.violations} (envelopes also checked in passing: "
            f"{self.checked_in_passing})"
        )
        if verdict is not None:
            for rule, n in verdict.by_rule.items():
                lines.append(f"  {rule}: {n}")
            for violation in verdict.violations[:20]:
                lines.append(f"  {violation}")
        if self.counts is not None:
            lines.extend(["", "counts (from the event log):", render(self.counts)])
        waited = {name: w for name, w in self.recovery_by_scenario.items() if w.count}
        if waited:
            lines.append("recovery wait by scenario (steps: p50 / p95 / max):")
            for name, w in waited.items():
                lines.append(
                    f"  {name:<22} {w.count}: {w.quantiles[0.5]:.2f}s / "
                    f"{w.quantiles[0.95]:.2f}s / {w.max or 0.0:.2f}s"
                )
        if self.exported:
            shown = ", ".join(f"{k} {v:g}" for k, v in sorted(self.exported.items()))
            lines.append(f"exporter /metrics (store-wide): {shown}")
        return "\n".join(lines)

    def json(self) -> dict[str, Any]:
        return {
            "started_at": self.started_at.isoformat(),
            "seed": self.config.seed,
            "schedule": self.schedule.fingerprint(),
            "steps": len(self.submitted),
            "workers": self.config.workers,
            "pool": self.config.pool,
            "max_in_progress": self.config.max_in_progress,
            "prefix": self.prefix,
            "settled": self.settled,
            "submit_seconds": self.submit_seconds,
            "settle_seconds": self.settle_seconds,
            "bound_seconds": self.config.bound,
            "kills_fired": dict(self.kills_fired),
            "kills_planned": self.schedule.kills(),
            "faults": dict(self.faults),
            "worker_exits": dict(self.worker_exits),
            "unplanned_worker_exits": self.unplanned_worker_exits,
            "broker_restart_seconds": self.broker_restart_seconds,
            "failover_seconds": self.failover_seconds,
            "kill_recovery": summary(self.kill_recovery_seconds),
            "kill_recovery_by_point": {
                point: summary(seconds) for point, seconds in self.kill_recovery.items()
            },
            "kill_recovery_by_scenario": {
                name: summary(seconds) for name, seconds in self.kill_recovery_by_scenario.items()
            },
            "recovery_by_scenario": {
                name: as_json_wait(w) for name, w in self.recovery_by_scenario.items()
            },
            "beat_exits": dict(self.beat_exits),
            "checked_in_passing": self.checked_in_passing,
            "downstream": "deduplicating" if self.config.deduplicating else "naive",
            "submit_hints": "relay" if self.config.relay else "direct",
            "deduplicated_requests": sum(self.deduplicated.values()),
            "deduplicated_steps": len(self.deduplicated),
            "agent": dict(self.agent),
            "scenarios": {k: dict(v) for k, v in self.scenario_states.items()},
            "violations": [str(v) for v in self.verdict.violations] if self.verdict else None,
            "counts": as_json(self.counts) if self.counts is not None else None,
            "exported": self.exported,
        }


def as_json_wait(wait: WaitTimes) -> dict[str, float | None]:
    return {
        "count": wait.count,
        "p50": wait.quantiles.get(0.5),
        "p95": wait.quantiles.get(0.95),
        "max": wait.max,
    }


def downstream_shown(config: ChaosConfig) -> str:
    if config.deduplicating:
        return "deduplicating by Idempotency-Key, adapters declare deduplicates_by_key"
    return "naive (stores every request: a duplicate write shows as a second effect)"


def hints_shown(config: ChaosConfig) -> str:
    return "published by the workers' relays" if config.relay else "published by the submitter"


def pool_shown(config: ChaosConfig) -> str:
    if config.pool == "solo":
        return "solo pool"
    return f"{config.pool} pool × {config.concurrency}"


def hide_password(url: str) -> str:
    """The URL with its password shown as ``***``, in the user part or in the query
    (libpq's ``?password=``, as a multi-host URL may carry it)."""
    url = re.sub(r"(?i)([?&]password=)[^&#]*", r"\1***", url)
    scheme, sep, rest = url.partition("://")
    credentials, at, host = rest.rpartition("@")
    if not at or ":" not in credentials:
        return url
    return f"{scheme}{sep}{credentials.split(':', 1)[0]}:***@{host}"
