"""The Celery app factory, the four tasks, and the publisher of follow-up hints.

``create_app(settings)`` builds an independent app (tests build several in one
process); ``default_app()`` is the process's own, built from the environment on first
use (``celery -A toolsafe`` reaches it through ``toolsafe.worker``).
"""

from __future__ import annotations

import logging
import random
import sys
import threading
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from celery import Celery
from celery.signals import (
    after_setup_logger,
    after_setup_task_logger,
    beat_init,
    worker_init,
    worker_process_init,
    worker_ready,
    worker_shutdown,
)
from kombu.exceptions import ChannelError

from toolsafe import tracing
from toolsafe.adapters.errors import ToolsafeError
from toolsafe.adapters.redaction import install_log_guard
from toolsafe.celeryconfig import (
    ESCALATE_TASK,
    EXECUTE_QUEUE,
    EXECUTE_TASK,
    RECOVERY_QUEUE,
    SWEEP_TASK,
    VERIFY_QUEUE,
    VERIFY_TASK,
    build_config,
    task_limits,
)
from toolsafe.settings import Settings
from toolsafe.tasks import pipeline, sweeper
from toolsafe.tasks.broker_watch import RedisBrokerWatch, pooled_connection
from toolsafe.tasks.clock import Clock
from toolsafe.tasks.escalation import Handler, load_handlers
from toolsafe.tasks.follow_up import StepReport
from toolsafe.tasks.liveness import Heartbeat
from toolsafe.tasks.logs import JsonFormatter
from toolsafe.tasks.relay import HintRelay
from toolsafe.tasks.release import ReleaseTimer
from toolsafe.tasks.runtime import Runtime, reset_after_fork
from toolsafe.tasks.worker_lost import ChildWatcher, LeaseAwareRequest, pool_nudge

log = logging.getLogger("toolsafe.app")


def monitored(tool: str | None) -> dict[str, str]:
    """The message's ``kwargsrepr``, which Flower and the worker's log show as the task's
    kwargs: the step's tool beside the operation_ref in ``args``, so a tool is searchable
    in Flower. The task takes no keyword argument; it reads the step."""
    return {} if tool is None else {"kwargsrepr": repr({"tool": tool})}


# Broker commands buffered before a batch of hints is flushed (two per hint: the
# message and its task-sent event).
_PUBLISH_BATCH = 200


def buffers(channel: Any) -> bool:
    """Whether kombu's ``Producer.batch`` buffers on this channel (Redis: one pipeline
    per batch) rather than publishing each message at once."""
    return getattr(channel, "create_publish_batch", None) is not None and bool(
        getattr(channel, "supports_batch_publish", True)
    )


