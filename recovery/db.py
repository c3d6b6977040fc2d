"""Engines for the step store (PostgreSQL via psycopg 3, SQLite in WAL mode), the
programmatic Alembic upgrade, and the infrastructure retry for dropped connections."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import time
import weakref
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from importlib import resources
from pathlib import Path
from typing import Any, Final, TypeVar

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import URL, Connection, make_url
from sqlalchemy.exc import DBAPIError, InvalidatePoolError

from toolsafe.recovery.store.errors import FeatureMissing

log = logging.getLogger(__name__)

T = TypeVar("T")

SQLITE_BUSY_TIMEOUT_MS: Final = 30_000
DATABASES: Final = frozenset({"postgresql", "sqlite"})
# libpq's bounds on a connection cut off by the network (docs/operations.md): a new one
# gives up after connect_timeout; an idle one is probed by TCP keepalives; one whose sent
# data goes unacknowledged is dropped after tcp_user_timeout (ms). A parameter named in
# the URL's query wins.
POSTGRES_NETWORK_BOUNDS: Final = {
    "connect_timeout": 10,
    "keepalives": 1,
    "keepalives_idle": 10,
    "keepalives_interval": 5,
    "keepalives_count": 3,
    "tcp_user_timeout": 30_000,
}
IDLE_TRANSACTION_TIMEOUT: Final = 30.0
"""Seconds PostgreSQL keeps a transaction of toolsafe's open while its client says
nothing (``idle_in_transaction_session_timeout``, set on each connection): a worker
stopped or cut off mid-transaction then loses its session, and the rows it locked are
free again, instead of being locked until the server notices the dead connection (the
sweeper skips locked rows). No transaction of the runtime waits on anything but the
database between its statements."""
READ_ONLY: Final = "toolsafe_read_only"
"""Execution option: an SQLite transaction that only reads starts with a plain BEGIN."""
PG_DEFAULT_PORT: Final = 5432
READ_ONLY_SQL_TRANSACTION: Final = "25006"
"""SQLSTATE of a write on a server that takes no writes (a standby, a demoted primary)."""

_AUTHORITY = re.compile(r"^(?P<scheme>[^:/?#]+://)(?P<authority>[^/?#]*)(?P<rest>.*)$", re.S)


def multi_host_query(url: str) -> str:
    """libpq's multi-host form, ``postgresql://user@h1:5432,h2:5433/db``, rewritten in
    a query form SQLAlchemy parses: ``postgresql://user@/db?host=h1,h2&port=5432,5433``
    (a host without a port gets PostgreSQL's 5432; ``[IPv6]`` loses its brackets, as
    libpq's ``host`` wants it). Any other URL is returned as it is."""
    match = _AUTHORITY.match(url)
    if match is None:
        return url
    userinfo, at, authority = match["authority"].rpartition("@")
    if "," not in authority:
        return url
    hosts, ports = [], []
    for entry in authority.split(","):
        host, colon, port = entry.rpartition(":")
        if not colon or not (port.isdigit() or port == ""):  # no port, or a bare [IPv6]
            host, port = entry, ""
        hosts.append(host.removeprefix("[").removesuffix("]"))
        ports.append(port or str(PG_DEFAULT_PORT))
    path, _, query = match["rest"].partition("?")
    pairs = f"host={','.join(hosts)}&port={','.join(ports)}"
    return f"{match['scheme']}{userinfo}{at}{path or '/'}?{pairs}{'&' + query if query else ''}"


def normalize_url(url: str | URL) -> URL:
    """``postgresql://`` and ``postgres://`` mean psycopg 3; everything else is kept. A
    libpq multi-host URL (``h1:5432,h2:5433``) becomes SQLAlchemy's query form. A
    store URL that names no database (``memory://``) raises ``FeatureMissing``: there
    is no schema to migrate, no engine to make."""
    if isinstance(url, str) and url.startswith("postgres://"):
        url = "postgresql://" + url.removeprefix("postgres://")
    if isinstance(url, str):
        url = multi_host_query(url)
    parsed = make_url(url)
    if parsed.get_backend_name() not in DATABASES:
        raise FeatureMissing(parsed.get_backend_name(), "migrations")
    if parsed.drivername == "postgresql":
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed


def make_engine(
    url: str | URL,
    *,
    idle_transaction_timeout: float | None = IDLE_TRANSACTION_TIMEOUT,
    **kwargs: Any,
) -> Engine:
    """An engine for this process: ``pool_pre_ping`` (a ping on checkout, skipped inside
    ``unpinged()``), its pool dropped in forked children, and on PostgreSQL
    ``POSTGRES_NETWORK_BOUNDS`` (a partition ends in an error, not a hang) and
    ``idle_transaction_timeout`` (:data:`IDLE_TRANSACTION_TIMEOUT`; None: the server's
    own, as for migrations; an ``options`` query parameter naming
    ``idle_in_transaction_session_timeout`` in the URL wins).

    SQLite gets WAL, a busy timeout and ``BEGIN IMMEDIATE`` for write transactions, so
    several worker processes can share one file without "database is locked" failures
    halfway through a transaction.
    """
    parsed = normalize_url(url)
    # The ping is ours (``_ping_on_checkout``), so that an operation may go without it.
    pre_ping = bool(kwargs.pop("pool_pre_ping", True))
    busy_timeout_ms = SQLITE_BUSY_TIMEOUT_MS
    if parsed.get_backend_name() == "postgresql":
        connect_args = kwargs.setdefault("connect_args", {})
        for name, value in POSTGRES_NETWORK_BOUNDS.items():
            if name not in parsed.query:
                connect_args.setdefault(name, value)
    if parsed.get_backend_name() == "sqlite":
        connect_args = kwargs.setdefault("connect_args", {})
        connect_args.setdefault("timeout", SQLITE_BUSY_TIMEOUT_MS / 1000)
        busy_timeout_ms = int(connect_args["timeout"] * 1000)
    engine = create_engine(parsed, **kwargs)
    if pre_ping:
        _ping_on_checkout(engine)
    if engine.dialect.name == "sqlite":
        _configure_sqlite(engine, busy_timeout_ms)
    if engine.dialect.name == "postgresql":
        _read_only_is_disconnect(engine)
        chosen = "idle_in_transaction_session_timeout" in str(parsed.query.get("options", ""))
        if idle_transaction_timeout is not None and not chosen:
            _bound_idle_transactions(engine, idle_transaction_timeout)
    _dispose_after_fork(engine)
    return engine


_UNPINGED: ContextVar[bool] = ContextVar("toolsafe_unpinged", default=False)
_FRESH: Final = "toolsafe_fresh"


@contextlib.contextmanager
def unpinged() -> Iterator[None]:
    """Connections checked out inside (this thread) are not pinged first: for an
    operation that ``with_db_retry`` runs again when its connection turns out dead. A
    connection that died while pooled fails the operation's first statement, which then
    wrote nothing; SQLAlchemy invalidates the pool and the retry gets a new connection.
    One round trip less (the submit's hot path, ``StepStore.submit``)."""
    token = _UNPINGED.set(True)
    try:
        yield
    finally:
        _UNPINGED.reset(token)


def _ping_on_checkout(engine: Engine) -> None:
    """SQLAlchemy's ``pool_pre_ping``, as a checkout listener: a pooled connection is
    pinged before it is handed out (not one just opened), and a dead one makes the pool
    open a new one and drop every connection older than it; inside ``unpinged()`` no
    ping."""
    dialect = engine.dialect

    @event.listens_for(engine, "connect")
    def _opened(_dbapi_connection: Any, record: Any) -> None:
        record.info[_FRESH] = True

    @event.listens_for(engine, "checkout")
    def _ping(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        if record.info.pop(_FRESH, False) or _UNPINGED.get():
            return
        try:
            dialect.do_ping(dbapi_connection)
        except dialect.loaded_dbapi.Error as error:
            if dialect.is_disconnect(error, dbapi_connection, None):
                raise InvalidatePoolError(f"the ping found the connection lost: {error}") from error
            raise


def _configure_sqlite(engine: Engine, busy_timeout_ms: int) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Take transaction control away from the sqlite3 module, so that BEGIN is ours.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        try:
            if engine.url.database not in (None, "", ":memory:"):
                cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute(f"PRAGMA busy_timeout={busy_timeout_ms}")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.execute("PRAGMA synchronous=NORMAL")
        finally:
            cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Connection) -> None:
        # IMMEDIATE takes the write lock up front: a read-then-write transaction can
        # then never fail with SQLITE_BUSY at its first write.
        if connection.get_execution_options().get(READ_ONLY):
            connection.exec_driver_sql("BEGIN")
        else:
            connection.exec_driver_sql("BEGIN IMMEDIATE")


def _read_only_is_disconnect(engine: Engine) -> None:
    """A connection that finds itself on a server that takes no writes (a standby, or a
    primary demoted by a failover) is dropped like a lost one: the pool opens a new one,
    which ``target_session_attrs=read-write`` sends to the new primary."""

    @event.listens_for(engine, "handle_error")
    def _on_error(context: Any) -> None:
        orig = context.original_exception
        if getattr(orig, "sqlstate", None) == READ_ONLY_SQL_TRANSACTION:
            context.is_disconnect = True


def _bound_idle_transactions(engine: Engine, seconds: float) -> None:
    """Each new connection's ``idle_in_transaction_session_timeout`` (a ``SET``, not a
    startup option, so that poolers that refuse ``options`` still connect)."""
    milliseconds = max(int(seconds * 1000), 1)

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        autocommit = dbapi_connection.autocommit
        dbapi_connection.autocommit = True
        try:
            dbapi_connection.execute(f"SET idle_in_transaction_session_timeout = {milliseconds}")
        finally:
            dbapi_connection.autocommit = autocommit


def libpq_conninfo(url: str | URL) -> str:
    """The libpq connection string psycopg is given for a PostgreSQL store URL, hosts and
    all (a multi-host URL keeps every host and ``target_session_attrs``): for a
    connection of its own, such as the change feed's listener."""
    from psycopg.conninfo import make_conninfo

    parsed = normalize_url(url)
    dialect = parsed.get_dialect()()
    _, params = dialect.create_connect_args(parsed)
    return make_conninfo("", **{k: str(v) for k, v in params.items() if v is not None})


def _dispose_after_fork(engine: Engine) -> None:
    """A forked child must not reuse the parent's sockets: drop the inherited pool
    without closing the parent's connections (SQLAlchemy's documented fork recipe)."""
    ref = weakref.ref(engine)

    def _in_child() -> None:
        alive = ref()
        if alive is not None:
            alive.dispose(close=False)

    os.register_at_fork(after_in_child=_in_child)


# ------------------------------------------------------------------ infrastructure retry


def is_disconnect(error: BaseException) -> bool:
    """A dropped or refused connection (not a constraint, not a bug in a statement)."""
    return isinstance(error, DBAPIError) and bool(error.connection_invalidated)


def schema_missing(error: BaseException) -> bool:
    """The database answered, but without toolsafe's tables (never migrated): SQLite's
    "no such table", PostgreSQL's "relation ... does not exist"."""
    orig = error.orig if isinstance(error, DBAPIError) else error
    text = str(orig).lower()
    return "no such table" in text or ("does not exist" in text and "relation" in text)


def with_db_retry(
    operation: Callable[[], T],
    *,
    attempts: int = 3,
    delay: float = 0.2,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """Run ``operation`` again when the database connection dropped under it.

    This is an infrastructure retry, unrelated to a step's business attempts: each
    store operation is one transaction and idempotent, so re-running it after a
    disconnect either repeats a rolled-back transaction or finds its effect.
    """
    for attempt in range(1, attempts + 1):
        try:
            return operation()
        except DBAPIError as error:
            if not is_disconnect(error) or attempt == attempts:
                raise
            log.warning(
                "database connection lost; retrying",
                extra={"event": "db_retry", "attempt": attempt},
            )
            sleep(delay * attempt)
    raise AssertionError("unreachable")  # pragma: no cover


# ------------------------------------------------------------------ migrations


def migrations_path() -> Path:
    return Path(str(resources.files("toolsafe.recovery") / "migrations"))


def alembic_config(url: str | URL) -> Any:
    """An Alembic ``Config`` for the packaged migrations; no alembic.ini needed."""
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(migrations_path()))
    config.attributes["toolsafe_url"] = normalize_url(url)
    return config


def migrate(url: str | URL, revision: str = "head") -> None:
    """Create or upgrade the schema (``toolsafe migrate``)."""
    from alembic import command

    command.upgrade(alembic_config(url), revision)


def migrate_and_report(url: str | URL) -> list[str]:
    """``migrate`` to the head, and the tables it created (empty: it created none)."""
    from sqlalchemy import inspect

    engine = make_engine(url)
    try:
        before = set(inspect(engine).get_table_names())
        migrate(url)
        after = set(inspect(engine).get_table_names())
    finally:
        engine.dispose()
    return sorted(after - before - {"alembic_version"})
