"""``toolsafe chaos``: real workers, beat and the naive example downstream under a seeded
schedule of SIGKILLs, broker flushes and hard restarts, PostgreSQL connection kills and
restarts and duplicate messages; then the invariant against the downstream's own record,
the worker exits nobody planned, and the article's counts."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import signal
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

import httpx

from toolsafe.adapters.errors import ToolsafeError
from toolsafe.celeryconfig import EXECUTE_TASK, VERIFY_TASK
from toolsafe.chaos.plan import (
    Observed,
    Schedule,
    ScheduleSize,
    Timing,
    Verdict,
    build_schedule,
    check_invariant,
    corrected_input,
    scenarios,
    step_input,
)
from toolsafe.harness import (
    DownstreamProcess,
    Fleet,
    HarnessError,
    Process,
    WorkerOptions,
    check_broker,
    flush_broker,
    kill_db_connections,
    restart_database,
    start_beat,
    start_worker,
)
from toolsafe.harness.local import (
    LOCAL_PG_ADMIN,
    LOCAL_REDIS,
    REDIS_LOCK_KEY,
    database_of_its_own,
    redis_db_of_its_own,
)
from toolsafe.harness.redis_server import RedisServer
from toolsafe.metrics.exporter import Exporter, Served, read_counts, serve
from toolsafe.recovery.counts import Counts, as_json, render
from toolsafe.recovery.db import make_engine, migrate
from toolsafe.recovery.states import NEEDS_AGENT, TERMINAL, WAITING_ON_HUMAN, StepState
from toolsafe.recovery.store import StepStore, StorePort
from toolsafe.settings import child_environ
from toolsafe.tasks import faults

log = logging.getLogger("toolsafe.chaos")


@dataclass(frozen=True)
class ChaosConfig:
    # A dedicated Redis db (not 0). With ``size.redis_restarts`` the run starts a Redis
    # server of its own instead, and this must be None.
    broker: str | None = None
    # A PostgreSQL database URL; None: a new database on ``pg_admin``'s server.
    database: str | None = None
    size: ScheduleSize = field(default_factory=ScheduleSize)
    workers: int = 3
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
    local_redis: str = LOCAL_REDIS  # where a run without --broker takes a db of its own
    pg_admin: str = LOCAL_PG_ADMIN  # where a run without --database creates its own


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
    beat_exits: Counter[str] = field(default_factory=Counter)

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
            f"{c.workers} workers, at most {c.max_in_progress} steps in progress, "
            f"operation_refs {self.prefix}*",
            f"work dir: {self.workdir}",
            f"broker {c.broker}, database {hide_password(c.database or '')}",
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
        if self.broker_restart_seconds:
            away = self.broker_restart_seconds
            lines.append(
                f"redis server restarts (kill -9, start): {len(away)}, away "
                f"{min(away):.1f}-{max(away):.1f}s"
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
        lines.append(f"invariant violations: {self.violations}")
        if verdict is not None:
            for rule, n in verdict.by_rule.items():
                lines.append(f"  {rule}: {n}")
            for violation in verdict.violations[:20]:
                lines.append(f"  {violation}")
        if self.counts is not None:
            lines.extend(["", "counts (from the event log):", render(self.counts)])
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
            "beat_exits": dict(self.beat_exits),
            "agent": dict(self.agent),
            "scenarios": {k: dict(v) for k, v in self.scenario_states.items()},
            "violations": [str(v) for v in self.verdict.violations] if self.verdict else None,
            "counts": as_json(self.counts) if self.counts is not None else None,
            "exported": self.exported,
        }


def hide_password(url: str) -> str:
    scheme, sep, rest = url.partition("://")
    credentials, at, host = rest.rpartition("@")
    if not at or ":" not in credentials:
        return url
    return f"{scheme}{sep}{credentials.split(':', 1)[0]}:***@{host}"


def run_env(config: ChaosConfig, workdir: Path, downstream_url: str) -> dict[str, str]:
    """The ``TOOLSAFE_*`` settings every process of the run shares: short leases and
    sweeps so that a killed worker's step is verified within seconds."""
    t = config.timing
    assert config.broker is not None and config.database is not None, "resolved by run()"
    return child_environ(
        {
            "TOOLSAFE_BROKER_URL": config.broker,
            "TOOLSAFE_DATABASE_URL": config.database,
            "TOOLSAFE_ADAPTERS": "toolsafe.adapters.examples",
            "TOOLSAFE_EXAMPLE_DOWNSTREAM_URL": downstream_url,
            "TOOLSAFE_EXAMPLE_CONSISTENCY_WINDOW": str(t.consistency_window),
            "TOOLSAFE_EXAMPLE_TIMEOUT": str(t.call_timeout),
            "TOOLSAFE_TASK_SOFT_TIME_LIMIT": str(t.call_timeout + 2),
            "TOOLSAFE_TASK_TIME_LIMIT": str(t.call_timeout + 3),
            # Short: a live call's heartbeat renews it (every 0.6 s), a dead one's ends soon.
            "TOOLSAFE_LEASE_SECONDS": "3",
            "TOOLSAFE_SWEEP_INTERVAL": "0.5",
            # Lost hints (a broker flush) are republished after this; well above the
            # queue's latency, or every queued step would be published again and again.
            "TOOLSAFE_REPUBLISH_AFTER": "15",
            "TOOLSAFE_MAX_ETA": "5",
            "TOOLSAFE_VISIBILITY_TIMEOUT": "150",
            "TOOLSAFE_RETRY_BASE_DELAY": "0.2",
            "TOOLSAFE_RETRY_MAX_DELAY": "2",
            "TOOLSAFE_VERIFY_BASE_DELAY": "0.3",
            "TOOLSAFE_VERIFY_MAX_DELAY": "1.5",
            "TOOLSAFE_FAULTS_ENABLED": "1",
            "TOOLSAFE_FAULT_PLAN": str(workdir / "fault-plan.json"),
            "TOOLSAFE_FAULT_STATE_DIR": str(workdir / "fired"),
        }
    )


