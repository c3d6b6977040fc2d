"""The worker's and the client's hot statements, compiled once and run on the driver's
cursor (PostgreSQL): per call only the parameters are bound and one row is read.

SQLAlchemy's own execution costs ~0.1 ms of CPU per statement (execution context, bind
and result processing through the compiled cache, a cursor result with its column
descriptions); for the two statements of a step's execution that is about a tenth of
the worker's CPU per step. What it does that matters is kept: the same SQL and the same
bind and result processors (taken from the compiled statement), the cursor events
(``before_cursor_execute`` / ``after_cursor_execute``), and a driver error raised as
SQLAlchemy raises it, invalidating a dead connection (``with_db_retry`` sees it).
"""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Callable, Mapping
from typing import Any, cast

from sqlalchemy import Connection, Dialect, Executable, Row
from sqlalchemy.sql import ClauseElement


class Compiled:
    """``statement`` compiled for ``dialect``; ``first(conn, parameters)`` runs it inside
    ``conn``'s transaction and returns its first row (attribute access, like a ``Row``)
    or None."""

    def __init__(self, statement: ClauseElement, dialect: Dialect) -> None:
        compiled: Any = statement.compile(dialect=dialect)
        if compiled.literal_execute_params or compiled.post_compile_params:
            raise ValueError("a statement re-rendered per call cannot be compiled once")
        self.sql: str = compiled.string
        # Bound values the statement carries itself (literals in ``values()``, ...), and
        # the names a call must give, as SQLAlchemy requires them.
        binds = compiled.binds
        self._required = frozenset(name for name, bind in binds.items() if bind.required)
        self._defaults = {
            name: value
            for name, value in compiled.construct_params(_check=False).items()
            if name not in self._required
        }
        self._binds: dict[str, Callable[[Any], Any]] = dict(compiled._bind_processors)
        names = [column[0] for column in compiled._result_columns]
        processors = [
            column[3]._cached_result_processor(dialect, None) for column in compiled._result_columns
        ]
        self._convert = [(index, p) for index, p in enumerate(processors) if p is not None]
        # Rows as named tuples: a Row's attribute access, without its result machinery.
        self._make: Callable[[Any], Any] = namedtuple("CompiledRow", names)._make  # type: ignore[attr-defined]

    def parameters(self, given: Mapping[str, Any]) -> dict[str, Any]:
        missing = self._required.difference(given)
        if missing:
            raise ValueError(f"a value is required for {', '.join(sorted(missing))}")
        values = {**self._defaults, **given}
        for name, process in self._binds.items():
            if name in values:
                values[name] = process(values[name])
        return values

    def first(self, conn: Connection, given: Mapping[str, Any]) -> Row[Any] | None:
        try:
            values = self.parameters(given)
        except Exception as error:
            # A value its type refuses (a naive datetime): SQLAlchemy's StatementError.
            conn._handle_dbapi_exception(error, self.sql, dict(given), None, None)
        driver = conn.connection.driver_connection
        if driver is None:  # pragma: no cover - a checked-out connection has its driver's
            raise RuntimeError("the connection has no driver connection")
        events = conn._has_events or conn.engine._has_events
        cursor = driver.cursor()
        try:
            if events:
                conn.dispatch.before_cursor_execute(conn, cursor, self.sql, values, None, False)
            cursor.execute(self.sql, values)
            if events:
                conn.dispatch.after_cursor_execute(conn, cursor, self.sql, values, None, False)
            found = cursor.fetchone()
        except conn.dialect.loaded_dbapi.Error as error:
            # As SQLAlchemy raises it: wrapped (``DBAPIError``), the connection
            # invalidated when it was a disconnect.
            conn._handle_dbapi_exception(error, self.sql, values, cursor, None)
        finally:
            cursor.close()
        return None if found is None else self.row(found)

    def row(self, found: Any) -> Row[Any]:
        """A row as the driver returned it (a tuple), with the statement's result
        processors applied, as SQLAlchemy would give it."""
        if self._convert:
            found = list(found)
            for index, process in self._convert:
                found[index] = process(found[index])
        row: Row[Any] = self._make(found)
        return row


class ThroughSQLAlchemy:
    """The fallback: ``first`` through SQLAlchemy's own execution, as everywhere else."""

    def __init__(self, statement: ClauseElement) -> None:
        self.statement = statement

    def first(self, conn: Connection, given: Mapping[str, Any]) -> Row[Any] | None:
        row: Row[Any] | None = conn.execute(cast(Executable, self.statement), dict(given)).first()
        return row


# What ``Compiled`` reads of SQLAlchemy beyond its public API (checked for 2.0 and 2.1).
_INTERNALS: tuple[tuple[type, str], ...] = (
    (Connection, "_handle_dbapi_exception"),
    (Connection, "_has_events"),
)
_COMPILED: dict[tuple[int, str], Compiled | ThroughSQLAlchemy] = {}


def compiled_for(statement: ClauseElement, dialect: Dialect) -> Compiled | ThroughSQLAlchemy:
    """The statement compiled once per dialect (statements here are module constants).

    ``Compiled`` leans on a few of SQLAlchemy's internals; if a SQLAlchemy release has
    moved them, the statement runs through SQLAlchemy's own execution instead (slower by
    about 0.1 ms of CPU, the same answers), never with a half-working shortcut."""
    key = (id(statement), dialect.name)
    found = _COMPILED.get(key)
    if found is None:
        try:
            if not all(hasattr(owner, name) for owner, name in _INTERNALS):
                raise AttributeError("SQLAlchemy's execution internals moved")
            found = Compiled(statement, dialect)
        except (AttributeError, TypeError, IndexError):
            found = ThroughSQLAlchemy(statement)
        _COMPILED[key] = found
    return found
