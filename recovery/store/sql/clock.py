"""The SQL backend's ``clock`` feature: the database's own time (the port:
``recovery/store/clock.py``). PostgreSQL answers ``clock_timestamp()`` (the time of the
statement, not of its transaction); SQLite, a file on this machine, answers its
``'now'``, which is this machine's clock, so ``same_host`` is true and the runtime never
asks it."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import Engine, func, select

__all__ = ["SqlClock"]


class SqlClock:
    """The database time of ``engine``'s database."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.same_host = engine.dialect.name == "sqlite"

    def database_time(self) -> datetime:
        if self.engine.dialect.name == "sqlite":
            query = select(func.strftime("%Y-%m-%d %H:%M:%f", "now"))
        else:
            query = select(func.clock_timestamp())
        with self.engine.connect() as connection:
            found = connection.execute(query).scalar_one()
        # SQLite answers text (UTC); PostgreSQL a timestamptz.
        value = datetime.fromisoformat(found) if isinstance(found, str) else found
        if not isinstance(value, datetime):
            raise TypeError(f"the database's time is not a time: {value!r}")
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)