class Publisher:
    """Publishes hints; an ETA only up to ``max_eta`` (R6), jittered so retries spread.
    A longer delay is not published: the release timer sends it later (``release``).

    Due times and ``now`` are the database's (``tasks/clock.py``), but Celery compares an
    ETA with the consuming worker's own clock: the ETA goes out on this process's clock
    at the best estimate (``clock.local_eta``; later only by what a slow measurement's
    uncertainty exceeds half the early allowance, ``settings.calls.early_wait``:
    ``clock.eta_margin``). A consumer whose measured offset is off this one's runs the
    hint that much early or late: early within the clocks' uncertainty, the claim is
    refused with the due time and the worker waits out the rest before claiming again
    (``tasks/early.py``); early by more, the claim does nothing (R6) and the sweeper
    sends the hint again once it is due; late is only late."""

    def __init__(self, app: Any, settings: Settings, clock: Clock | None = None) -> None:
        self.app = app
        self.settings = settings
        self.clock = clock
        self._early_wait = timedelta(seconds=settings.calls.early_wait)
        # Seeded by the OS on every call: forked workers must not jitter in lockstep.
        self._rng: random.Random = random.SystemRandom()
        # The sweeper's view of what the broker lost (a marker key in the broker's db).
        self.watch = RedisBrokerWatch(app)

    def eta_for(self, due_at: datetime | None, now: datetime) -> tuple[bool, datetime | None]:
        """(publish now?, eta): due → no ETA; within ``max_eta`` → ETA; beyond → not
        now: the delay stays parked in the store until the release timer sends it."""
        if due_at is None or due_at <= now:
            return True, None
        wait = (due_at - now).total_seconds()
        if wait > self.settings.broker.max_eta:
            return False, None
        jitter = self._rng.uniform(0, self.settings.broker.eta_jitter)
        jitter = min(jitter, self.settings.broker.max_eta - wait)
        return True, due_at + timedelta(seconds=jitter)

    def _send(
        self,
        task: str,
        operation_ref: str,
        due_at: datetime | None,
        now: datetime,
        tool: str | None,
        queue: str | None = None,
    ) -> bool:
        publish, eta = self.eta_for(due_at, now)
        if eta is not None and self.clock is not None:
            eta = self.clock.local_eta(eta, self._early_wait)
        if publish:
            # The publisher's trace context rides in the message's headers (docs/tracing.md);
            # queue None: the task's own route (celeryconfig.ROUTES).
            carried = tracing.headers()
            extra: dict[str, Any] = {"headers": carried} if carried else {}
            if queue is not None:
                extra["queue"] = queue
            self.app.send_task(task, args=(operation_ref,), eta=eta, **monitored(tool), **extra)
        return publish

    def execute(
        self,
        operation_ref: str,
        due_at: datetime | None,
        now: datetime,
        *,
        tool: str | None = None,
        recovery: bool = False,
    ) -> bool:
        """The execute hint; ``recovery`` (a step waiting to retry: a retry at its
        ``not_before``, a re-execution a lookup proved safe) goes out in the recovery
        lane (``RECOVERY_QUEUE``) instead of behind new submissions."""
        queue = RECOVERY_QUEUE if recovery else None
        return self._send(EXECUTE_TASK, operation_ref, due_at, now, tool, queue)

    def verify(
        self, operation_ref: str, due_at: datetime | None, now: datetime, *, tool: str | None = None
    ) -> bool:
        return self._send(VERIFY_TASK, operation_ref, due_at, now, tool)

    def execute_many(
        self,
        steps: Sequence[tuple[str, str]],
        carried: Sequence[Mapping[str, str]] | None = None,
    ) -> None:
        """The hints of many steps due now (a batch submission, each step as its
        operation_ref and tool): one producer, and on
        Redis one pipeline per ``_PUBLISH_BATCH`` commands (kombu's ``Producer.batch``)
        instead of a round trip per message. ``BatchPublishError`` when the broker
        failed under a batch: which of its hints went out is unknown (R7 covers both).
        ``carried``: each step's trace context (its submitter's), else the current one.

        A transport that buffers the batch (Redis) publishes without kombu's retry: a
        buffered message goes nowhere until the flush, so the retry's wrapper around
        each one (``Connection.ensure``, and the queue's cached declare through it) only
        cost CPU (about a tenth of the gateway's GIL time under 32 concurrent agents);
        the flush is what can fail. A transport that sends each message at once keeps the retry."""
        current = tracing.headers() if carried is None else {}
        with self.app.producer_or_acquire() as producer, producer.batch(_PUBLISH_BATCH):
            once: dict[str, Any] = {"retry": False} if buffers(producer.channel) else {}
            for index, (operation_ref, tool) in enumerate(steps):
                headers = carried[index] if carried is not None else current
                extra: dict[str, Any] = {"headers": dict(headers)} if headers else {}
                self.app.send_task(
                    EXECUTE_TASK,
                    args=(operation_ref,),
                    producer=producer,
                    **monitored(tool),
                    **once,
                    **extra,
                )

    def escalation(self, operation_ref: str, *, tool: str | None = None) -> None:
        carried = tracing.headers()
        extra: dict[str, Any] = {"headers": carried} if carried else {}
        self.app.send_task(ESCALATE_TASK, args=(operation_ref,), **monitored(tool), **extra)

    def backlog(self) -> int | None:
        """Hints waiting in the execute and verify queues; None when the broker can't say."""
        try:
            # A pool still exhausted leaves the count unknown, as a broker down does.
            with pooled_connection(self.app) as connection:
                channel = connection.default_channel
                total = 0
                for queue in (EXECUTE_QUEUE, VERIFY_QUEUE):
                    try:
                        declared = channel.queue_declare(queue=queue, passive=True)
                    except ChannelError:
                        continue  # the queue does not exist (yet): nothing waits in it
                    total += int(declared.message_count)
                return total
        except Exception as error:  # the sweep must run even when the count fails
            log.warning(
                "cannot read the queue backlog: %s",
                type(error).__name__,
                extra={"event": "backlog_unknown"},
            )
            return None


