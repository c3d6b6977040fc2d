"""The store-wide metrics for Prometheus, from one exporter process (``toolsafe metrics``).

The exporter reads the event log once from the start, then every ``poll_interval`` only
the events committed since (``toolsafe.metrics.follower``), folding each into counters
(``toolsafe.metrics.tally``). A scrape renders those counters and asks the broker for its
queue lengths: its cost does not grow with the steps table. The figures are store-wide,
so run one exporter per store and scrape that one; workers serve none (summing their
figures across instances would count every step once per worker). docs/operations.md
lists every metric.

``read_counts`` is the whole-table computation that ``toolsafe stats`` and the chaos
report print (docs/counts.md): exact per step, and linear in the table.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from typing import Any

from celery.signals import worker_ready
from prometheus_client import CollectorRegistry, generate_latest, start_http_server
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from toolsafe.celeryconfig import QUEUES
from toolsafe.metrics.follower import EventFollower
from toolsafe.metrics.queues import QueueDepth
from toolsafe.metrics.tally import DURATION_BUCKETS, Histogram, Tally
from toolsafe.recovery.counts import Counts, compute_counts
from toolsafe.recovery.states import StepState
from toolsafe.recovery.store import StorePort
from toolsafe.recovery.store.tally import TallyPort
from toolsafe.settings import Settings

log = logging.getLogger("toolsafe.metrics")


def read_counts(store: StorePort, prefix: str | None = None) -> Counts:
    """Every count of docs/counts.md over the store (or the operation_refs starting with
    ``prefix``), recomputed from all steps and events (``StorePort.count_sources``)."""
    sources = store.count_sources(prefix)
    return compute_counts(sources.steps, sources.events)


def _counter(name: str, doc: str, labels: Sequence[str], values: dict[Any, int]) -> Metric:
    family = CounterMetricFamily(name, doc, labels=list(labels))
    for key, value in sorted(values.items()):
        family.add_metric(list(key) if isinstance(key, tuple) else [key], value)
    return family


def _histogram(name: str, doc: str, per_tool: dict[str, Histogram]) -> Metric:
    family = HistogramMetricFamily(name, doc, labels=["tool"])
    for tool, histogram in sorted(per_tool.items()):
        family.add_metric([tool], histogram.cumulative(), sum_value=histogram.total)
    return family


def tally_families(tally: Tally) -> Iterator[Metric]:
    """The folded figures as Prometheus metric families."""
    tools = sorted({tool for tool, _ in tally.steps} | set(tally.submitted))
    steps = GaugeMetricFamily(
        "toolsafe_steps", "Steps by tool and current state.", labels=["tool", "state"]
    )
    for tool in tools:
        for state in StepState:
            steps.add_metric([tool, state.value], tally.steps.get((tool, state.value), 0))
    yield steps
    yield GaugeMetricFamily(
        "toolsafe_unknown_outcomes_open",
        "Unknown outcomes still being verified (steps in verifying).",
        value=sum(n for (_, state), n in tally.steps.items() if state == "verifying"),
    )
    yield _counter(
        "toolsafe_steps_submitted", "Steps submitted, by tool.", ["tool"], dict(tally.submitted)
    )
    yield _counter(
        "toolsafe_executions",
        "Executions claimed (moves into in_flight), by tool.",
        ["tool"],
        dict(tally.executions),
    )
    yield _counter(
        "toolsafe_steps_finished",
        "Moves into a terminal state, by tool and state (an operator's resolution of an "
        "escalated step counts again under its new state).",
        ["tool", "state"],
        dict(tally.finished),
    )
    yield _counter(
        "toolsafe_unknown_outcomes_resolved",
        "Unknown outcomes closed, by how: found committed, found absent, escalated, cancelled.",
        ["tool", "resolution"],
        dict(tally.unknown_resolved),
    )
    yield _counter(
        "toolsafe_lookups",
        "Verification lookups by result: found, absent, inconclusive, escalated.",
        ["tool", "result"],
        dict(tally.lookups),
    )
    yield _counter(
        "toolsafe_escalations",
        "Moves into escalated, by tool and reason.",
        ["tool", "reason"],
        dict(tally.escalations),
    )
    yield _counter(
        "toolsafe_duplicate_writes_prevented",
        "Writes a blind executor would have sent again: refused executions, redeliveries "
        "with nothing to do, verifications that found the write committed.",
        ["kind", "reason"],
        dict(tally.prevented),
    )
    yield _histogram(
        "toolsafe_step_duration_seconds",
        "Seconds from submission to each move into a terminal state.",
        tally.duration,
    )
    yield _histogram(
        "toolsafe_recovery_wait_seconds",
        "Seconds an unknown outcome waited: from entering verifying to leaving it.",
        tally.recovery_wait,
    )


class Exporter(Collector):
    """The follower, its polling thread, and the collector a registry scrapes."""

    def __init__(
        self,
        tally: TallyPort,
        *,
        queues: QueueDepth | None = None,
        poll_interval: float = 1.0,
        gap_timeout: float = 60.0,
    ) -> None:
        self.tally = tally
        self.queues = queues
        self.poll_interval = poll_interval
        self.follower = EventFollower(
            tally.events_after,
            history=lambda before: tally.history(
                datetime.fromtimestamp(before, UTC), DURATION_BUCKETS
            ),
            gap_timeout=gap_timeout,
        )
        self.caught_up = threading.Event()  # set after the first poll that worked
        self.healthy = False
        self.last_poll_seconds = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self)

    @classmethod
    def from_settings(cls, settings: Settings, tally: TallyPort) -> Exporter:
        return cls(
            tally,
            queues=QueueDepth(settings.broker.url, QUEUES),
            poll_interval=settings.metrics.poll_interval,
            gap_timeout=settings.metrics.gap_timeout,
        )

    def poll(self) -> int:
        """Fold what committed since the last poll (the first one reads the whole log)."""
        started = time.perf_counter()
        try:
            folded = self.follower.poll()
        except Exception:
            self.healthy = False
            raise
        self.last_poll_seconds = time.perf_counter() - started
        self.healthy = True
        self.caught_up.set()
        return folded

    def _loop(self) -> None:
        failed = 0  # polls failed in a row: one line when an outage starts, one when it ends
        while not self._stop.is_set():
            try:
                self.poll()
            except Exception as error:
                # The database is down or restarting: the gauge says so; try again.
                if not failed:
                    log.warning(
                        "event log unreadable (retrying every %.1fs): %s",
                        self.poll_interval,
                        first_line(error),
                        extra={"event": "metrics_failed"},
                    )
                failed += 1
            else:
                if failed:
                    log.warning(
                        "event log readable again after %d failed polls",
                        failed,
                        extra={"event": "metrics_recovered"},
                    )
                failed = 0
            self._stop.wait(self.poll_interval)

    def start(self) -> Exporter:
        self._thread = threading.Thread(target=self._loop, name="toolsafe-metrics", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        if self.queues is not None:
            self.queues.close()

    def collect(self) -> Iterator[Metric]:
        up = self.healthy and self.caught_up.is_set()
        yield GaugeMetricFamily(
            "toolsafe_counts_up",
            "1 when the event log was read at the last poll and the figures are complete.",
            value=1 if up else 0,
        )
        follower = self.follower
        with follower.lock:
            tally = _copy(follower.tally)
            position, awaited, abandoned = (
                follower.position,
                len(follower.awaited),
                follower.abandoned,
            )
        yield GaugeMetricFamily(
            "toolsafe_metrics_last_event_id", "The highest event id folded.", value=position
        )
        yield GaugeMetricFamily(
            "toolsafe_metrics_awaited_events",
            "Event ids skipped over whose transaction may still commit.",
            value=awaited,
        )
        yield CounterMetricFamily(
            "toolsafe_metrics_event_gaps_abandoned",
            "Event ids awaited for TOOLSAFE_METRICS_GAP_SECONDS and given up (rolled back).",
            value=abandoned,
        )
        yield GaugeMetricFamily(
            "toolsafe_metrics_poll_seconds", "How long the last poll took.", self.last_poll_seconds
        )
        if up:
            yield from tally_families(tally)
        yield from self._queue_families()

    def _queue_families(self) -> Iterator[Metric]:
        if self.queues is None or not self.queues.readable:
            return
        try:
            depths = self.queues.depths()
        except Exception:
            log.warning("queue depth unavailable", extra={"event": "metrics_queues_failed"})
            depths = None
        yield GaugeMetricFamily(
            "toolsafe_queue_up",
            "1 when the broker's queue lengths could be read.",
            value=0 if depths is None else 1,
        )
        if depths is not None:
            family = GaugeMetricFamily(
                "toolsafe_queue_messages", "Messages waiting in a broker queue.", labels=["queue"]
            )
            for queue, n in depths.items():
                family.add_metric([queue], n)
            yield family

    def text(self) -> str:
        return generate_latest(self.registry).decode("utf-8")


def _copy(tally: Tally) -> Tally:
    """A snapshot to render outside the follower's lock (a few dozen label sets)."""
    return Tally(
        steps=tally.steps.copy(),
        submitted=tally.submitted.copy(),
        executions=tally.executions.copy(),
        finished=tally.finished.copy(),
        unknown_resolved=tally.unknown_resolved.copy(),
        lookups=tally.lookups.copy(),
        escalations=tally.escalations.copy(),
        prevented=tally.prevented.copy(),
        duration={
            tool: Histogram(h.bounds, list(h.counts), h.total) for tool, h in tally.duration.items()
        },
        recovery_wait={
            tool: Histogram(h.bounds, list(h.counts), h.total)
            for tool, h in tally.recovery_wait.items()
        },
        events=tally.events,
    )


