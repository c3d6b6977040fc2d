"""The SQL backend's ``workers`` feature: the heartbeats in the table ``workers`` (the
port and what a heartbeat is: ``recovery/store/workers.py``)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import Engine, delete, insert, select, update

from toolsafe.recovery.schema import workers
from toolsafe.recovery.store.workers import WorkerBeat

__all__ = ["WorkerRegistry"]


class WorkerRegistry:
    """The heartbeats in the SQL store of ``engine``."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def beat(self, name: str, pid: int, queues: Sequence[str], *, now: datetime) -> None:
        """Renew ``name``'s row, or add it (its start time is the first beat's)."""
        joined = ",".join(queues)[:400]
        with self.engine.begin() as connection:
            renewed = connection.execute(
                update(workers)
                .where(workers.c.name == name)
                .values(pid=pid, queues=joined, last_seen=now)
            ).rowcount
            if not renewed:
                connection.execute(
                    insert(workers).values(
                        name=name, pid=pid, queues=joined, started_at=now, last_seen=now
                    )
                )

    def forget(self, name: str) -> None:
        """Remove ``name``'s row (a warm shutdown)."""
        with self.engine.begin() as connection:
            connection.execute(delete(workers).where(workers.c.name == name))

    def all(self) -> list[WorkerBeat]:
        """Every row, the most recently seen first (dead ones included)."""
        with self.engine.connect() as connection:
            rows = connection.execute(select(workers).order_by(workers.c.last_seen.desc()))
            return [
                WorkerBeat(
                    name=row.name,
                    pid=row.pid,
                    queues=tuple(part for part in row.queues.split(",") if part),
                    started_at=row.started_at,
                    last_seen=row.last_seen,
                )
                for row in rows
            ]

    def live(self, now: datetime, within: float) -> list[WorkerBeat]:
        """The workers renewed within the last ``within`` seconds."""
        return [beat for beat in self.all() if beat.alive(now, within)]
