"""The escalation outbox of the in-memory store: the same notices, acknowledgements and
re-send schedule as the SQL store's ``sql/outbox.py``, in the tables' dicts and lock."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

from toolsafe.recovery.store.memory.tables import Tables, utc
from toolsafe.recovery.store.shared import OutboxNotice, checked_notice_outcome, resend_delay


class MemoryOutbox:
    """``MemoryStore.outbox``: each call is one transaction of the tables'."""

    def __init__(self, tables: Tables) -> None:
        self._tables = tables

    def notices(self, operation_ref: str, *, open_only: bool = False) -> list[OutboxNotice]:
        """The step's notices, oldest first (only the unacknowledged ones if asked)."""
        with self._tables.transaction():
            return [
                notice
                for _, notice in sorted(self._tables.notices.items())
                if notice.operation_ref == operation_ref and (notice.open or not open_only)
            ]

    def acknowledge(self, notice_id: int, now: datetime, outcome: str = "delivered") -> bool:
        """A handler run took the notice (or it is moot: ``step_moved_on``)."""
        checked_notice_outcome(outcome)
        with self._tables.transaction():
            notice = self._tables.notices.get(notice_id)
            if notice is None or not notice.open:
                return False
            self._tables.notices[notice_id] = replace(
                notice, acknowledged_at=utc(now), outcome=outcome
            )
            return True

    def due(self, now: datetime, limit: int, resend_after: timedelta) -> list[OutboxNotice]:
        """Open notices whose last send is old enough, counted as sent again at ``now``."""
        if resend_after <= timedelta(0):
            raise ValueError("resend_after must be positive, or every sweep re-sends")
        moment = utc(now)
        with self._tables.transaction():
            waiting = sorted(
                (
                    notice
                    for notice in self._tables.notices.values()
                    if notice.open
                    and notice.last_sent_at <= moment - resend_delay(resend_after, notice.sends)
                ),
                key=lambda notice: (notice.last_sent_at, notice.id),
            )[:limit]
            taken = []
            for notice in waiting:
                sent = replace(notice, sends=notice.sends + 1, last_sent_at=moment)
                self._tables.notices[notice.id] = sent
                taken.append(sent)
            return taken
