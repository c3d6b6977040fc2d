"""Fork safety: a forked child gets its own database connections."""

from __future__ import annotations

import os

import pytest
from sqlalchemy import text

from toolsafe.recovery.db import make_engine


@pytest.mark.postgres
def test_a_forked_child_gets_its_own_connections(store_pg_url: str) -> None:
    engine = make_engine(store_pg_url)
    try:
        with engine.connect() as conn:
            parent_pid = conn.execute(text("SELECT pg_backend_pid()")).scalar_one()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - runs in the child
            code = 1
            try:
                with engine.connect() as conn:
                    child_pid = conn.execute(text("SELECT pg_backend_pid()")).scalar_one()
                code = 0 if child_pid != parent_pid else 2
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        with engine.connect() as conn:  # the parent's pooled connection still works
            assert conn.execute(text("SELECT pg_backend_pid()")).scalar_one() == parent_pid
    finally:
        engine.dispose()