class ToolsafeApp(Celery):  # type: ignore[misc]
    """A Celery app that knows its toolsafe runtime and publisher."""

    runtime: Runtime
    publisher: Publisher

    def __init__(self, settings: Settings, main: str = "toolsafe") -> None:
        super().__init__(main, set_as_current=False)
        self.conf.update(build_config(settings))
        self.runtime = Runtime(settings)
        self.publisher = Publisher(self, settings, self.runtime.clock)
        self._handlers: list[tuple[str, Handler]] | None = None
        self.release_timer: ReleaseTimer | None = None  # in beat's process only
        self.heartbeat: Heartbeat | None = None  # in a worker's main process only
        self.relay: HintRelay | None = None  # there too, with TOOLSAFE_SUBMIT_HINTS=relay

    @property
    def settings(self) -> Settings:
        return self.runtime.settings

    def escalation_handlers(self) -> list[tuple[str, Handler]]:
        if self._handlers is None:
            self._handlers = load_handlers(self.settings)
        return self._handlers


def _register_tasks(app: ToolsafeApp) -> None:
    limits = task_limits(app.settings)
    runtime = app.runtime
    publisher = app.publisher

    def options(name: str) -> dict[str, Any]:
        soft, hard = limits[name]
        return {
            "name": name,
            "shared": False,
            "acks_late": True,
            "reject_on_worker_lost": True,
            "ignore_result": True,
            "soft_time_limit": soft,
            "time_limit": hard,
            # In the main process: a dead pool child's leases go to verification at once.
            "Request": LeaseAwareRequest,
        }

    # A task's result is what became of the step (its new state, not_before when it
    # waits), which Flower shows; the task-succeeded event carries it, no backend stores it.
    @app.task(**options(EXECUTE_TASK))  # type: ignore[untyped-decorator]
    def execute(operation_ref: str) -> dict[str, str]:
        report = StepReport(operation_ref)
        with tracing.consumed(execute.request, EXECUTE_TASK, operation_ref):
            pipeline.execute(runtime, publisher, operation_ref, report)
        return report.result()

    @app.task(**options(VERIFY_TASK))  # type: ignore[untyped-decorator]
    def verify(operation_ref: str) -> dict[str, str]:
        report = StepReport(operation_ref)
        with tracing.consumed(verify.request, VERIFY_TASK, operation_ref):
            pipeline.verify(runtime, publisher, operation_ref, report)
        return report.result()

    @app.task(**options(ESCALATE_TASK))  # type: ignore[untyped-decorator]
    def escalate(operation_ref: str) -> str:
        with tracing.consumed(escalate.request, ESCALATE_TASK, operation_ref):
            return pipeline.escalate(runtime, app.escalation_handlers(), operation_ref)

    # Sweeps run every few seconds: they send no task events, so they never drown the
    # tool calls in Flower's task list (beat sends no task-sent event either, see
    # create_app); their work shows in the log (event "sweep") and in the metrics.
    @app.task(**options(SWEEP_TASK), send_events=False)  # type: ignore[untyped-decorator]
    def sweep() -> dict[str, int]:
        return sweeper.sweep(runtime, publisher, publisher.backlog, publisher.watch)


