"""What the status page reads: steps by state with filters, counted and paged by keyset,
at a cost that does not grow with the table (``docs/status-page.md``).

Counts stop at :data:`COUNT_CAP` per state (an index range of at most that many
entries), so the overview of 10^6 steps costs what one of 10^4 does; a page is the next
``limit`` ids below a cursor, read from the ``(state, id)`` or ``(tool, state, id)``
index (migration ``0004_status_page``). On PostgreSQL those indexes leave ``in_flight``
out (migration ``0008_fewer_index_entries``): its steps, as many as run at once, are
read from ``ix_steps_in_flight``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from sqlalchemy import (
    BindParameter,
    ColumnElement,
    Engine,
    Executable,
    Select,
    and_,
    bindparam,
    func,
    literal,
    or_,
    select,
    union_all,
)

from toolsafe.recovery.db import READ_ONLY, with_db_retry
from toolsafe.recovery.records import StepRecord, step_record
from toolsafe.recovery.schema import steps
from toolsafe.recovery.states import StepState
from toolsafe.recovery.store.overview import COUNT_CAP, MAX_PAGE, SPARSE, Count, StepFilter

__all__ = ["Overview", "conditions", "prefix_condition", "state_condition"]


def conditions(where: StepFilter, dialect: str) -> list[ColumnElement[bool]]:
    """The filter's tool and prefix as conditions on ``steps`` (its states are the
    caller's to apply)."""
    found: list[ColumnElement[bool]] = []
    if where.tool:
        found.append(steps.c.tool == where.tool)
    if where.prefix:
        found.append(prefix_condition(where.prefix, dialect))
    return found


def prefix_condition(prefix: str, dialect: str) -> ColumnElement[bool]:
    """``operation_ref`` starts with ``prefix``, in a form an index serves.

    PostgreSQL: ``LIKE 'prefix%'`` with the pattern inlined (a bound parameter would let
    a cached generic plan ignore the index), read from ``ix_steps_state_operation_ref``
    (``varchar_pattern_ops``, right under any collation). SQLite: the byte range
    ``[prefix, prefix+1)``, which its BINARY-collated unique index serves.
    """
    column = steps.c.operation_ref
    if dialect == "postgresql":
        escaped = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        pattern: BindParameter[str] = bindparam(
            "ref_prefix", escaped + "%", unique=True, literal_execute=True
        )
        return column.like(pattern, escape="\\")
    last = ord(prefix[-1])
    if last >= 0x10FFFF:
        return column.startswith(prefix, autoescape=True)
    return and_(column >= prefix, column < prefix[:-1] + chr(last + 1))


def _apart(states: Iterable[StepState]) -> list[list[StepState]]:
    """``states`` in the groups one index range each serves: ``in_flight`` (its own
    small partial index on PostgreSQL) apart from the rest."""
    chosen = sorted(StepState(state) for state in states)
    rest: list[StepState] = [state for state in chosen if state != StepState.IN_FLIGHT]
    in_flight: list[StepState] = [state for state in chosen if state == StepState.IN_FLIGHT]
    return [group for group in (rest, in_flight) if group]


def _one_of(states: list[StepState]) -> ColumnElement[bool]:
    values = [state.value for state in states]
    if len(values) == 1:
        return steps.c.state == bindparam(None, values[0], unique=True, literal_execute=True)
    return steps.c.state.in_(bindparam(None, values, expanding=True, literal_execute=True))


def state_condition(states: Iterable[StepState]) -> ColumnElement[bool]:
    """``state`` is one of ``states``, in a form the indexes serve: the values inlined
    (PostgreSQL matches a query to a partial index only when its plan sees them, as the
    sweeper's do), and ``in_flight`` in a term of its own, since the page's indexes
    leave it out on PostgreSQL (``schema.Step``; an ``OR`` of the two is read from
    both indexes)."""
    terms = [_one_of(group) for group in _apart(states)]
    return terms[0] if len(terms) == 1 else or_(*terms)


class Overview:
    """Read-only queries over ``steps`` for the status page (one transaction each)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.dialect = engine.dialect.name

    def _read(self, query: Executable) -> list[Any]:
        def attempt() -> list[Any]:
            with self.engine.connect() as conn:
                conn.execution_options(**{READ_ONLY: True})
                with conn.begin():
                    return list(conn.execute(query).all())

        return with_db_retry(attempt)

    def counts(
        self,
        where: StepFilter,
        cap: int = COUNT_CAP,
        states: Iterable[StepState] = tuple(StepState),
    ) -> dict[StepState, Count]:
        """Each state's count under the filter's tool and prefix, capped at ``cap``."""
        parts: list[Select[tuple[str, int]]] = []
        for state in states:
            limited = (
                select(steps.c.id)
                .where(state_condition([state]), *conditions(where, self.dialect))
                .limit(cap + 1)
                .subquery()
            )
            counted = select(func.count()).select_from(limited).scalar_subquery()
            parts.append(select(literal(state.value), counted))
        rows = self._read(parts[0] if len(parts) == 1 else union_all(*parts))
        return {StepState(s): Count(min(int(n), cap), int(n) > cap) for s, n in rows}

    def page(
        self,
        where: StepFilter,
        *,
        before: int | None = None,
        limit: int = 50,
        sizes: Mapping[StepState, Count] | None = None,
    ) -> tuple[list[StepRecord], int | None]:
        """The newest ``limit`` steps under the filter with an id below ``before``, and
        the cursor of the next page (None on the last).

        PostgreSQL cannot read ``state IN (...) ORDER BY id`` from one index, and for a
        filter that matches a few steps among many it would walk the whole primary key
        looking for them. So each state is counted first (up to :data:`SPARSE`, a
        short index range): a state with few matches has them all read from its index
        range and sorted here; a state with many has its newest ids read in id order
        from ``(state, id)`` or ``(tool, state, id)``, where matches come quickly.
        ``sizes``: the counts under the same tool and prefix, when the caller has them.
        """
        limit = max(1, min(limit, MAX_PAGE))
        states = sorted(where.states if where.states is not None else StepState)
        if sizes is None:
            sizes = self.counts(StepFilter(where.tool, where.prefix), SPARSE, states)
        matching = conditions(where, self.dialect)
        if before is not None:
            matching.append(steps.c.id < before)
        many = {state for state in states if sizes[state].capped or sizes[state].value > SPARSE}
        sparse = [state for state in states if sizes[state].value and state not in many]
        dense = [state for state in states if state in many]
        ids: list[int] = []
        if sparse:
            # One index range each: in_flight is not in the others' indexes.
            parts = [
                select(steps.c.id).where(state_condition(group), *matching)
                for group in _apart(sparse)
            ]
            query = parts[0] if len(parts) == 1 else union_all(*parts)
            ids.extend(int(row[0]) for row in self._read(query))
        for state in dense:
            query = select(steps.c.id).where(state_condition([state]), *matching)
            newest = query.order_by(steps.c.id.desc()).limit(limit + 1)
            ids.extend(int(row[0]) for row in self._read(newest))
        chosen = sorted(ids, reverse=True)[: limit + 1]
        if not chosen:
            return [], None
        rows = self._read(select(steps).where(steps.c.id.in_(chosen)).order_by(steps.c.id.desc()))
        found = [step_record(row) for row in rows[:limit]]
        more = len(chosen) > limit
        return found, (found[-1].id if more and found else None)