class _Run:
    """One chaos run: owns the processes, the client and the report while it lasts."""

    def __init__(
        self, config: ChaosConfig, workdir: Path, redis_server: RedisServer | None = None
    ) -> None:
        self.config = config
        self.redis_server = redis_server
        self.workdir = workdir
        self.schedule = build_schedule(config.seed, config.size, config.timing)
        self.prefix = f"chaos-{config.seed}-{uuid.uuid4().hex[:8]}/"
        self.by_name = {s.name: s for s in scenarios(config.timing)}
        self.report = ChaosReport(
            config, self.schedule, self.prefix, workdir, datetime.now(UTC).replace(microsecond=0)
        )
        assert config.broker is not None and config.database is not None, "resolved by run()"
        self.broker: str = config.broker
        self.database: str = config.database
        self.sql_store = StepStore(make_engine(self.database))
        self.store: StorePort = self.sql_store
        self.beat: Process | None = None
        self.env: dict[str, str] = {}
        self.workers: Fleet | None = None
        self.downstream: DownstreamProcess | None = None
        self.client: Any = None
        self.answered: set[tuple[str, str]] = set()
        self.metrics: Served | None = None  # the one store-wide exporter

    def ref(self, index: int) -> str:
        return f"{self.prefix}{index:05d}"

    # -------------------------------------------------------------- setup, teardown

    def start(self) -> None:
        from toolsafe.settings import Settings
        from toolsafe.tasks.app import create_app
        from toolsafe.tasks.client import Client

        config = self.config
        migrate(self.database)
        plan = {
            self.ref(step.index): {step.kill_at: "kill"}
            for step in self.schedule.steps
            if step.kill_at is not None
        }
        faults.write_plan(self.workdir / "fault-plan.json", plan)
        flush_broker(self.broker, config.keep_keys)
        self.downstream = DownstreamProcess(self.workdir, run_env(config, self.workdir, ""))
        env = run_env(config, self.workdir, self.downstream.url)
        if config.metrics:
            self.metrics = serve(Exporter(self.sql_store, poll_interval=0.2))
        self.workers = Fleet()
        run_id = self.prefix[6:-1]
        for number in range(config.workers):
            # Solo pool: a SIGKILL at a fault point kills the whole worker.
            options = WorkerOptions(
                name=f"worker{number}",
                node=f"chaos{number}-{run_id}",
                pool="solo",
                loglevel="WARNING",
                without=("gossip", "mingle", "heartbeat"),
            )
            self.workers.add(start_worker(options, env=dict(env), directory=self.workdir))
        self.env = env
        self.beat = self.start_beat()
        self.client = Client(create_app(Settings.from_env(env)))

    def stop(self) -> None:
        if self.metrics is not None:
            self.metrics.close()
        if self.beat is not None:
            self.beat.stop()
        if self.workers is not None:
            self.workers.stop()
        if self.downstream is not None:
            self.downstream.stop()
        self.sql_store.engine.dispose()

    # -------------------------------------------------------------- the schedule

    def perform(self) -> None:
        started = time.monotonic()
        for action in self.schedule.actions:
            if action.kind == "submit":
                self.wait_for_room(len(action.steps))
                for index in action.steps:
                    self.submit(index)
                self.tend()
                time.sleep(self.config.batch_interval)
            elif action.kind == "duplicate":
                task = EXECUTE_TASK if action.task == "execute" else VERIFY_TASK
                for index in action.steps:
                    self.through_broker(
                        partial(self.client.app.send_task, task, args=(self.ref(index),))
                    )
                self.report.faults[f"duplicate {action.task} message"] += len(action.steps)
            elif action.kind == "flush_broker":
                deleted = flush_broker(self.broker, self.config.keep_keys)
                self.report.faults["broker flush"] += 1
                self.report.faults["broker keys dropped"] += deleted
            elif action.kind == "restart_broker":
                if self.redis_server is None:
                    raise ValueError("a broker restart is scheduled but the run owns no Redis")
                away = self.redis_server.restart()
                self.report.faults["redis server restart"] += 1
                self.report.broker_restart_seconds.append(away)
            elif action.kind == "restart_database":
                if self.config.pg_restart_command is None:
                    raise ValueError("a database restart is scheduled but no restart command")
                away = restart_database(self.config.pg_restart_command, self.database)
                self.report.faults["postgres server restart"] += 1
                self.report.restart_seconds.append(away)
            elif action.kind == "kill_db_connections":
                killed = kill_db_connections(self.database)
                self.report.faults["postgres connection-kill round"] += 1
                self.report.faults["postgres connections terminated"] += killed
        self.report.submit_seconds = time.monotonic() - started

    def wait_for_room(self, incoming: int) -> None:
        """Hold the next batch while the workers have ``max_in_progress`` steps to do."""
        limit = self.config.max_in_progress
        if limit <= 0:
            return
        deadline = time.monotonic() + self.config.bound
        while time.monotonic() < deadline:
            observed = self.tend()
            busy = sum(1 for step in observed.values() if step.state not in NEEDS_AGENT)
            if busy + incoming <= max(limit, incoming):
                return
            time.sleep(0.2)

    def submit(self, index: int) -> None:
        planned = self.schedule.steps[index]
        scenario = self.by_name[planned.scenario]
        ref = self.ref(index)
        assert self.downstream is not None
        for fault in scenario.faults:
            self.downstream.add_fault(ref, fault)
            self.report.faults[f"downstream {fault['fault']}"] += 1
        self.through_broker(
            partial(self.client.submit, scenario.tool, step_input(scenario, index), ref)
        )
        self.report.submitted.append(ref)

    def through_broker(self, publish: Callable[[], object], timeout: float = 60.0) -> None:
        """Call ``publish`` until the broker takes it. A submit whose publish failed has
        committed its step: submitting the same operation_ref again is the same step."""
        import kombu.exceptions
        import redis.exceptions

        deadline = time.monotonic() + timeout
        while True:
            try:
                publish()
                return
            except (kombu.exceptions.OperationalError, redis.exceptions.RedisError, OSError):
                if time.monotonic() > deadline:
                    raise
                self.report.faults["publish refused by the broker (retried)"] += 1
                time.sleep(0.2)

    # -------------------------------------------------------------- while it runs

    def observe(self) -> dict[str, Observed]:
        for attempt in range(5):
            try:
                found = self.store.step_summaries(self.prefix)
                break
            except Exception:  # a connection killed by the run itself
                if attempt == 4:
                    raise
                time.sleep(0.2)
        return {step.operation_ref: Observed(step.state, step.commit_state) for step in found}

    def tend(self) -> dict[str, Observed]:
        """Restart dead workers, answer the steps that wait on the agent; the steps as
        they are afterwards."""
        assert self.workers is not None
        self.workers.restart_dead()
        self.restart_beat_if_dead()
        observed = self.observe()
        answers = [
            (ref, step.state)
            for ref, step in observed.items()
            if step.state in WAITING_ON_HUMAN and (ref, step.state.value) not in self.answered
        ]
        for ref, state in answers:
            self.answer(ref, state)
        return self.observe() if answers else observed

    def restart_beat_if_dead(self) -> None:
        """Beat is not under test: when it dies, say so in the report and start it again."""
        if self.beat is None or self.beat.returncode is None:
            return
        code = self.beat.returncode
        self.report.beat_exits["SIGKILL" if code == -9 else f"exit {code}"] += 1
        self.beat.kill()
        self.beat = self.start_beat()

    def start_beat(self) -> Process:
        return start_beat(
            env=self.env, directory=self.workdir, schedule=self.workdir / "beat-schedule",
            loglevel="WARNING",
        )  # fmt: skip

    def answer(self, ref: str, state: StepState) -> None:
        index = int(ref.rsplit("/", 1)[1])
        scenario = self.by_name[self.schedule.steps[index].scenario]
        try:
            if state is StepState.NEEDS_INPUT:
                self.client.provide_input(ref, corrected_input(scenario, index))
                self.report.agent["corrected input"] += 1
            else:
                self.client.approve(ref, approver="chaos-agent", reason="chaos run approves")
                self.report.agent["approvals"] += 1
        except ToolsafeError as error:
            # Refused (the state moved on, or the correction was not accepted): the
            # agent answers each waiting state once; what remains waits on a human.
            self.report.agent[f"refused {type(error).__name__}"] += 1
        except Exception:
            # The database connection may be one the run just killed: try next round.
            log.warning("agent answer failed; retrying", extra={"event": "chaos_agent_retry"})
            return
        self.answered.add((ref, state.value))

    def complete(self, observed: Mapping[str, Observed]) -> bool:
        """Every step terminal, or waiting on a human after the agent answered it once."""
        if len(observed) < len(self.report.submitted):
            return False
        return all(
            step.state in TERMINAL
            or (step.state in WAITING_ON_HUMAN and (ref, step.state.value) in self.answered)
            for ref, step in observed.items()
        )

    def settle(self) -> dict[str, Observed]:
        started = time.monotonic()
        deadline = started + self.config.bound
        observed = self.tend()
        while not self.complete(observed) and time.monotonic() < deadline:
            time.sleep(0.3)
            observed = self.tend()
        self.report.settled = self.complete(observed)
        self.report.settle_seconds = time.monotonic() - started
        return observed

    # -------------------------------------------------------------- the verdict

    def conclude(self, observed: Mapping[str, Observed]) -> None:
        report = self.report
        assert self.downstream is not None and self.workers is not None
        effects = self.downstream.effects()
        report.verdict = check_invariant(report.submitted, observed, effects)
        report.counts = read_counts(self.store, self.prefix)
        for planned in self.schedule.steps:
            ref = self.ref(planned.index)
            step = observed.get(ref)
            states = report.scenario_states.setdefault(planned.scenario, Counter())
            states[step.state.value if step else "lost"] += 1
        for record in faults.fired(self.workdir / "fired"):
            if record.get("action") == "kill":
                report.kills_fired[str(record.get("point"))] += 1
        self.workers.restart_dead()
        for code in self.workers.exits:
            report.worker_exits["SIGKILL" if code == -9 else f"exit {code}"] += 1
        if self.metrics is not None:
            self.metrics.exporter.poll()  # everything committed so far, then scrape
            report.exported = scrape(self.metrics.port)


