"""The article's counts from the step store: read for ``toolsafe stats`` and exported as
Prometheus metrics by workers, computed from the database on each scrape.

Why from the database and not per-process counters (prometheus_client's multiprocess
mode): the event log is the one truth every worker process, host and restart shares. A
counter bumped in a worker dies with a SIGKILL between the commit and the increment (or
counts a transition that rolled back), and percentiles of recovery wait cannot be summed
across processes. Every exporter therefore reports the same global figures; see
docs/counts.md for how to scrape them.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, Final

from celery.signals import worker_ready
from prometheus_client import CollectorRegistry, generate_latest, start_http_server
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from toolsafe.recovery.counts import ATTEMPT_BUCKETS, QUANTILES, Counts, compute_counts
from toolsafe.recovery.states import StepState
from toolsafe.recovery.store import StepStore, StorePort
from toolsafe.settings import Settings

log = logging.getLogger("toolsafe.metrics")

BATCH: Final = 5_000


def read_counts(store: StorePort, prefix: str | None = None) -> Counts:
    """Every count over the store (or the operation_refs starting with ``prefix``), from
    the steps and events the store reads in one transaction (``StorePort.count_sources``:
    the event fields the counts need, not the envelopes)."""
    sources = store.count_sources(prefix)
    return compute_counts(sources.steps, sources.events)


def metric_families(counts: Counts) -> Iterator[Metric]:
    """The counts as Prometheus metric families (names in docs/counts.md)."""
    by_state = GaugeMetricFamily("toolsafe_steps", "Steps by current state.", labels=["state"])
    for state in StepState:
        by_state.add_metric([state.value], counts.by_state.get(state.value, 0))
    yield by_state

    v = counts.verification
    resolved = CounterMetricFamily(
        "toolsafe_unknown_outcomes_resolved",
        "Unknown outcomes closed, by how: found committed, found absent, escalated, cancelled.",
        labels=["resolution"],
    )
    for name, value in (
        ("committed", v.committed),
        ("absent", v.absent),
        ("escalated", v.escalated),
        ("cancelled", v.cancelled),
    ):
        resolved.add_metric([name], value)
    yield resolved
    yield GaugeMetricFamily(
        "toolsafe_unknown_outcomes_open", "Unknown outcomes still being verified.", value=v.open
    )

    p = counts.prevented
    prevented = CounterMetricFamily(
        "toolsafe_duplicate_writes_prevented",
        "Writes a blind executor would have sent again: refused executions, redeliveries "
        "with nothing to do, verifications that found the write committed.",
        labels=["kind", "reason"],
    )
    for reason, value in p.refused.items():
        prevented.add_metric(["execution_refused", reason], value)
    for reason, value in p.idle_redeliveries.items():
        prevented.add_metric(["idle_redelivery", reason], value)
    prevented.add_metric(["found_committed", "verification"], p.found_committed)
    yield prevented

    w = counts.recovery_wait
    wait = Metric(
        "toolsafe_recovery_wait_seconds",
        "Seconds from a step's first failure to its terminal state (nearest-rank quantiles).",
        "summary",
    )
    for q in QUANTILES:
        if q in w.quantiles:
            wait.add_sample("toolsafe_recovery_wait_seconds", {"quantile": str(q)}, w.quantiles[q])
    wait.add_sample("toolsafe_recovery_wait_seconds_count", {}, w.count)
    wait.add_sample("toolsafe_recovery_wait_seconds_sum", {}, w.total)
    yield wait

    escalations = GaugeMetricFamily(
        "toolsafe_escalations",
        "Steps whose final state is escalated, by reason.",
        labels=["reason"],
    )
    for reason, value in counts.escalations_by_reason.items():
        escalations.add_metric([reason], value)
    yield escalations

    attempts = HistogramMetricFamily(
        "toolsafe_step_attempts", "Executions claimed per step.", labels=[]
    )
    buckets: list[tuple[str, float]] = []
    for bound in ATTEMPT_BUCKETS:
        buckets.append((str(bound), sum(n for a, n in counts.attempts.items() if a <= bound)))
    buckets.append(("+Inf", counts.steps))
    attempts.add_metric([], buckets, sum_value=counts.attempts_total)
    yield attempts


class CountsCollector(Collector):
    """Computes the counts when scraped, at most once per ``min_interval`` seconds.

    The scan reads every step and event, so a burst of scrapes (several Prometheus
    servers, a dashboard) shares one computation.
    """

    def __init__(
        self,
        store: StorePort,
        min_interval: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.min_interval = min_interval
        self.clock = clock
        self._lock = threading.Lock()
        self._cached: tuple[float, Counts, float] | None = None

    def counts(self) -> tuple[Counts, float]:
        """The counts and how long computing them took (seconds)."""
        with self._lock:
            now = self.clock()
            if self._cached is None or now - self._cached[0] >= self.min_interval:
                started = time.perf_counter()
                counts = read_counts(self.store)
                self._cached = (now, counts, time.perf_counter() - started)
            return self._cached[1], self._cached[2]

    def collect(self) -> Iterator[Metric]:
        try:
            counts, took = self.counts()
        except Exception:
            # A scrape must answer even with the database down; the gauge says so.
            log.exception("counts unavailable", extra={"event": "metrics_failed"})
            yield GaugeMetricFamily(
                "toolsafe_counts_up", "1 when the counts could be read.", value=0
            )
            return
        yield GaugeMetricFamily("toolsafe_counts_up", "1 when the counts could be read.", value=1)
        yield GaugeMetricFamily(
            "toolsafe_counts_compute_seconds", "Time the last computation took.", value=took
        )
        yield from metric_families(counts)


def metrics_address(settings: Settings) -> tuple[str, int] | None:
    """``(address, port)`` from ``TOOLSAFE_METRICS_ADDRESS`` / ``_PORT``; None when off."""
    if settings.metrics_port is None:
        return None
    return settings.metrics_address, settings.metrics_port


def serve(
    store: StorePort, address: str = "127.0.0.1", port: int = 0, min_interval: float = 10.0
) -> tuple[Any, threading.Thread]:
    """Serve ``/metrics`` from a daemon thread; returns (server, thread).

    ``server.server_port`` is the bound port (useful with port 0); ``server.shutdown()``
    stops it.
    """
    registry = CollectorRegistry(auto_describe=False)
    registry.register(CountsCollector(store, min_interval=min_interval))
    server, thread = start_http_server(port, addr=address, registry=registry)
    return server, thread


def exposition(store: StorePort) -> str:
    """The metrics as Prometheus text, computed now (``toolsafe stats --prometheus``)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(CountsCollector(store, min_interval=0.0))
    return generate_latest(registry).decode("utf-8")


def install(target: Any) -> None:
    """Start the exporter in a worker of the ``target`` app once it is ready, when
    ``TOOLSAFE_METRICS_PORT`` is set (in the worker's main process: one per worker)."""

    settings: Settings = target.settings

    def start(sender: Any = None, **_: Any) -> None:
        # Signals are process-wide: answer only for a worker of this app.
        if sender is None or id(getattr(sender, "app", None)) != id(target):
            return
        address = metrics_address(settings)
        if address is None:
            return
        from toolsafe.recovery.db import make_engine

        server, _thread = serve(StepStore(make_engine(settings.database_url)), *address)
        log.info(
            "metrics on http://%s:%s/metrics",
            address[0],
            server.server_port,
            extra={"event": "metrics_serving", "port": server.server_port},
        )

    worker_ready.connect(start, weak=False, dispatch_uid=f"toolsafe-metrics-{id(target)}")
