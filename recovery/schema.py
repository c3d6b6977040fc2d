"""The step store's tables as SQLAlchemy 2 models: ``steps``, the append-only
``step_events`` and the ``escalation_outbox``. The Alembic migrations in
``recovery/migrations`` must produce exactly this."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Final, cast

from sqlalchemy import (
    DDL,
    JSON,
    BigInteger,
    CheckConstraint,
    DateTime,
    Dialect,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    TypeDecorator,
    event,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from toolsafe.adapters.envelope import COMMIT_STATES
from toolsafe.recovery.states import DUE_LATER, LEASED, WORK_STATES, StepState
from toolsafe.recovery.store.shared import NOTICE_OUTCOMES


class UTCDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC in, timezone-aware UTC out, on every backend.

    SQLite has no timezone type: values are stored as naive UTC text (which sorts and
    compares correctly) and given back with ``tzinfo=UTC``.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None or value.utcoffset() is None:
            raise ValueError(f"naive datetime {value!r}: the step store needs aware datetimes")
        value = value.astimezone(UTC)
        if dialect.name == "sqlite":
            return value.replace(tzinfo=None)
        return value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


# JSONB on PostgreSQL (indexable, compact), plain JSON text elsewhere.
JSONDocument = JSON().with_variant(JSONB(), "postgresql")
# SQLite only auto-increments an INTEGER PRIMARY KEY.
BigId = BigInteger().with_variant(Integer(), "sqlite")

STATE_VALUES: Final = tuple(state.value for state in StepState)
WORK_STATE_VALUES: Final = tuple(state.value for state in StepState if state in WORK_STATES)
LEASED_STATE_VALUES: Final = tuple(state.value for state in StepState if state in LEASED)


def _in_list(column: str, values: tuple[str, ...]) -> str:
    return f"{column} IN ({', '.join(repr(value) for value in values)})"


STATE_CHECK: Final = _in_list("state", STATE_VALUES)
# The sweeper's queries use these exact literals (not bound parameters), so that
# PostgreSQL can match them to the partial indexes even under a generic plan.
WORK_STATE_PREDICATE: Final = _in_list("state", WORK_STATE_VALUES)
LEASED_STATE_PREDICATE: Final = _in_list("state", LEASED_STATE_VALUES)
# Steps whose due_at is a not_before (DUE_LATER): where a delay is parked until released.
PARKED_STATE_VALUES: Final = tuple(state.value for state in StepState if state in DUE_LATER)
PARKED_STATE_PREDICATE: Final = _in_list("state", PARKED_STATE_VALUES)
# The status page's indexes on PostgreSQL hold every state but in_flight, which has a
# small index of its own (a claim then adds one entry, not three).
LISTED_PREDICATE: Final = f"state <> '{StepState.IN_FLIGHT.value}'"
IN_FLIGHT_PREDICATE: Final = f"state = '{StepState.IN_FLIGHT.value}'"
COMMIT_STATE_CHECK: Final = f"commit_state IS NULL OR {_in_list('commit_state', COMMIT_STATES)}"

NAMING: Final = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)


class Step(Base):
    """One tool call, from submission to a terminal state (the durable truth, R1)."""

    __tablename__ = "steps"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    operation_ref: Mapped[str] = mapped_column(String(200), unique=True)
    tool: Mapped[str] = mapped_column(String(200))
    input: Mapped[dict[str, Any]] = mapped_column(JSONDocument)
    input_hash: Mapped[str] = mapped_column(String(100))
    state: Mapped[str] = mapped_column(String(32))
    commit_state: Mapped[str | None] = mapped_column(String(16))
    attempts: Mapped[int] = mapped_column(Integer, server_default=text("0"))
    max_attempts: Mapped[int] = mapped_column(Integer)
    verification_attempts: Mapped[int] = mapped_column(Integer, server_default=text("0"))
    lookups_unavailable: Mapped[int] = mapped_column(Integer, server_default=text("0"))
    due_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    lease_owner: Mapped[str | None] = mapped_column(String(200))
    lease_expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    last_sent_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    last_envelope: Mapped[dict[str, Any] | None] = mapped_column(JSONDocument)
    fingerprint: Mapped[str | None] = mapped_column(String(255))
    fingerprint_repeats: Mapped[int] = mapped_column(Integer, server_default=text("0"))
    flagged_fields: Mapped[list[str]] = mapped_column(JSONDocument)
    approval_input_hash: Mapped[str | None] = mapped_column(String(100))
    reason: Mapped[str | None] = mapped_column(Text)
    published_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    version: Mapped[int] = mapped_column(Integer, server_default=text("1"))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)

    __table_args__ = (
        CheckConstraint(STATE_CHECK, name="state"),
        CheckConstraint(COMMIT_STATE_CHECK, name="commit_state"),
        CheckConstraint("attempts >= 0 AND attempts <= max_attempts", name="attempts"),
        # The sweeper's two queries: due work, and expired leases. Partial indexes on
        # PostgreSQL stay small however many terminal steps pile up.
        Index(
            "ix_steps_due_work",
            "due_at",
            postgresql_where=text(WORK_STATE_PREDICATE),
        ).ddl_if(dialect="postgresql"),
        # The release timer's query (parked delays by due time): small, as only waiting
        # steps are in it. SQLite reads ix_steps_state_due_at for it.
        Index(
            "ix_steps_parked",
            "due_at",
            postgresql_where=text(PARKED_STATE_PREDICATE),
        ).ddl_if(dialect="postgresql"),
        Index(
            "ix_steps_leases",
            "lease_expires_at",
            postgresql_where=text(LEASED_STATE_PREDICATE),
        ).ddl_if(dialect="postgresql"),
        # The status page (toolsafe.recovery.store.sql.overview): a state's newest steps and
        # its capped count, overall and for one tool, read from an index range. On
        # PostgreSQL they leave in_flight out, so a claim adds no entry to them (a state
        # change is never a HOT update: every index gets an entry for the new version);
        # the steps in flight, as many as run at once, are read from ix_steps_in_flight.
        Index("ix_steps_state_id", "state", "id", postgresql_where=text(LISTED_PREDICATE)),
        Index(
            "ix_steps_tool_state_id",
            "tool",
            "state",
            "id",
            postgresql_where=text(LISTED_PREDICATE),
        ),
        Index(
            "ix_steps_state_operation_ref",
            "state",
            "operation_ref",
            postgresql_ops={"operation_ref": "varchar_pattern_ops"},
            postgresql_where=text(LISTED_PREDICATE),
        ).ddl_if(dialect="postgresql"),
        Index(
            "ix_steps_in_flight",
            "id",
            postgresql_where=text(IN_FLIGHT_PREDICATE),
        ).ddl_if(dialect="postgresql"),
        Index("ix_steps_state_due_at", "state", "due_at").ddl_if(dialect="sqlite"),
        Index("ix_steps_state_lease_expires_at", "state", "lease_expires_at").ddl_if(
            dialect="sqlite"
        ),
    )


class StepEvent(Base):
    """Append-only audit log: one row per change, written in the same transaction (R10)."""

    __tablename__ = "step_events"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    # NULL only for a ``noop`` about an operation_ref that has no step.
    step_id: Mapped[int | None] = mapped_column(BigId, ForeignKey("steps.id"), index=True)
    operation_ref: Mapped[str] = mapped_column(String(200))
    at: Mapped[datetime] = mapped_column(UTCDateTime)
    kind: Mapped[str] = mapped_column(String(32))
    from_state: Mapped[str | None] = mapped_column(String(32))
    to_state: Mapped[str | None] = mapped_column(String(32))
    label: Mapped[str] = mapped_column(String(200))
    detail: Mapped[dict[str, Any]] = mapped_column(JSONDocument)

    __table_args__ = (
        CheckConstraint(
            f"from_state IS NULL OR {_in_list('from_state', STATE_VALUES)}", name="from_state"
        ),
        CheckConstraint(
            f"to_state IS NULL OR {_in_list('to_state', STATE_VALUES)}", name="to_state"
        ),
        Index("ix_step_events_operation_ref_id", "operation_ref", "id"),
    )


OPEN_NOTICE_PREDICATE: Final = "acknowledged_at IS NULL"


class EscalationOutbox(Base):
    """One escalation notice owed to the handlers (R9), written in the transaction that
    escalated the step; re-sent by the sweeper until a handler run acknowledges it."""

    __tablename__ = "escalation_outbox"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    step_id: Mapped[int] = mapped_column(
        BigId, ForeignKey("steps.id", ondelete="CASCADE"), index=True
    )
    operation_ref: Mapped[str] = mapped_column(String(200))
    # Stable across re-sends, new for each escalation of the same step.
    dedup_key: Mapped[str] = mapped_column(String(255), unique=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    # Sent this many times, the last at last_sent_at; the next re-send waits
    # TOOLSAFE_ESCALATION_RESEND_AFTER, doubling with every send.
    sends: Mapped[int] = mapped_column(Integer, server_default=text("1"))
    last_sent_at: Mapped[datetime] = mapped_column(UTCDateTime)
    acknowledged_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    outcome: Mapped[str | None] = mapped_column(String(32))

    __table_args__ = (
        CheckConstraint(
            f"outcome IS NULL OR {_in_list('outcome', NOTICE_OUTCOMES)}", name="outcome"
        ),
        # The sweeper's query reads open notices only: a partial index on PostgreSQL
        # stays small however many delivered ones pile up.
        Index(
            "ix_escalation_outbox_open",
            "last_sent_at",
            postgresql_where=text(OPEN_NOTICE_PREDICATE),
        ).ddl_if(dialect="postgresql"),
        Index(
            "ix_escalation_outbox_acknowledged_at_last_sent_at", "acknowledged_at", "last_sent_at"
        ).ddl_if(dialect="sqlite"),
    )


class ApiKey(Base):
    """A key of the HTTP gateway: only a salted scrypt hash of its secret is kept."""

    __tablename__ = "api_keys"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    # The public half of the token (``tsk_<key_id>_<secret>``), used to find the row.
    key_id: Mapped[str] = mapped_column(String(32), unique=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    scope: Mapped[str] = mapped_column(String(16))
    namespace: Mapped[str | None] = mapped_column(String(100))
    salt: Mapped[str] = mapped_column(String(64))
    secret_hash: Mapped[str] = mapped_column(String(128))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime)

    __table_args__ = (CheckConstraint("scope IN ('agent', 'operator')", name="scope"),)


class WorkerRow(Base):
    """A live ``toolsafe worker``: its heartbeat, renewed every heartbeat interval and
    removed at a warm shutdown (the gateway's honest waits, the status page)."""

    __tablename__ = "workers"

    # Celery's node name (``worker1@host``): one row per node.
    name: Mapped[str] = mapped_column(String(200), primary_key=True)
    pid: Mapped[int] = mapped_column(Integer)
    queues: Mapped[str] = mapped_column(String(400))
    started_at: Mapped[datetime] = mapped_column(UTCDateTime)
    last_seen: Mapped[datetime] = mapped_column(UTCDateTime)


steps = cast(Table, Step.__table__)
step_events = cast(Table, StepEvent.__table__)
escalation_outbox = cast(Table, EscalationOutbox.__table__)
api_keys = cast(Table, ApiKey.__table__)
workers = cast(Table, WorkerRow.__table__)

STEP_CHANNEL: Final = "toolsafe_steps"
"""PostgreSQL channel: every event row notifies its operation_ref, delivered at commit."""
NOTIFY_FUNCTION_DDL: Final = f"""
CREATE OR REPLACE FUNCTION toolsafe_notify_step() RETURNS trigger AS $$
BEGIN
    PERFORM pg_notify('{STEP_CHANNEL}', NEW.operation_ref);
    RETURN NULL;
END;
$$ LANGUAGE plpgsql
"""
NOTIFY_TRIGGER_DDL: Final = (
    "CREATE TRIGGER toolsafe_notify_step AFTER INSERT ON step_events "
    "FOR EACH ROW EXECUTE FUNCTION toolsafe_notify_step()"
)
# A schema made from the models (not the migrations) notifies too.
for _ddl in (NOTIFY_FUNCTION_DDL, NOTIFY_TRIGGER_DDL):
    _statement = DDL(_ddl)  # type: ignore[no-untyped-call]  # SQLAlchemy leaves DDL untyped
    event.listen(step_events, "after_create", _statement.execute_if(dialect="postgresql"))


def include_object(dialect: str) -> Callable[[Any, str | None, str, bool, Any], bool]:
    """Alembic's ``include_object`` for ``dialect``: an index declared for one dialect
    only (``ddl_if``) is not expected in a database of another."""

    def include(obj: Any, name: str | None, type_: str, reflected: bool, compare_to: Any) -> bool:
        if type_ == "index" and not reflected:
            ddl_if = getattr(obj, "_ddl_if", None)
            if ddl_if is not None and ddl_if.dialect not in (None, dialect):
                return False
        return True

    return include
