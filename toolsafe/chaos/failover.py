"""``toolsafe chaos --failovers N``: the run's database is a PostgreSQL primary with a
synchronous streaming standby of the run's own (``toolsafe.harness.replicated``), reached
through one multi-host URL with ``target_session_attrs=read-write``. Each failover kills
the primary at once, leaves the database without a primary for a moment (calls in flight
then cannot record their outcome: R5), promotes the standby and clones a new standby
from it into the dead primary's place, ready for the next failover."""

from __future__ import annotations

import contextlib
from typing import Final

from toolsafe.chaos.report import ChaosReport
from toolsafe.harness.errors import HarnessError
from toolsafe.harness.replicated import ReplicatedPostgres

WITHOUT_PRIMARY: Final = 1.0
"""Seconds between the kill and the promotion: longer than the store's own retry of a
dropped connection (0.2 s + 0.4 s), so an outcome in flight is really not recorded."""
DATABASE: Final = "chaos"


def replicated_database(
    stack: contextlib.ExitStack, given: str | None = None
) -> tuple[str, ReplicatedPostgres]:
    """A started primary + standby, stopped and removed when ``stack`` closes; the
    multi-host URL of a new database on it."""
    if given is not None:
        raise HarnessError(
            "--failovers runs a primary and standby of its own; leave out --database"
        )
    pair = ReplicatedPostgres()
    stack.callback(pair.stop)
    pair.start()
    return pair.create_database(DATABASE), pair


def fail_over(pair: ReplicatedPostgres | None, report: ChaosReport) -> None:
    if pair is None:
        raise ValueError("a failover is scheduled but the run owns no primary and standby")
    away = pair.failover(rebuild=True, down=WITHOUT_PRIMARY)
    report.faults["postgres failover"] += 1
    report.failover_seconds.append(away)
