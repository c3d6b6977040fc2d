"""No-I/O doubles for unit tests of the pipeline and the client: a scripted adapter,
a publisher that records what it was asked to publish, and a runtime over the
in-memory store."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar, Literal

from pydantic import BaseModel

from toolsafe.adapters.envelope import AnySuccess, Retry, ToolError, ToolSuccess, Verification
from toolsafe.adapters.protocol import Adapter, CallContext, LookupResult
from toolsafe.adapters.registry import Registry
from toolsafe.recovery.store import MemoryStore
from toolsafe.settings import Settings
from toolsafe.tasks.runtime import Runtime

TOOL = "scripted_invoice"
INPUT: dict[str, Any] = {"recipient_email": "a@example.com", "amount": 120}
SETTINGS = Settings()


class InvoiceInput(BaseModel):
    recipient_email: str
    amount: int


Script = Callable[[str], AnySuccess | ToolError]


class ScriptedAdapter(Adapter[InvoiceInput]):
    """A write adapter that answers from a script and remembers every call it got."""

    tool: ClassVar[str] = TOOL
    writes: ClassVar[bool] = True
    input_model: ClassVar[type[BaseModel]] = InvoiceInput
    has_lookup: ClassVar[bool] = True

    def __init__(self) -> None:
        self.answers: deque[Script] = deque()
        self.lookups: deque[Callable[[], LookupResult]] = deque()
        self.calls: list[tuple[str, InvoiceInput, CallContext]] = []
        self.looked_up: list[str] = []
        self.while_calling: Callable[[], None] | None = None

    def execute(
        self, data: InvoiceInput, operation_ref: str, context: CallContext
    ) -> AnySuccess | ToolError:
        self.calls.append((operation_ref, data, context))
        if self.while_calling is not None:
            self.while_calling()
        return self.answers.popleft()(operation_ref)

    def lookup(self, operation_ref: str) -> LookupResult:
        self.looked_up.append(operation_ref)
        return self.lookups.popleft()()


@dataclass(frozen=True)
class Hint:
    kind: Literal["execute", "verify", "escalation"]
    operation_ref: str
    due_at: datetime | None = None


@dataclass
class RecordingHints:
    """The pipeline's ``Hints``: records each hint and, like the Celery publisher,
    declines (returns False) one due beyond ``max_eta`` so the sweeper takes it (R6)."""

    max_eta: float = SETTINGS.max_eta
    sent: list[Hint] = field(default_factory=list)

    def _send(
        self, kind: Literal["execute", "verify"], ref: str, due_at: datetime | None, now: datetime
    ) -> bool:
        if due_at is not None and (due_at - now).total_seconds() > self.max_eta:
            return False
        self.sent.append(Hint(kind, ref, due_at))
        return True

    def execute(self, operation_ref: str, due_at: datetime | None, now: datetime) -> bool:
        return self._send("execute", operation_ref, due_at, now)

    def verify(self, operation_ref: str, due_at: datetime | None, now: datetime) -> bool:
        return self._send("verify", operation_ref, due_at, now)

    def escalation(self, operation_ref: str) -> None:
        self.sent.append(Hint("escalation", operation_ref))

    def take(self) -> list[Hint]:
        """The hints sent since the last ``take``."""
        sent, self.sent = self.sent, []
        return sent


def memory_runtime(
    adapter: Adapter[Any] | None = None, settings: Settings = SETTINGS
) -> tuple[Runtime, MemoryStore]:
    """A runtime over a fresh in-memory store, with ``adapter`` as its only tool."""
    registry = Registry()
    if adapter is not None:
        registry.register(adapter)
    store = MemoryStore()
    return Runtime(settings, store=store, registry=registry), store


def now() -> datetime:
    return datetime.now(UTC)


# ------------------------------------------------------------------ envelopes


def _error(ref: str, **fields: Any) -> ToolError:
    fields.setdefault("safe_details", {})
    return ToolError(
        operation_ref=ref, agent_message="factual note", user_message="status", **fields
    )


def success(ref: str) -> AnySuccess:
    return ToolSuccess(
        operation_ref=ref,
        result={"invoice_id": "inv_1"},
        verification=Verification(checked_at=now(), evidence_ref="invoice:inv_1"),
    )


def unknown(ref: str) -> ToolError:
    return _error(
        ref,
        code="OUTCOME_UNKNOWN",
        category="dependency",
        commit_state="unknown",
        retry=Retry(directive="never", max_attempts_remaining=0),
        next_action="verify_operation",
    )


def retry_in(seconds: float) -> Script:
    def answer(ref: str) -> ToolError:
        return _error(
            ref,
            code="RATE_LIMITED",
            category="dependency",
            commit_state="not_committed",
            retry=Retry(
                directive="after_delay",
                not_before=now() + timedelta(seconds=seconds),
                max_attempts_remaining=3,
            ),
            next_action="wait_and_retry",
        )

    return answer


def correct_input(ref: str) -> ToolError:
    return _error(
        ref,
        code="INVALID_RECIPIENT_ADDRESS",
        category="validation",
        commit_state="not_committed",
        retry=Retry(directive="after_input_fix", max_attempts_remaining=1),
        next_action="correct_input",
        safe_details={"field": "recipient_email"},
    )


def needs_approval(ref: str) -> ToolError:
    return _error(
        ref,
        code="MISSING_APPROVAL",
        category="authorization",
        commit_state="not_committed",
        retry=Retry(directive="never", max_attempts_remaining=1),
        next_action="request_approval",
    )


def conflict(ref: str) -> ToolError:
    return _error(
        ref,
        code="VERSION_CONFLICT",
        category="conflict",
        commit_state="not_committed",
        retry=Retry(directive="never", max_attempts_remaining=0),
        next_action="escalate",
    )
