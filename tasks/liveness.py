"""The worker's heartbeat in the store: a thread of the main process renews the row of
its node every heartbeat interval and removes it at a warm shutdown, so the gateway
knows whether any worker consumes (the store's ``workers`` feature,
recovery/store/workers.py)."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Sequence
from datetime import datetime

from celery import Celery
from sqlalchemy.exc import SQLAlchemyError

from toolsafe.recovery.store.workers import WorkersPort
from toolsafe.tasks.runtime import Runtime, utcnow
from toolsafe.tasks.worker_lost import fork_guard

log = logging.getLogger("toolsafe.liveness")


class Heartbeat:
    """Renews ``name``'s row every ``interval`` seconds until ``stop()``, stamped by
    ``now`` (the runtime's: the database's clock)."""

    def __init__(
        self,
        registry: WorkersPort,
        name: str,
        queues: Sequence[str],
        interval: float,
        now: Callable[[], datetime] = utcnow,
    ) -> None:
        self.registry = registry
        self.now = now
        self.name = name
        self.queues = tuple(queues)
        self.interval = interval
        self._stopped = threading.Event()
        self._failing = False
        self._thread = threading.Thread(target=self._run, name="toolsafe-heartbeat", daemon=True)

    @classmethod
    def of(cls, runtime: Runtime, name: str, queues: Sequence[str]) -> Heartbeat | None:
        """The heartbeat of a worker on a store with the ``workers`` feature; ``None``
        on another store."""
        backend = runtime.backend
        if not backend.has("workers"):
            return None
        return cls(
            backend.workers, name, queues, runtime.settings.calls.heartbeat_interval, runtime.now
        )

    def start(self) -> Heartbeat:
        self._beat()  # the first one before the worker says it is ready
        self._thread.start()
        return self

    def _beat(self) -> None:
        try:
            with fork_guard():
                self.registry.beat(self.name, os.getpid(), self.queues, now=self.now())
        except SQLAlchemyError as error:
            # One line per outage: the next beat that works says so.
            if not self._failing:
                log.warning(
                    "worker heartbeat failed (the database cannot be reached): %s",
                    type(error).__name__,
                    extra={"event": "heartbeat_failed"},
                )
            self._failing = True
            return
        if self._failing:
            log.info("worker heartbeat renewed", extra={"event": "heartbeat_renewed"})
        self._failing = False

    def _run(self) -> None:
        while not self._stopped.wait(self.interval):
            self._beat()

    def stop(self) -> None:
        """Stop beating and remove the row (a worker that stops consumes no more)."""
        self._stopped.set()
        if self._thread.is_alive():
            self._thread.join(self.interval + 1)
        try:
            with fork_guard():
                self.registry.forget(self.name)
        except SQLAlchemyError:
            log.warning("cannot remove the worker's heartbeat; it expires on its own")


def queue_depths(app: Celery, queues: Sequence[str], timeout: float = 2.0) -> dict[str, int] | None:
    """Messages waiting in each of ``queues`` as the broker counts them (a held ETA
    message on Redis is not among them); ``None`` when the broker cannot be asked."""
    from amqp.exceptions import ChannelError as NoQueue  # type: ignore[import-untyped]
    from kombu.exceptions import KombuError

    depths: dict[str, int] = {}
    try:
        with app.connection_for_read(connect_timeout=timeout) as connection:
            connection.ensure_connection(max_retries=1, timeout=timeout)
            channel = connection.default_channel
            for queue in queues:
                try:
                    _, count, _ = channel.queue_declare(queue=queue, passive=True)
                except NoQueue:
                    count = 0  # never declared: nothing was ever sent to it
                depths[queue] = int(count)
    except (KombuError, OSError, TimeoutError):
        return None
    return depths
