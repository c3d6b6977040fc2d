"""The in-memory store's tables: steps and events in dicts and lists behind one lock, the
guarded compare-and-set that appends its event (R10), and the undo log that makes each
of ``MemoryStore``'s operations one transaction."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, Final

from toolsafe.recovery.records import ClaimKind, EventRecord, Refused, StepRecord
from toolsafe.recovery.rows import claim_refused, json_ready
from toolsafe.recovery.states import StepState
from toolsafe.recovery.store.shared import Change, OutboxNotice, dedup_key

_TIMES: Final = frozenset(
    {"due_at", "lease_expires_at", "last_sent_at", "published_at", "created_at", "updated_at"}
)
_DOCUMENTS: Final = frozenset({"input", "last_envelope"})


def utc(value: datetime) -> datetime:
    """As the SQL store keeps times: aware, in UTC; a naive time is refused."""
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"naive datetime {value!r}: the step store needs aware datetimes")
    return value.astimezone(UTC)


def document(value: Any) -> Any:
    """What a JSON column gives back: a copy, with tuples as lists and keys as text."""
    return json.loads(json.dumps(value))


def _column(name: str, value: Any) -> Any:
    """A column value as the record holds it."""
    if value is None:
        return None
    if name == "state":
        return StepState(value)
    if name == "flagged_fields":
        return tuple(document(list(value)))
    if name in _DOCUMENTS:
        return document(dict(value))
    if name in _TIMES:
        return utc(value)
    return value


class Tables:
    """What the SQL store keeps in ``steps`` and ``step_events``. A transaction that
    raises leaves nothing behind; ids, like PostgreSQL's sequences, are not given back."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.steps: dict[str, StepRecord] = {}
        self.events: list[EventRecord] = []
        self.events_by_ref: dict[str, list[EventRecord]] = {}
        self.step_ids = 0
        self.event_ids = 0
        self.undo: list[tuple[str, StepRecord | None]] = []
        # The escalation outbox (``escalation_outbox``): notices by id, in id order.
        self.notices: dict[int, OutboxNotice] = {}
        self.notice_ids = 0
        # Told the operation_ref of every event appended (the store's change feed).
        self.on_event: Callable[[str], None] | None = None

    def next_step_id(self) -> int:
        self.step_ids += 1
        return self.step_ids

    @contextmanager
    def transaction(self) -> Iterator[None]:
        with self.lock:
            self.undo = []
            events_before = len(self.events)
            notices_before = dict(self.notices)
            try:
                yield
            except BaseException:
                self.notices = notices_before
                for ref, previous in reversed(self.undo):
                    if previous is None:
                        del self.steps[ref]
                    else:
                        self.steps[ref] = previous
                for event in self.events[events_before:]:
                    self.events_by_ref[event.operation_ref].remove(event)
                del self.events[events_before:]
                raise
            finally:
                self.undo = []

    def put(self, step: StepRecord) -> None:
        if not 0 <= step.attempts <= step.max_attempts:
            # The SQL store's CHECK constraint.
            raise ValueError(
                f"step {step.operation_ref}: attempts must be within 0..max_attempts, "
                f"got {step.attempts}/{step.max_attempts}"
            )
        self.undo.append((step.operation_ref, self.steps.get(step.operation_ref)))
        self.steps[step.operation_ref] = step

    def append(
        self,
        *,
        operation_ref: str,
        at: datetime,
        kind: str,
        from_state: StepState | None,
        to_state: StepState | None,
        label: str,
        detail: Mapping[str, Any],
    ) -> EventRecord:
        self.event_ids += 1
        event = EventRecord(
            id=self.event_ids,
            operation_ref=operation_ref,
            at=utc(at),
            kind=kind,
            from_state=from_state,
            to_state=to_state,
            label=label,
            detail=document(json_ready(detail)),
        )
        self.events.append(event)
        self.events_by_ref.setdefault(operation_ref, []).append(event)
        if self.on_event is not None:
            # Waiters block on the lock this change holds: they read it once committed.
            self.on_event(operation_ref)
        return event

    def cas(
        self,
        current: StepRecord,
        values: Mapping[str, Any],
        now: datetime,
        *,
        lease_owner: str | None = None,
        change: Change | None = None,
    ) -> StepRecord | None:
        """The compare-and-set on (id, state, version [, lease owner]); None when it lost.
        With ``change``, the event is appended when it matched (R10)."""
        stored = self.steps.get(current.operation_ref)
        if (
            stored is None
            or stored.id != current.id
            or stored.state is not current.state
            or stored.version != current.version
            or (lease_owner is not None and stored.lease_owner != lease_owner)
        ):
            return None
        columns = {name: _column(name, value) for name, value in values.items()}
        moved = replace(stored, **columns, version=stored.version + 1, updated_at=utc(now))
        self.put(moved)
        if moved.state is StepState.ESCALATED and current.state is not StepState.ESCALATED:
            # The notice the handlers are owed commits with the escalation (as in SQL).
            self.notice_ids += 1
            self.notices[self.notice_ids] = OutboxNotice(
                id=self.notice_ids,
                step_id=moved.id,
                operation_ref=moved.operation_ref,
                dedup_key=dedup_key(moved.operation_ref, moved.version),
                created_at=utc(now),
                sends=1,
                last_sent_at=utc(now),
                acknowledged_at=None,
                outcome=None,
            )
        if change is not None:
            self.append(
                operation_ref=moved.operation_ref,
                at=now,
                kind=change.kind,
                from_state=current.state,
                to_state=moved.state,
                label=change.label,
                detail=change.detail,
            )
        return moved

    def noop(
        self,
        operation_ref: str,
        current: StepRecord | None,
        now: datetime,
        claim: ClaimKind,
    ) -> Refused:
        """A claim that did nothing: its ``noop`` event, and why as the answer."""
        refused = claim_refused(claim, current, now)
        state = None if current is None else current.state
        self.append(
            operation_ref=operation_ref,
            at=now,
            kind="noop",
            from_state=state,
            to_state=state,
            label=f"{claim} claim refused",
            detail={"claim": claim, "reason": refused.reason},
        )
        return refused


def counted_detail(detail: Mapping[str, Any]) -> dict[str, str]:
    """The event detail fields the counts read, as the SQL store selects them."""
    found: dict[str, str] = {}
    for key in ("reason", "claim"):
        value = detail.get(key)
        if isinstance(value, str):
            found[key] = value
    envelope = detail.get("envelope")
    if isinstance(envelope, Mapping) and isinstance(envelope.get("commit_state"), str):
        found["commit_state"] = str(envelope["commit_state"])
    return found
