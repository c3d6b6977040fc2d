"""Alembic environment for the step store: run programmatically by
``toolsafe.recovery.db.migrate``."""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection, text

from toolsafe.recovery.db import make_engine
from toolsafe.recovery.schema import Base, include_object

# An arbitrary constant: concurrent `toolsafe migrate` runs on PostgreSQL take turns.
MIGRATION_LOCK_KEY = 0x70_6F_6F_6C_73_61_66_65

config = context.config
target_metadata = Base.metadata


def run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        include_object=include_object(connection.dialect.name),
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        if connection.dialect.name == "postgresql":
            connection.execute(
                text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK_KEY}
            )
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        run(connection)
        return
    # A migration's transaction may hold its locks while it works between statements.
    engine = make_engine(config.attributes["toolsafe_url"], idle_transaction_timeout=None)
    try:
        with engine.connect() as connection:
            run(connection)
    finally:
        engine.dispose()


if context.is_offline_mode():
    raise SystemExit("toolsafe migrations run online only: use `toolsafe migrate`")
run_migrations_online()
