"""The MCP mappings without I/O: a step's view as a CallToolResult and as a task."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from mcp_types import TextContent

from tests.support import fixtures
from toolsafe.adapters.envelope import parse_result, to_wire
from toolsafe.agents.mcp import to_mcp_call_tool_result
from toolsafe.agents.shared import tool_output_schema
from toolsafe.mcp import tasks
from toolsafe.mcp.results import META_REF, call_tool_result
from toolsafe.recovery.records import StepRecord
from toolsafe.recovery.states import StepState
from toolsafe.tasks.views import HistoryEntry, StepView, model_text

NOW = datetime(2026, 11, 30, 9, 15, 0, tzinfo=UTC)
REF = fixtures.OPERATION_REF


def view(state: StepState, envelope: dict[str, object] | None, **extra: object) -> StepView:
    values: dict[str, object] = {
        "operation_ref": REF,
        "tool": "create_invoice",
        "state": state,
        "ui_group": "x",
        "commit_state": None,
        "attempts": 1,
        "max_attempts": 5,
        "due_at": None,
        "reason": None,
        "fields": (),
        "envelope": None if envelope is None else parse_result(envelope),
        "text": f"text for {state}",
        "history": (
            HistoryEntry(
                at=NOW - timedelta(seconds=5),
                kind="submitted",
                from_state=None,
                to_state="pending",
                label="submitted",
            ),
            HistoryEntry(at=NOW, kind="x", from_state="pending", to_state=str(state), label="x"),
        ),
        **extra,
    }
    return StepView(**values)  # type: ignore[arg-type]


def text_of(result: object) -> str:
    """The first text block: the model text (the envelope's JSON follows it)."""
    block = result.content[0]  # type: ignore[attr-defined]
    assert isinstance(block, TextContent)
    return block.text


def test_a_success_is_its_envelope_and_not_an_error() -> None:
    envelope = to_wire(fixtures.invoice_created())
    result = call_tool_result(view(StepState.SUCCEEDED, envelope))
    assert result.is_error is False
    assert result.structured_content == envelope
    assert text_of(result) == "text for succeeded"
    # For a host that forwards only content: the whole envelope as JSON text as well.
    last = result.content[-1]
    assert isinstance(last, TextContent) and json.loads(last.text) == envelope
    assert result.meta == {META_REF: REF, "toolsafe/state": "succeeded"}


@pytest.mark.parametrize(
    ("state", "make"),
    [
        (StepState.SUCCEEDED, fixtures.invoice_created),
        (StepState.NEEDS_INPUT, fixtures.invalid_recipient_address),
        (StepState.ESCALATED, fixtures.outcome_unknown),
    ],
)
def test_the_server_answers_with_the_one_mapping(state: StepState, make: object) -> None:
    envelope = make()  # type: ignore[operator]
    served = call_tool_result(view(state, to_wire(envelope)))
    dumped = served.model_dump(by_alias=True, mode="json", exclude_none=True)
    mapped = to_mcp_call_tool_result(envelope, f"text for {state}")
    assert {key: dumped[key] for key in mapped} == mapped
    assert to_mcp_call_tool_result(to_wire(envelope), f"text for {state}") == mapped


def test_a_success_text_names_its_evidence() -> None:
    step = StepRecord(
        id=1, operation_ref=REF, tool="create_invoice", input={}, input_hash="sha256:x",
        state=StepState.SUCCEEDED, commit_state="committed", attempts=1, max_attempts=5,
        verification_attempts=0, lookups_unavailable=0, due_at=None, lease_owner=None,
        lease_expires_at=None, last_sent_at=None, last_envelope=None, fingerprint=None,
        fingerprint_repeats=0, flagged_fields=(), approval_input_hash=None, reason=None,
        published_at=None, version=2, created_at=NOW, updated_at=NOW,
    )  # fmt: skip
    envelope = to_wire(fixtures.invoice_created())
    evidence = envelope["verification"]["evidence_ref"]
    assert evidence and f"evidence {evidence}" in model_text(step, envelope)


@pytest.mark.parametrize(
    ("state", "make"),
    [
        (StepState.NEEDS_INPUT, fixtures.invalid_recipient_address),
        (StepState.AWAITING_APPROVAL, fixtures.missing_approval),
        (StepState.ESCALATED, fixtures.outcome_unknown),
        (StepState.FAILED, fixtures.version_conflict),
    ],
)
def test_is_error_exactly_when_ok_is_false(state: StepState, make: object) -> None:
    envelope = to_wire(make())  # type: ignore[operator]
    result = call_tool_result(view(state, envelope))
    assert result.is_error is True
    assert result.structured_content == envelope


def test_a_step_waiting_to_retry_is_in_progress_never_an_error() -> None:
    due = NOW + timedelta(seconds=30)
    rate_limited = to_wire(fixtures.dependency_unavailable())
    result = call_tool_result(view(StepState.WAITING_RETRY, rate_limited, due_at=due))
    assert result.is_error is False
    content = result.structured_content
    assert content["in_progress"] is True and content["state"] == "waiting_retry"
    assert content["operation_ref"] == REF
    assert content["not_before"] == due.isoformat().replace("+00:00", "Z")
    assert content["last_envelope"] == rate_limited
    assert f"operation_ref {REF}" in text_of(result) and "not before" in text_of(result)
    import jsonschema

    jsonschema.validate(content, tool_output_schema())


@pytest.mark.parametrize(
    ("state", "status"),
    [
        (StepState.PENDING, "working"),
        (StepState.IN_FLIGHT, "working"),
        (StepState.WAITING_RETRY, "working"),
        (StepState.VERIFYING, "working"),
        (StepState.NEEDS_INPUT, "input_required"),
        (StepState.AWAITING_APPROVAL, "input_required"),
        (StepState.SUCCEEDED, "completed"),
        (StepState.FAILED, "completed"),
        (StepState.ESCALATED, "completed"),
        (StepState.CANCELLED, "cancelled"),
    ],
)
def test_task_status_follows_the_lifecycle(state: StepState, status: str) -> None:
    assert tasks.task_status(state) == status


def test_a_task_carries_the_ref_timestamps_and_its_result() -> None:
    envelope = to_wire(fixtures.invoice_created())
    done = tasks.detailed(view(StepState.SUCCEEDED, envelope), NOW)
    assert done.task_id == REF and done.status == "completed"
    assert (
        done.created_at == "2026-11-30T09:14:55Z" and done.last_updated_at == "2026-11-30T09:15:00Z"
    )
    assert done.result is not None and done.result["structuredContent"] == envelope
    assert done.result["isError"] is False and done.poll_interval_ms is None
    assert done.wire()["ttlMs"] is None and "pollIntervalMs" not in done.wire()
    failed = tasks.detailed(view(StepState.FAILED, to_wire(fixtures.version_conflict())), NOW)
    assert failed.status == "completed" and failed.result is not None
    assert failed.result["isError"] is True
    # A tool error is a completed task with an error result, never the status "failed"
    # (JSON-RPC errors only); a cancelled step is the status "cancelled", no result.
    cancelled = tasks.detailed(view(StepState.CANCELLED, to_wire(fixtures.version_conflict())), NOW)
    assert cancelled.status == "cancelled" and cancelled.result is None
    assert cancelled.meta is not None and cancelled.meta[tasks.META_RESULT]["isError"] is True
    waiting = tasks.detailed(
        view(StepState.WAITING_RETRY, None, due_at=NOW + timedelta(seconds=7)), NOW
    )
    assert waiting.status == "working" and waiting.result is None
    assert waiting.poll_interval_ms == 7000 and waiting.wire()["pollIntervalMs"] == 7000
    asking = tasks.detailed(
        view(StepState.AWAITING_APPROVAL, to_wire(fixtures.missing_approval())), NOW
    )
    assert asking.status == "input_required" and asking.input_requests == {}
    assert asking.meta is not None and asking.meta[tasks.META_RESULT]["isError"] is True
    created = tasks.created(view(StepState.PENDING, None), NOW)
    wire = created.wire()
    assert wire["resultType"] == "task" and wire["taskId"] == REF and wire["status"] == "working"
    assert wire["ttlMs"] is None and wire["pollIntervalMs"] == tasks.POLL_MS


def test_a_cancel_asked_for_is_in_the_status_until_the_step_is_over() -> None:
    asked = HistoryEntry(
        at=NOW, kind="cancel_requested", from_state="verifying", to_state="verifying", label="x"
    )
    verifying = view(StepState.VERIFYING, None)
    verifying = StepView(**{**verifying.__dict__, "history": (*verifying.history, asked)})
    note = tasks.cancel_note(verifying)
    assert note is not None and "Cancellation requested at 2026-11-30T09:15:00Z" in note
    assert "stays a success" in note
    assert tasks.cancel_note(view(StepState.VERIFYING, None)) is None
    done = view(StepState.SUCCEEDED, to_wire(fixtures.invoice_created()))
    assert tasks.cancel_note(StepView(**{**done.__dict__, "history": (asked,)})) is None


def test_only_a_client_that_declares_the_extension_gets_tasks() -> None:
    key = "io.modelcontextprotocol/clientCapabilities"
    assert tasks.wants_tasks({key: {"extensions": {tasks.EXTENSION: {}}}})
    assert not tasks.wants_tasks({key: {"extensions": {}}})
    assert not tasks.wants_tasks(None)
    assert not tasks.wants_tasks({"toolsafe/operation_ref": "x"})
