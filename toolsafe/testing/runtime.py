"""No-I/O doubles for tests of the pipeline and the client: a scripted adapter, a
publisher that records what it was asked to publish, and a runtime over the in-memory
store."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, ClassVar, Final, Literal

from pydantic import BaseModel

from toolsafe.adapters.envelope import AnySuccess, ToolError
from toolsafe.adapters.protocol import Adapter, CallContext, LookupResult
from toolsafe.adapters.registry import Registry
from toolsafe.recovery.store import StorePort, open_store
from toolsafe.settings import Settings
from toolsafe.tasks.runtime import Runtime

SCRIPTED_TOOL: Final = "scripted_invoice"
DEFAULTS: Final = Settings()


class InvoiceInput(BaseModel):
    """The scripted adapter's input."""

    recipient_email: str
    amount: int


Script = Callable[[str], AnySuccess | ToolError]
"""One answer of the scripted adapter: the envelope for the operation_ref it is given."""


class ScriptedAdapter(Adapter[InvoiceInput]):
    """A write adapter with a lookup that answers from a script and remembers every call:
    append to ``answers`` (``Script`` s) and ``lookups`` before the calls they answer."""

    tool: ClassVar[str] = SCRIPTED_TOOL
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
    """One hint the pipeline published: what to do with which step, and when."""

    kind: Literal["execute", "verify", "escalation"]
    operation_ref: str
    due_at: datetime | None = None
    recovery: bool = False  # an execute hint in the recovery lane (a proved-safe re-execution)


@dataclass
class RecordingHints:
    """The pipeline's ``Hints``: records each hint and, like the Celery publisher,
    declines (returns False) one due beyond ``max_eta`` so the sweeper takes it (R6)."""

    max_eta: float = DEFAULTS.broker.max_eta
    sent: list[Hint] = field(default_factory=list)

    def _send(
        self,
        kind: Literal["execute", "verify"],
        ref: str,
        due_at: datetime | None,
        now: datetime,
        recovery: bool = False,
    ) -> bool:
        if due_at is not None and (due_at - now).total_seconds() > self.max_eta:
            return False
        self.sent.append(Hint(kind, ref, due_at, recovery))
        return True

    def execute(
        self,
        operation_ref: str,
        due_at: datetime | None,
        now: datetime,
        *,
        tool: str | None = None,
        recovery: bool = False,
    ) -> bool:
        return self._send("execute", operation_ref, due_at, now, recovery)

    def verify(
        self, operation_ref: str, due_at: datetime | None, now: datetime, *, tool: str | None = None
    ) -> bool:
        return self._send("verify", operation_ref, due_at, now)

    def escalation(self, operation_ref: str, *, tool: str | None = None) -> None:
        self.sent.append(Hint("escalation", operation_ref))

    def execute_many(
        self,
        steps: Sequence[tuple[str, str]],
        carried: Sequence[Mapping[str, str]] | None = None,
    ) -> None:
        """The hints of many steps due now (operation_ref, tool), as the Celery
        publisher's batch (the hint relay publishes through it)."""
        self.sent.extend(Hint("execute", ref) for ref, _tool in steps)

    def take(self) -> list[Hint]:
        """The hints sent since the last ``take``."""
        sent, self.sent = self.sent, []
        return sent


def memory_runtime(
    adapter: Adapter[Any] | Iterable[Adapter[Any]] | None = None, settings: Settings = DEFAULTS
) -> tuple[Runtime, StorePort]:
    """A runtime over a fresh in-memory store, with ``adapter`` (or several) as its tools."""
    registry = Registry()
    adapters = [] if adapter is None else [adapter] if isinstance(adapter, Adapter) else adapter
    for one in adapters:
        registry.register(one)
    backend = open_store("memory://")
    return Runtime(settings, backend=backend, registry=registry), backend.steps
