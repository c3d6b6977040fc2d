"""Retention and key rotation, as any backend offers them: :class:`RetentionPort`
(purge terminal steps with their events; re-seal stored secret inputs under the newest
key) and the :class:`PurgeReport` a purge gives (``sql/retention.py`` in batches of
one transaction each)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, Protocol

from toolsafe.recovery.states import TERMINAL, StepState

__all__ = ["PURGEABLE", "PurgeReport", "RetentionPort"]

PURGEABLE: Final = frozenset(TERMINAL - {StepState.ESCALATED})
"""Purged by default: an escalated step is a dead letter an operator has not closed yet."""


@dataclass(frozen=True)
class PurgeReport:
    steps: int
    events: int
    by_state: dict[str, int]
    batches: int
    dry_run: bool


class RetentionPort(Protocol):
    """What ``toolsafe purge`` and ``toolsafe rotate-secrets`` use of a store; a step that
    is not terminal is never touched."""

    def purge(
        self,
        before: datetime,
        *,
        states: Iterable[StepState] = PURGEABLE,
        batch: int = 500,
        dry_run: bool = False,
    ) -> PurgeReport:
        """Delete terminal steps last changed before ``before``, with their events (noops
        about their operation_ref included), ``batch`` steps per transaction."""
        ...

    def reseal_inputs(
        self, rotate: Callable[[dict[str, Any]], dict[str, Any]], *, batch: int = 500
    ) -> int:
        """Re-encrypt every stored sealed input with ``rotate``; the number rewritten."""
        ...