def metrics_address(settings: Settings) -> tuple[str, int] | None:
    """``(address, port)`` from ``TOOLSAFE_METRICS_ADDRESS`` / ``_PORT``; None when off."""
    if settings.metrics.port is None:
        return None
    return settings.metrics.address, settings.metrics.port


class Served:
    """An exporter with its HTTP server; ``port`` is the bound port."""

    def __init__(self, exporter: Exporter, address: str, port: int) -> None:
        self.exporter = exporter
        self.server, self.thread = start_http_server(port, addr=address, registry=exporter.registry)
        self.port: int = self.server.server_port

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)
        self.exporter.stop()


def first_line(error: BaseException) -> str:
    """An error in one line: its type and the first line of its message (libpq's errors
    about a multi-host URL span one line per host)."""
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__


def serve(exporter: Exporter, address: str = "127.0.0.1", port: int = 0) -> Served:
    """Start ``exporter`` polling and serve its ``/metrics`` from daemon threads."""
    exporter.start()
    return Served(exporter, address, port)


def exposition(tally: TallyPort, settings: Settings | None = None) -> str:
    """The metrics as Prometheus text, read now from the whole log (``toolsafe stats
    --prometheus``: what ``toolsafe metrics`` serves)."""
    queues = None if settings is None else QueueDepth(settings.broker.url, QUEUES)
    exporter = Exporter(tally, queues=queues)
    try:
        exporter.poll()
    except Exception:
        log.exception("event log unreadable", extra={"event": "metrics_failed"})
    try:
        return exporter.text()
    finally:
        exporter.stop()


def install(target: Any) -> None:
    """Workers serve no store-wide figures: one set per worker would be summed into
    multiples. A worker given ``TOOLSAFE_METRICS_PORT`` says where they moved."""

    settings: Settings = target.settings

    def warn(sender: Any = None, **_: Any) -> None:
        if sender is None or id(getattr(sender, "app", None)) != id(target):
            return
        if settings.metrics.port is not None:
            log.warning(
                "TOOLSAFE_METRICS_PORT is for `toolsafe metrics` (one exporter per store); "
                "workers serve no /metrics",
                extra={"event": "metrics_not_served"},
            )

    worker_ready.connect(warn, weak=False, dispatch_uid=f"toolsafe-metrics-{id(target)}")
