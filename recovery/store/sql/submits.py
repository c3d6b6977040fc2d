"""The SQL store's submissions (R2): a call's pending step and its ``submitted`` event
committed together, or the stored step of a repeated operation_ref; a batch in one
transaction.

On PostgreSQL a single submit is ONE statement (``ops.insert_step``: the step inserted
``ON CONFLICT DO NOTHING`` and its event appended in the same statement), so it runs on
its own, in autocommit: the statement is its transaction, and the database answers only
once it is committed. The connection is not pinged first (``db.unpinged``): a dead one
fails the statement before it wrote anything and ``with_db_retry`` runs it again. One
round trip instead of four (ping, BEGIN, the statement, COMMIT). SQLite keeps one
transaction around its two statements.
"""

from __future__ import annotations

import functools
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import datetime
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine

from toolsafe.recovery.db import unpinged, with_db_retry
from toolsafe.recovery.policy import Policy
from toolsafe.recovery.records import EventRecord, NewStep, StepRecord, Submitted
from toolsafe.recovery.store.errors import OperationRefConflict
from toolsafe.recovery.store.sql import ops as ops
from toolsafe.recovery.store.sql.batch import insert_steps
from toolsafe.recovery.store.submission import (
    check_repeat,
    checked_batch,
    checked_submission,
    in_batch,
)

__all__ = ["StepSubmits"]

T = TypeVar("T")


class StepSubmits(ABC):
    """``submit`` and ``submit_many`` of the SQL step store, over its ``_write``."""

    engine: Engine

    @abstractmethod
    def _write(self, work: Callable[[Connection], T]) -> T:
        """``work`` in one transaction, run again when the connection dropped."""

    @functools.cached_property
    def _autocommit(self) -> Engine:
        # The same pool; each connection back to the engine's isolation when returned.
        return self.engine.execution_options(isolation_level="AUTOCOMMIT")

    def _write_one_statement(self, work: Callable[[Connection], T]) -> T:
        """``work`` whose write is ONE statement, committed on its own (autocommit), on
        a connection not pinged first; run again when the connection dropped (a dead
        pooled connection fails before anything is written; a statement whose answer
        was lost is found by the repeat as its stored step)."""

        def attempt() -> T:
            with unpinged(), self._autocommit.connect() as conn:
                return work(conn)

        return with_db_retry(attempt)

    def submit(
        self,
        tool: str,
        input: Mapping[str, Any],
        *,
        operation_ref: str | None,
        policy: Policy,
        now: datetime,
        published_at: datetime | None = None,
        digest: str | None = None,
        equivalent_hashes: Collection[str] = (),
        same_input: Callable[[dict[str, Any]], bool] | None = None,
        actor: str | None = None,
    ) -> Submitted:
        """Commit a ``pending`` step due now, with its ``submitted`` event (None when the
        ref existed: the existing step comes back). Idempotent by operation_ref; another
        tool or input under it raises ``OperationRefConflict`` (R2). ``published_at``
        stamps the hint the caller publishes after the commit; a lost one is re-published
        by the sweeper after ``republish_after`` (R7).

        ``input`` is stored as given: the client passes the adapter's canonical form, so
        its hash (``digest``, computed here unless given: secret fields are hashed by the
        caller, who holds the key) decides whether a repeat is the same call;
        ``equivalent_hashes`` are other hashes of the same call (under an older key, or
        of the raw input for steps stored before inputs were canonical); when none
        matches, ``same_input`` may still recognise the stored input (a secret sealed
        under a key whose hash can no longer be computed). ``actor`` (who submitted) goes
        into the ``submitted`` event."""
        ref, stored_hash = checked_submission(tool, input, operation_ref, digest)

        def work(conn: Connection) -> tuple[StepRecord, EventRecord | None]:
            return ops.insert_step(
                conn,
                tool=tool,
                input=input,
                input_hash=stored_hash,
                operation_ref=ref,
                max_attempts=policy.retry.max_attempts,
                now=now,
                published_at=published_at,
                actor=actor,
            )

        if ops.inserts_in_one_statement(self.engine.dialect.name):
            step, event = self._write_one_statement(work)
        else:
            step, event = self._write(work)
        if event is None:
            check_repeat(ref, step, tool, stored_hash, equivalent_hashes, same_input)
        return Submitted(step, event)

    def submit_many(
        self,
        calls: Sequence[NewStep],
        *,
        now: datetime,
        published_at: datetime | None = None,
        actor: str | None = None,
    ) -> list[Submitted]:
        """``submit`` for many calls in ONE transaction, in order: each new step with its
        ``submitted`` event, each repeat as the stored step (no event). The same rules as
        ``submit`` for every call; a refused call (a bad ref or input, a conflict with a
        stored step or an earlier call of the batch) raises with a note naming it, and
        then nothing of the batch is committed."""
        checked = checked_batch(calls)
        if not checked:
            return []

        batch = [(call, ref, digest) for call, (ref, digest) in zip(calls, checked, strict=True)]

        def work(conn: Connection) -> list[Submitted]:
            inserted = insert_steps(conn, batch, now=now, published_at=published_at, actor=actor)
            submitted: list[Submitted] = []
            for index, ((call, ref, digest), (step, event)) in enumerate(
                zip(batch, inserted, strict=True)
            ):
                if event is None:
                    try:
                        check_repeat(
                            ref, step, call.tool, digest, call.equivalent_hashes, call.same_input
                        )
                    except OperationRefConflict as error:
                        in_batch(error, index)
                        raise
                submitted.append(Submitted(step, event))
            return submitted

        # Not on its own: a conflict found after the batch's insert must roll it back.
        return self._write(work)
