"""The database side of the harness: PostgreSQL faults a run injects on purpose (every
other connection killed, the server restarted) and waiting for the server to answer."""

from __future__ import annotations

import shlex
import subprocess
import time


def _libpq_dsn(database_url: str) -> str:
    from toolsafe.recovery.db import libpq_conninfo

    return libpq_conninfo(database_url)


def kill_db_connections(database_url: str) -> int:
    """``pg_terminate_backend`` every other connection to the URL's database; returns how
    many were terminated."""
    import psycopg

    with psycopg.connect(_libpq_dsn(database_url), autocommit=True, connect_timeout=5) as conn:
        rows = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchall()
    return sum(1 for (killed,) in rows if killed)


def restart_database(command: str, database_url: str, timeout: float = 60.0) -> float:
    """Restart the PostgreSQL server with ``command`` and wait until the URL's database
    answers again; returns the seconds it was away."""
    import psycopg

    dsn = _libpq_dsn(database_url)
    started = time.monotonic()
    subprocess.run(shlex.split(command), check=True, timeout=timeout, capture_output=True)
    while True:
        try:
            with psycopg.connect(dsn, autocommit=True, connect_timeout=2) as conn:
                conn.execute("SELECT 1")
            return time.monotonic() - started
        except psycopg.OperationalError:
            if time.monotonic() - started > timeout:
                raise
            time.sleep(0.2)
