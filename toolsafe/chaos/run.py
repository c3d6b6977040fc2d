"""``toolsafe chaos``: real workers, beat and the example downstream (naive unless told
otherwise) under a seeded schedule of SIGKILLs, broker flushes and hard restarts,
PostgreSQL connection kills and restarts and duplicate messages; then the invariant
against the downstream's own record, the worker exits nobody planned, and the counts."""

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
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

import httpx

from toolsafe.adapters.errors import ToolsafeError
from toolsafe.celeryconfig import EXECUTE_TASK, VERIFY_TASK
from toolsafe.chaos.checks import StepFacts, check_envelope, check_steps, merged
from toolsafe.chaos.failover import fail_over
from toolsafe.chaos.partition import partition_round
from toolsafe.chaos.plan import (
    Observed,
    Violation,
    build_schedule,
    check_invariant,
    corrected_input,
    scenarios,
    step_input,
)
from toolsafe.chaos.recovery_time import recovered_after, waits_by_scenario
from toolsafe.chaos.report import ChaosConfig, ChaosReport, KillRecovery
from toolsafe.chaos.resources import resources, run_env
from toolsafe.harness import (
    DownstreamProcess,
    Fleet,
    Partition,
    Process,
    WorkerOptions,
    check_broker,
    flush_broker,
    kill_db_connections,
    restart_database,
    start_beat,
    start_worker,
)
from toolsafe.harness.redis_server import RedisServer
from toolsafe.harness.replicated import ReplicatedPostgres
from toolsafe.metrics.exporter import Exporter, Served, serve
from toolsafe.recovery.counts import compute_counts
from toolsafe.recovery.db import migrate
from toolsafe.recovery.states import (
    NEEDS_AGENT,
    NO_OUTCOME_YET,
    TERMINAL,
    WAITING_ON_HUMAN,
    WORK_STATES,
    StepState,
)
from toolsafe.recovery.store import StorePort, open_store
from toolsafe.tasks import faults

log = logging.getLogger("toolsafe.chaos")

# States with an envelope that a worker moves on from (waiting_retry, verifying): their
# envelopes are checked on the way, the end of the run sees only final states.
PASSING = WORK_STATES - NO_OUTCOME_YET


