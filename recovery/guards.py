"""The claim guards (R3) as one table of rules: each rule names the no-op reason it refuses
with and the conditions on the row that trigger it. The same table answers in Python
(which reason, if any) and compiles to the SQL ``WHERE`` of a claim (claim or not)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, Protocol

from sqlalchemy import ColumnElement, Table, literal_column, or_

from toolsafe.recovery.reasons import (
    NOOP_ATTEMPTS_SPENT,
    NOOP_CLAIMED,
    NOOP_MISSING,
    NOOP_NOT_DUE,
    NOOP_TERMINAL,
    NOOP_UNKNOWN_OUTCOME,
    NOOP_WAITING_ON_HUMAN,
)
from toolsafe.recovery.states import CLAIMABLE, TERMINAL, WAITING_ON_HUMAN, StepState

S = StepState
When = datetime | ColumnElement[Any]
"""``now``: a time in Python, a bound parameter (or a time) in SQL."""


class GuardedRow(Protocol):
    """The columns a guard reads (a SQLAlchemy row or a ``StepRecord``)."""

    @property
    def state(self) -> str: ...
    @property
    def commit_state(self) -> str | None: ...
    @property
    def attempts(self) -> int: ...
    @property
    def max_attempts(self) -> int: ...
    @property
    def due_at(self) -> datetime | None: ...
    @property
    def lease_expires_at(self) -> datetime | None: ...


@dataclass(frozen=True)
class InStates:
    """The row is in one of ``states``; compiles into the guard's one ``state IN (…)``."""

    states: frozenset[StepState]

    def holds(self, row: GuardedRow, now: datetime) -> bool:
        return StepState(row.state) in self.states


@dataclass(frozen=True)
class CommitUnknown:
    """The write may have happened: ``commit_state = 'unknown'``."""

    def holds(self, row: GuardedRow, now: datetime) -> bool:
        return row.commit_state == "unknown"

    def passes(self, table: Table, now: When) -> ColumnElement[bool]:
        column = table.c.commit_state
        return or_(column.is_(None), column != "unknown")


@dataclass(frozen=True)
class AttemptsSpent:
    """No execution left: ``attempts >= max_attempts``."""

    def holds(self, row: GuardedRow, now: datetime) -> bool:
        return row.attempts >= row.max_attempts

    def passes(self, table: Table, now: When) -> ColumnElement[bool]:
        return table.c.attempts < table.c.max_attempts


@dataclass(frozen=True)
class NotDue:
    """``due_at`` is not set, or later than now (an early hint, R6)."""

    def holds(self, row: GuardedRow, now: datetime) -> bool:
        return row.due_at is None or row.due_at > now

    def passes(self, table: Table, now: When) -> ColumnElement[bool]:
        # NULL compares as unknown in SQL: a row without due_at never passes, as above.
        return table.c.due_at <= now


@dataclass(frozen=True)
class LeaseLive:
    """Another worker's lease has not expired yet."""

    def holds(self, row: GuardedRow, now: datetime) -> bool:
        return row.lease_expires_at is not None and row.lease_expires_at > now

    def passes(self, table: Table, now: When) -> ColumnElement[bool]:
        column = table.c.lease_expires_at
        return or_(column.is_(None), column <= now)


ColumnCondition = CommitUnknown | AttemptsSpent | NotDue | LeaseLive
Condition = InStates | ColumnCondition


@dataclass(frozen=True)
class Rule:
    """Refuse with ``reason`` when any of ``when`` holds."""

    reason: str
    when: tuple[Condition, ...]


@dataclass(frozen=True)
class Guard:
    """Rules in order: the first that holds names the no-op reason; none holds, claim."""

    rules: tuple[Rule, ...]

    def refusal(self, row: GuardedRow | None, now: datetime) -> str | None:
        """Why ``row`` may not be claimed at ``now``; ``None`` when it may."""
        if row is None:
            return NOOP_MISSING
        for rule in self.rules:
            if any(condition.holds(row, now) for condition in rule.when):
                return rule.reason
        return None

    def due_later(self, row: GuardedRow | None, now: datetime) -> datetime | None:
        """When ``row``, refused at ``now`` only for not being due yet, would pass: its
        ``due_at``, if no rule refuses it at that time (the row unchanged); else None."""
        if row is None or row.due_at is None or row.due_at <= now:
            return None
        if self.refusal(row, now) != NOOP_NOT_DUE or self.refusal(row, row.due_at) is not None:
            return None
        return row.due_at

    @property
    def states(self) -> frozenset[StepState]:
        """The states no rule refuses outright."""
        refused: set[StepState] = set()
        for rule in self.rules:
            for condition in rule.when:
                if isinstance(condition, InStates):
                    refused |= condition.states
        return frozenset(StepState) - refused

    def where(self, table: Table, now: When) -> Sequence[ColumnElement[bool]]:
        """The guard as ``WHERE`` clauses (ANDed): no rule's condition holds.

        The state conditions become one ``state IN (…)`` of the states left, in the
        lifecycle's order; every other condition contributes its negation.
        """
        # Literals, not an expanding parameter: the statement is rendered once, not
        # again on every execution (the claim runs per step), and reads as its index does.
        allowed: list[ColumnElement[Any]] = [
            literal_column(f"'{state.value}'") for state in StepState if state in self.states
        ]
        clauses: list[ColumnElement[bool]] = [table.c.state.in_(allowed)]
        for rule in self.rules:
            for condition in rule.when:
                if not isinstance(condition, InStates):
                    clauses.append(condition.passes(table, now))
        return clauses


EXECUTION: Final = Guard(
    (
        Rule(NOOP_TERMINAL, (InStates(TERMINAL),)),
        Rule(NOOP_CLAIMED, (InStates(frozenset({S.IN_FLIGHT})),)),
        # `unknown` beats everything: verification first, whatever else the row says.
        Rule(NOOP_UNKNOWN_OUTCOME, (InStates(frozenset({S.VERIFYING})), CommitUnknown())),
        Rule(NOOP_WAITING_ON_HUMAN, (InStates(WAITING_ON_HUMAN),)),
        Rule(NOOP_ATTEMPTS_SPENT, (AttemptsSpent(),)),
        Rule(NOOP_NOT_DUE, (NotDue(),)),
    )
)
"""pending / due waiting_retry → in_flight (R3): SQL on PostgreSQL, Python elsewhere."""

VERIFICATION: Final = Guard(
    (
        Rule(NOOP_TERMINAL, (InStates(TERMINAL),)),
        Rule(NOOP_WAITING_ON_HUMAN, (InStates(WAITING_ON_HUMAN),)),
        Rule(NOOP_CLAIMED, (InStates(frozenset({S.IN_FLIGHT})),)),
        # pending / waiting_retry: nothing to verify (yet).
        Rule(NOOP_NOT_DUE, (InStates(CLAIMABLE),)),
        Rule(NOOP_CLAIMED, (LeaseLive(),)),
        Rule(NOOP_NOT_DUE, (NotDue(),)),
    )
)
"""A due ``verifying`` step with no live lease gets one (the state stays verifying)."""
