"""A step and its events read on an event loop (PostgreSQL only): the gateway's view
without a thread hand-off, which cost more CPU than the read itself.

The same statements as the step store's (``statements``: ``BY_REF``, ``EVENTS``,
``EVENTS_WITH_ENVELOPE``), compiled once for the store's own dialect with their bind and
result processors (``compiled.Compiled``), run on psycopg's ``AsyncConnection`` opened
with the same connection parameters (and type adapters) as the store's engine: the same
records come back, so a view built from them is the same, byte for byte. A driver error
is raised as SQLAlchemy raises it (``DBAPIError.instance``), so the gateway answers it
as it answers the store's.

The connections are a small pool of their own, used by one event loop. As the store's
engine promises, a dead connection is replaced on first use: an idle connection the
server closed (its socket readable while nothing was asked) is dropped before use, and a
read that finds its connection lost runs again on a new one (``with_db_retry``'s
attempts and delays); a lost connection drops every idle one with it, as SQLAlchemy's
pool does. Each statement runs in autocommit: a single SELECT is its own transaction,
as the store's ``BEGIN; SELECT; COMMIT`` is, two round trips fewer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import select
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any, Final, TypeVar

from sqlalchemy import Engine, Row
from sqlalchemy.exc import DBAPIError

from toolsafe.recovery.db import POSTGRES_NETWORK_BOUNDS
from toolsafe.recovery.records import EventRecord, StepRecord, event_record, step_record
from toolsafe.recovery.store.errors import FeatureMissing, StepNotFound
from toolsafe.recovery.store.shared import needs_step
from toolsafe.recovery.store.sql import statements as sql
from toolsafe.recovery.store.sql.compiled import Compiled, compiled_for
from toolsafe.recovery.store.submission import valid_operation_ref

if TYPE_CHECKING:
    from psycopg import AsyncConnection

__all__ = ["LoopReads"]

log = logging.getLogger("toolsafe.store")

T = TypeVar("T")

POOL_SIZE: Final = 5
"""Connections at most (SQLAlchemy's default ``pool_size``): reads beyond it wait."""
ATTEMPTS: Final = 3
RETRY_DELAY: Final = 0.2
"""``with_db_retry``'s: a read whose connection was lost runs again, at most 3 times."""
APPLICATION_NAME: Final = "toolsafe-loop-reads"
"""``application_name`` of these connections (operators can find them)."""


def _connect_params(engine: Engine) -> dict[str, Any]:
    """What the engine gives psycopg: hosts, user, database, the URL's query, the type
    adapters; and ``make_engine``'s network bounds unless the URL names them."""
    _, params = engine.dialect.create_connect_args(engine.url)
    for name, value in POSTGRES_NETWORK_BOUNDS.items():
        if name not in engine.url.query:
            params.setdefault(name, value)
    params.setdefault("application_name", APPLICATION_NAME)
    return dict(params)


def _has_input(conn: AsyncConnection[Any]) -> bool:
    """Bytes (or EOF) waiting on an idle connection that asked nothing: the server has
    closed it (a terminated backend, a restart) or said something it did not ask for.
    One system call, no round trip (``poll``: ``select`` refuses descriptors past 1023)."""
    fd = conn.pgconn.socket
    if hasattr(select, "poll"):
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        return bool(poller.poll(0))
    readable, _, _ = select.select([fd], [], [], 0)  # pragma: no cover - Windows
    return bool(readable)


def _compiled(statement: Any, engine: Engine) -> Compiled:
    found = compiled_for(statement, engine.dialect)
    if not isinstance(found, Compiled):
        # SQLAlchemy's internals moved (``compiled.compiled_for``): keep the thread.
        raise FeatureMissing(engine.dialect.name, "loop_reads")
    return found


class LoopReads:
    """``get`` and ``events`` of the step store, awaitable on the event loop that
    first uses them (``LoopReadsPort``); ``FeatureMissing`` when the statements cannot be
    compiled once."""

    def __init__(self, engine: Engine, *, size: int = POOL_SIZE) -> None:
        import psycopg

        self._psycopg = psycopg
        dialect = engine.dialect
        self._dialect = dialect
        self._step = _compiled(sql.BY_REF, engine)
        self._events = _compiled(sql.EVENTS, engine)
        self._events_with_envelope = _compiled(sql.EVENTS_WITH_ENVELOPE, engine)
        self._params = _connect_params(engine)
        self._slots = asyncio.Semaphore(size)
        self._idle: list[AsyncConnection[Any]] = []
        self._closed = False
        self.opened = 0  # connections opened since the start (for tests)

    # ------------------------------------------------------------------ the reads

    async def get(self, operation_ref: str) -> StepRecord:
        """The step (``StepStore.get``); ``StepNotFound`` when there is none."""
        if not valid_operation_ref(operation_ref):
            raise StepNotFound(operation_ref)  # no step can have it: no query needed
        found = await self._run(lambda conn: self._first(conn, self._step, operation_ref))
        if found is None:
            raise StepNotFound(operation_ref)
        return step_record(found)

    async def events(self, operation_ref: str) -> list[EventRecord]:
        """The step's events, oldest first (``StepStore.events``)."""

        async def work(conn: AsyncConnection[Any]) -> list[EventRecord]:
            rows = await self._all(conn, self._events, operation_ref)
            found = [event_record(row) for row in rows]
            if not any(needs_step(event) for event in found):
                return found
            return sql.filled_events(
                await self._all(conn, self._events_with_envelope, operation_ref)
            )

        return await self._run(work)

    async def aclose(self) -> None:
        """Close every connection; one in use is closed when its read ends."""
        self._closed = True
        idle, self._idle = self._idle, []
        for conn in idle:
            await conn.close()

    # ------------------------------------------------------------------ statements

    async def _first(
        self, conn: AsyncConnection[Any], statement: Compiled, ref: str
    ) -> Row[Any] | None:
        async with conn.cursor() as cursor:
            await cursor.execute(statement.sql, statement.parameters({"ref": ref}))
            found = await cursor.fetchone()
        return None if found is None else statement.row(found)

    async def _all(
        self, conn: AsyncConnection[Any], statement: Compiled, ref: str
    ) -> list[Row[Any]]:
        async with conn.cursor() as cursor:
            await cursor.execute(statement.sql, statement.parameters({"ref": ref}))
            found = await cursor.fetchall()
        return [statement.row(row) for row in found]

    # ------------------------------------------------------------------ the pool

    async def _run(self, work: Callable[[AsyncConnection[Any]], Awaitable[T]]) -> T:
        """``work`` on a pooled connection, run again on a new one when the connection
        was lost under it (``with_db_retry``'s rule); a driver error as SQLAlchemy's."""
        attempt = 1
        while True:
            async with self._lease() as conn:
                try:
                    return await work(conn)
                except self._psycopg.Error as error:
                    lost = conn.broken or conn.closed
                    wrapped = self._wrapped(error, lost)
            if lost:
                await self._drop_idle()  # a restart or failover took them too
            if not lost or attempt >= ATTEMPTS:
                raise wrapped
            log.warning(
                "database connection lost; retrying",
                extra={"event": "db_retry", "attempt": attempt},
            )
            await asyncio.sleep(RETRY_DELAY * attempt)
            attempt += 1

    def _wrapped(self, error: Exception, lost: bool) -> BaseException:
        wrapped = DBAPIError.instance(
            None,
            None,
            error,
            self._psycopg.Error,
            connection_invalidated=lost,
            dialect=self._dialect,
        )
        wrapped.__cause__ = error
        return wrapped

    @contextlib.asynccontextmanager
    async def _lease(self) -> AsyncIterator[AsyncConnection[Any]]:
        async with self._slots:
            conn = await self._connection()
            try:
                yield conn
            finally:
                await self._give_back(conn)

    async def _connection(self) -> AsyncConnection[Any]:
        while self._idle:
            conn = self._idle.pop()
            if not _has_input(conn):
                return conn
            await conn.close()  # closed by the server while idle: replaced here
        try:
            conn = await self._psycopg.AsyncConnection.connect(autocommit=True, **self._params)
        except self._psycopg.Error as error:
            raise self._wrapped(error, False) from error
        self.opened += 1
        return conn

    async def _give_back(self, conn: AsyncConnection[Any]) -> None:
        idle = self._psycopg.pq.TransactionStatus.IDLE
        if self._closed or conn.closed or conn.broken or conn.info.transaction_status != idle:
            # Shut down, lost, or left mid-statement (a cancelled read): not reused.
            await conn.close()
        else:
            self._idle.append(conn)

    async def _drop_idle(self) -> None:
        idle, self._idle = self._idle, []
        for conn in idle:
            await conn.close()