class _Run:
    """One chaos run: owns the processes, the client and the report while it lasts."""

    def __init__(
        self,
        config: ChaosConfig,
        workdir: Path,
        redis_server: RedisServer | None = None,
        pair: ReplicatedPostgres | None = None,
    ) -> None:
        self.config = config
        self.redis_server = redis_server
        self.pair = pair  # --failovers: the run's own primary and standby
        self.workdir = workdir
        self.schedule = build_schedule(
            config.seed, config.size, config.timing, deduplicating=config.deduplicating
        )
        self.prefix = f"chaos-{config.seed}-{uuid.uuid4().hex[:8]}/"
        known = scenarios(config.timing, deduplicating=config.deduplicating)
        self.by_name = {s.name: s for s in known}
        self.report = ChaosReport(
            config, self.schedule, self.prefix, workdir, datetime.now(UTC).replace(microsecond=0)
        )
        assert config.broker is not None and config.database is not None, "resolved by run()"
        self.broker: str = config.broker
        self.database: str = config.database
        self.backend = open_store(self.database)
        self.store: StorePort = self.backend.steps
        self.beat: Process | None = None
        self.env: dict[str, str] = {}
        self.workers: Fleet | None = None
        self.downstream: DownstreamProcess | None = None
        self.client: Any = None
        self.answered: set[tuple[str, str]] = set()
        self.inspected: set[tuple[str, str, str | None]] = set()
        self.passing_violations: list[Violation] = []
        self.metrics: Served | None = None  # the one store-wide exporter
        self.partition: Partition | None = None  # worker0's proxies (--partitions)

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
        self.downstream = DownstreamProcess(
            self.workdir, run_env(config, self.workdir, ""), naive=not config.deduplicating
        )
        env = run_env(config, self.workdir, self.downstream.url)
        if config.metrics:
            self.metrics = serve(Exporter(self.backend.tally, poll_interval=0.2))
        self.workers = Fleet()
        if config.size.partitions:
            self.partition = Partition(self.database, self.broker)
        run_id = self.prefix[6:-1]
        for number in range(config.workers):
            # Solo pool: a SIGKILL at a fault point kills the whole worker; prefork: the
            # pool process running the call, and the live worker replaces it.
            options = WorkerOptions(
                name=f"worker{number}",
                node=f"chaos{number}-{run_id}",
                pool=config.pool,
                concurrency=None if config.pool == "solo" else config.concurrency,
                loglevel="WARNING",
                without=("gossip", "mingle", "heartbeat"),
            )
            proxied = self.partition.env() if self.partition and number == 0 else {}
            self.workers.add(start_worker(options, env={**env, **proxied}, directory=self.workdir))
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
        if self.partition is not None:
            self.partition.close()
        self.backend.close()

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
            elif action.kind == "fail_over":
                fail_over(self.pair, self.report)
            elif action.kind == "kill_db_connections":
                killed = kill_db_connections(self.database)
                self.report.faults["postgres connection-kill round"] += 1
                self.report.faults["postgres connections terminated"] += killed
            elif action.kind == "partition_worker":
                assert self.partition is not None and self.workers is not None
                lease = float(self.env["TOOLSAFE_LEASE_SECONDS"])
                worker = self.workers.processes[0]
                partition_round(
                    self.partition, worker, self.store, self.prefix, lease, self.report.faults
                )
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
        self.inspect_passing(observed)
        return self.observe() if answers else observed

    def inspect_passing(self, observed: Mapping[str, Observed]) -> None:
        """The envelope of each step seen waiting to retry or verifying, checked against
        its state while it is there (the end of the run sees only final states)."""
        for ref, step in observed.items():
            key = (ref, step.state.value, step.commit_state)
            if step.state not in PASSING or key in self.inspected:
                continue
            try:
                record = self.store.get(ref)
            except Exception:  # a connection killed by the run itself: next round
                return
            self.inspected.add(key)
            policy_limit = self.client.runtime.policy_for(record.tool).retry.max_attempts
            facts = StepFacts.of(record, (), policy_limit)
            self.passing_violations.extend(check_envelope(facts))

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
        report.deduplicated = self.downstream.deduplicated()
        verdict = check_invariant(report.submitted, observed, effects)
        report.checked_in_passing = len(self.inspected)
        found = [*self.passing_violations, *check_steps(self.step_facts(observed))]
        report.verdict = merged(verdict, found)
        sources = self.store.count_sources(self.prefix)
        report.counts = compute_counts(sources.steps, sources.events)
        scenario = {self.ref(step.index): step.scenario for step in self.schedule.steps}
        report.recovery_by_scenario = waits_by_scenario(sources, scenario)
        for planned in self.schedule.steps:
            ref = self.ref(planned.index)
            step = observed.get(ref)
            states = report.scenario_states.setdefault(planned.scenario, Counter())
            states[step.state.value if step else "lost"] += 1
        for record in faults.fired(self.workdir / "fired"):
            if record.get("action") == "kill":
                report.kills_fired[str(record.get("point"))] += 1
                ref = str(record.get("operation_ref"))
                if ref in observed:
                    killed_at = datetime.fromtimestamp(float(record["at"]), UTC)
                    waited = recovered_after(killed_at, self.store.events(ref))
                    if waited is not None:
                        point = str(record.get("point"))
                        kill = KillRecovery(point, scenario.get(ref, "?"), waited)
                        report.kills.append(kill)
        self.workers.restart_dead()
        for code in self.workers.exits:
            report.worker_exits["SIGKILL" if code == -9 else f"exit {code}"] += 1
        if self.metrics is not None:
            self.metrics.exporter.poll()  # everything committed so far, then scrape
            report.exported = scrape(self.metrics.port)

    def step_facts(self, observed: Mapping[str, Observed]) -> list[StepFacts]:
        """Each step the store has, with its events and its tool's attempt limit."""
        runtime = self.client.runtime
        facts = []
        for ref in sorted(observed):
            step = self.store.get(ref)
            limit = runtime.policy_for(step.tool).retry.max_attempts
            facts.append(StepFacts.of(step, self.store.events(ref), limit))
        return facts


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
        config, server, pair = resources(config, workdir, stack)
        chaos = _Run(config, workdir, server, pair)
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