def create_app(settings: Settings | None = None, main: str = "toolsafe") -> ToolsafeApp:
    """A new app with its own settings, runtime and tasks."""
    app = ToolsafeApp(settings if settings is not None else Settings.from_env(), main)
    _register_tasks(app)
    if app.settings.log_json:
        after_setup_logger.connect(_json_logs, weak=False)
    # The worker's own handlers (its log file or stderr) carry adapter and task logs:
    # every record is redacted before any of them writes it (docs/redaction.md).
    after_setup_logger.connect(_guard_logs, weak=False, dispatch_uid="toolsafe-log-guard")
    after_setup_task_logger.connect(_guard_logs, weak=False, dispatch_uid="toolsafe-task-log-guard")

    def check_before_start(sender: Any = None, **_: Any) -> None:
        # Fail at start, not at the first task: adapters and handlers must import.
        if getattr(sender, "app", None) is not app:
            return
        try:
            app.runtime.registry  # noqa: B018 - loading is the check
            app.escalation_handlers()
        except ToolsafeError as error:
            # Celery logs and swallows a receiver's Exception; SystemExit stops the worker,
            # with the exit code of bad settings.
            sys.stderr.write(f"toolsafe: cannot start the worker: {error}\n")
            sys.stderr.flush()
            raise SystemExit(2) from error

    worker_init.connect(check_before_start, weak=False, dispatch_uid=f"toolsafe-check-{id(app)}")

    def watch_children(sender: Any = None, **_: Any) -> None:
        # The main process, once its pool runs: a dead child's leases → R4 at once.
        if getattr(sender, "app", None) is app:
            ChildWatcher(app, replace_child=pool_nudge(sender)).start()

    worker_ready.connect(watch_children, weak=False, dispatch_uid=f"toolsafe-watch-{id(app)}")

    def beat_heartbeat(sender: Any = None, **_: Any) -> None:
        # The store learns that this node consumes (before it logs "ready.").
        if getattr(sender, "app", None) is app:
            queues = sorted(app.amqp.queues.consume_from or app.amqp.queues)
            app.heartbeat = Heartbeat.of(app.runtime, sender.hostname, queues)
            if app.heartbeat is not None:
                app.heartbeat.start()

    def end_heartbeat(sender: Any = None, **_: Any) -> None:
        if getattr(sender, "app", None) is app and app.heartbeat is not None:
            app.heartbeat.stop()
            app.heartbeat = None

    worker_ready.connect(beat_heartbeat, weak=False, dispatch_uid=f"toolsafe-alive-{id(app)}")
    worker_shutdown.connect(end_heartbeat, weak=False, dispatch_uid=f"toolsafe-gone-{id(app)}")

    def start_relay(sender: Any = None, **_: Any) -> None:
        # Submits store their steps unsent: the workers publish the hints (tasks/relay.py).
        if getattr(sender, "app", None) is app and app.settings.store.relays_hints:
            app.relay = HintRelay(app.runtime, app.publisher)
            app.relay.start()

    def stop_relay(sender: Any = None, **_: Any) -> None:
        if getattr(sender, "app", None) is app and app.relay is not None:
            app.relay.stop()
            app.relay = None

    worker_ready.connect(start_relay, weak=False, dispatch_uid=f"toolsafe-relay-{id(app)}")
    worker_shutdown.connect(stop_relay, weak=False, dispatch_uid=f"toolsafe-relay-end-{id(app)}")

    def quiet_beat(sender: Any = None, **_: Any) -> None:
        # Beat publishes sweeps and released delays: no task-sent event for them (Flower
        # would list each sweep as a task; a released hint shows when a worker takes it).
        # The workers' own hints keep theirs. The release timer runs here, beside the
        # schedule of sweeps (tasks/release.py).
        if getattr(sender, "app", None) is app:
            app.conf.task_send_sent_event = False
            app.release_timer = ReleaseTimer(app.runtime, app.publisher)
            app.release_timer.start()

    beat_init.connect(quiet_beat, weak=False, dispatch_uid=f"toolsafe-beat-{id(app)}")
    return app


_default: ToolsafeApp | None = None
_default_lock = threading.Lock()


def default_app(settings: Settings | None = None) -> ToolsafeApp:
    """The process's app, built on first use from ``settings`` (the ones an entry point
    loaded at start) or else from the environment; later calls return the same app. The
    client's default; ``toolsafe.worker.default_app`` adds the operator exporter."""
    global _default
    with _default_lock:
        if _default is None:
            _default = create_app(settings)
            _default.set_current()
        return _default


def _guard_logs(logger: logging.Logger | None = None, **_: Any) -> None:
    install_log_guard(logger)


def _json_logs(logger: logging.Logger | None = None, **_: Any) -> None:
    target = logger or logging.getLogger()
    for handler in target.handlers:
        handler.setFormatter(JsonFormatter())


@worker_process_init.connect(weak=False)  # type: ignore[untyped-decorator]
def _after_fork(**_: Any) -> None:
    # Each prefork child opens its own database engine (DESIGN §8).
    reset_after_fork()