_SAMPLE = re.compile(r"^(toolsafe_[a-z_]+)(\{[^}]*\})? ([0-9.eE+-]+)$")


def scrape(port: int) -> dict[str, float]:
    """A few figures from the exporter's /metrics, summed over tools (empty when it does
    not answer)."""
    try:
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=30).text
    except httpx.HTTPError:
        return {}
    wanted = {
        'toolsafe_steps{state="succeeded"}': "steps succeeded",
        'toolsafe_unknown_outcomes_resolved_total{resolution="committed"}': "found committed",
        "toolsafe_counts_up": "counts up",
    }
    found: dict[str, float] = {}
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if match is None:
            continue
        labels = ",".join(
            part
            for part in (match.group(2) or "").strip("{}").split(",")
            if part and not part.startswith("tool=")
        )
        key = match.group(1) + (f"{{{labels}}}" if labels else "")
        if key in wanted:
            found[wanted[key]] = found.get(wanted[key], 0.0) + float(match.group(3))
    return found


def _interrupt(signum: int, _frame: object) -> None:
    # SIGTERM unwinds like Ctrl-C, so the workers, beat and downstream are stopped too.
    raise KeyboardInterrupt(f"signal {signum}")


def _resources(
    config: ChaosConfig, workdir: Path, stack: contextlib.ExitStack
) -> tuple[ChaosConfig, RedisServer | None]:
    """The broker and database the run uses: a Redis server of its own when it restarts
    the broker, else the one given or a free db on the local Redis; the database given
    or a new one on the local PostgreSQL (dropped afterwards)."""
    server: RedisServer | None = None
    broker, database, keep = config.broker, config.database, config.keep_keys
    if config.size.redis_restarts:
        if broker is not None:
            raise HarnessError(
                "--redis-restarts restarts a Redis server of the run's own; leave out --broker"
            )
        server = RedisServer(workdir)
        server.start()
        stack.callback(server.stop)
        broker = server.url(1)
    elif broker is None:
        broker = stack.enter_context(redis_db_of_its_own(config.local_redis))
        keep = (*keep, REDIS_LOCK_KEY)
    if database is None:
        database = stack.enter_context(database_of_its_own(config.pg_admin))
    return replace(config, broker=broker, database=database, keep_keys=keep), server


def run(config: ChaosConfig) -> ChaosReport:
    """The whole chaos run; the report says whether the invariant held and no worker
    exited unless the run killed it."""
    if config.broker is not None:
        check_broker(config.broker)
    if config.workers < 1:
        raise ValueError("need at least one worker")
    workdir = config.workdir or Path(tempfile.mkdtemp(prefix="toolsafe-chaos-"))
    workdir.mkdir(parents=True, exist_ok=True)
    with contextlib.ExitStack() as stack:
        config, server = _resources(config, workdir, stack)
        chaos = _Run(config, workdir, server)
        previous = signal.signal(signal.SIGTERM, _interrupt)
        try:
            chaos.start()
            chaos.perform()
            observed = chaos.settle()
            chaos.conclude(observed)
        finally:
            signal.signal(signal.SIGTERM, previous)
            chaos.stop()
        write_json(workdir / "report.json", chaos.report.json())
        return chaos.report


def write_json(path: Path, data: Any) -> None:
    """Write ``data`` as JSON atomically: a reader never sees half a report."""
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(json.dumps(data, indent=2, sort_keys=True), encoding="utf-8")
    os.replace(temporary, path)
