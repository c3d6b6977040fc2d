"""Escalation handlers: who hears about a dead-lettered step (R9).

The durable record is the step row in state ``escalated``; these handlers only carry a
notification. A log line always; a webhook when configured; user handlers named by
import path in ``TOOLSAFE_ESCALATION_HANDLERS`` (``package.module:function``).

Delivery is at least once: the notice is an outbox row written with the escalation, and
the sweeper sends it again until one run of every handler succeeded. A handler can see
the same notice more than once; ``notice.dedup_key`` is the same every time (and new for
each escalation of a step), so a handler that must act once keeps the keys it has seen.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any, cast

import httpx

from toolsafe.recovery.store import EventRecord, StepRecord
from toolsafe.settings import Settings, import_object
from toolsafe.tasks.views import HistoryEntry, history, safe_envelope

log = logging.getLogger("toolsafe.escalation")


@dataclass(frozen=True)
class EscalationNotice:
    """The redacted view of an escalated step that handlers receive."""

    operation_ref: str
    # The same on every re-send of this escalation: handlers drop repeats by it.
    dedup_key: str
    tool: str
    reason: str | None
    state: str
    commit_state: str | None
    attempts: int
    max_attempts: int
    escalated_at: datetime
    envelope: dict[str, Any] | None
    history: tuple[HistoryEntry, ...]

    @classmethod
    def from_step(
        cls, step: StepRecord, events: Sequence[EventRecord], dedup_key: str
    ) -> EscalationNotice:
        return cls(
            operation_ref=step.operation_ref,
            dedup_key=dedup_key,
            tool=step.tool,
            reason=step.reason,
            state=str(step.state),
            commit_state=step.commit_state,
            attempts=step.attempts,
            max_attempts=step.max_attempts,
            escalated_at=step.updated_at,
            envelope=safe_envelope(step.last_envelope),
            history=history(events),
        )

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["escalated_at"] = self.escalated_at.isoformat()
        data["history"] = [{**asdict(entry), "at": entry.at.isoformat()} for entry in self.history]
        return data


Handler = Callable[[EscalationNotice], None]


def log_handler(notice: EscalationNotice) -> None:
    log.warning(
        "step %s escalated: %s",
        notice.operation_ref,
        notice.reason,
        extra={
            "event": "step_escalated",
            "operation_ref": notice.operation_ref,
            "tool": notice.tool,
            "reason": notice.reason,
        },
    )


class WebhookHandler:
    """POSTs the notice as JSON with its dedup key as ``Idempotency-Key``; a non-2xx
    answer is an error the task logs, and the notice is sent again later.

    One HTTP client per process, made at the first notice (a pool process forked from
    the worker makes its own), so a burst of escalations reuses its connections."""

    def __init__(self, url: str, timeout: float) -> None:
        self.url = url
        self.timeout = timeout
        self._lock = threading.Lock()
        self._client: tuple[int, httpx.Client] | None = None  # (the pid it belongs to, it)

    def _http(self) -> httpx.Client:
        pid = os.getpid()
        with self._lock:
            if self._client is None or self._client[0] != pid:
                self._client = (pid, httpx.Client(timeout=self.timeout))
            return self._client[1]

    def close(self) -> None:
        """Close this process's client (the next notice opens another)."""
        with self._lock:
            held, self._client = self._client, None
        if held is not None and held[0] == os.getpid():
            held[1].close()

    def __call__(self, notice: EscalationNotice) -> None:
        response = self._http().post(
            self.url, json=notice.as_dict(), headers={"Idempotency-Key": notice.dedup_key}
        )
        response.raise_for_status()


def import_handler(path: str) -> Handler:
    """``package.module:function`` → the handler (a path that does not resolve names
    ``TOOLSAFE_ESCALATION_HANDLERS``)."""
    # Checked to be callable; that it takes a notice is the handler author's promise.
    return cast(Handler, import_object(path, "TOOLSAFE_ESCALATION_HANDLERS"))


def load_handlers(settings: Settings) -> list[tuple[str, Handler]]:
    """(name, handler) in the order they run: log, webhook, then the user's."""
    handlers: list[tuple[str, Handler]] = [("log", log_handler)]
    if settings.escalation.webhook_url:
        handlers.append(
            (
                "webhook",
                WebhookHandler(
                    settings.escalation.webhook_url, settings.escalation.webhook_timeout
                ),
            )
        )
    handlers.extend((path, import_handler(path)) for path in settings.escalation.handlers)
    return handlers


def notify(handlers: Sequence[tuple[str, Handler]], notice: EscalationNotice) -> list[str]:
    """Run every handler; one failing does not stop the others. Returns the failed names."""
    failed = []
    for name, handler in handlers:
        try:
            handler(notice)
        except Exception as error:
            failed.append(name)
            log.error(
                "escalation handler %s failed: %s",
                name,
                type(error).__name__,
                extra={
                    "event": "escalation_handler_failed",
                    "operation_ref": notice.operation_ref,
                    "handler": name,
                },
            )
    return failed
