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

# The envelopes the store tests use, shared (re-exported for the memory-store tests).
from tests.support.recovery.store_support import correct_input as correct_input
from tests.support.recovery.store_support import escalate, retry_later
from tests.support.recovery.store_support import needs_approval as needs_approval
from tests.support.recovery.store_support import unknown as unknown
from toolsafe.adapters.envelope import AnySuccess, ToolError, ToolSuccess, Verification
from toolsafe.adapters.protocol import Adapter, CallContext, LookupResult
from toolsafe.adapters.registry import Registry
from toolsafe.recovery.store.memory import MemoryStore
from toolsafe.recovery.store.memory.backend import memory_backend
from toolsafe.settings import Settings
from toolsafe.tasks.runtime import Runtime

TOOL = "scripted_invoice"
INPUT: dict[str, Any] = {"recipient_email": "a@example.com", "amount": 120}
SETTINGS = Settings()

# A version conflict: the step escalates for a new plan.
conflict = escalate


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

    def execute(
        self, operation_ref: str, due_at: datetime | None, now: datetime, *, tool: str | None = None
    ) -> bool:
        return self._send("execute", operation_ref, due_at, now)

    def verify(
        self, operation_ref: str, due_at: datetime | None, now: datetime, *, tool: str | None = None
    ) -> bool:
        return self._send("verify", operation_ref, due_at, now)

    def escalation(self, operation_ref: str, *, tool: str | None = None) -> None:
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
    return Runtime(settings, backend=memory_backend(store), registry=registry), store


def now() -> datetime:
    return datetime.now(UTC)


# ------------------------------------------------------------------ envelopes


def success(ref: str) -> AnySuccess:
    return ToolSuccess(
        operation_ref=ref,
        result={"invoice_id": "inv_1"},
        verification=Verification(checked_at=now(), evidence_ref="invoice:inv_1"),
    )


def retry_in(seconds: float) -> Script:
    """A rate limit whose not_before is ``seconds`` from when the script answers."""

    def answer(ref: str) -> ToolError:
        return retry_later(ref, now() + timedelta(seconds=seconds))

    return answer
