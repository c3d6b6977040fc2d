"""The gateway's wire models (pydantic v2): the step view and its envelope, the tools,
the request bodies and the RFC 9457 problem. One source for /openapi.json and the HTTP
clients; the envelope is the contract's own model (``toolsafe.adapters.envelope``)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue
from starlette.responses import Response

from toolsafe.adapters.envelope import AnySuccess, ToolError
from toolsafe.recovery.states import StepState
from toolsafe.tasks.views import HistoryEntry, StepView

Envelope = Annotated[AnySuccess | ToolError, Field(discriminator="ok")]
DetailValue = str | int | float | bool


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class HistoryItem(_Model):
    """One event of the step: its move, lifecycle label and safe detail."""

    at: datetime
    kind: str
    from_state: StepState | None
    to_state: StepState | None
    label: str
    detail: dict[str, DetailValue] = Field(default_factory=dict)


class CallView(_Model):
    """What the model may see of a step (``toolsafe.tasks.views``): never raw upstream."""

    operation_ref: str
    tool: str
    state: StepState
    ui_group: str
    commit_state: Literal["not_committed", "committed", "unknown"] | None
    attempts: int
    max_attempts: int
    due_at: datetime | None
    reason: str | None
    fields: list[str]
    envelope: Envelope | None
    text: str
    needs_agent: bool = Field(description="the agent must act, or the step is over")
    terminal: bool
    history: list[HistoryItem] = Field(default_factory=list)
    hint: Literal["no_worker"] | None = Field(
        default=None,
        description="no_worker: a ?wait answered at once because no worker is consuming",
    )

    @classmethod
    def of(cls, view: StepView) -> CallView:
        return cls.model_validate(
            {
                "operation_ref": view.operation_ref,
                "tool": view.tool,
                "state": view.state,
                "ui_group": view.ui_group,
                "commit_state": view.commit_state,
                "attempts": view.attempts,
                "max_attempts": view.max_attempts,
                "due_at": view.due_at,
                "reason": view.reason,
                "fields": list(view.fields),
                "envelope": view.envelope,
                "text": view.text,
                "needs_agent": view.needs_agent,
                "terminal": view.terminal,
                "history": [
                    {
                        "at": entry.at,
                        "kind": entry.kind,
                        "from_state": entry.from_state,
                        "to_state": entry.to_state,
                        "label": entry.label,
                        "detail": entry.detail,
                    }
                    for entry in view.history
                ],
            }
        )

    def response(self, status: int = 200, headers: dict[str, str] | None = None) -> Response:
        """The view as the answer itself: FastAPI passes a ``Response`` through, so the
        model is serialised once (``response_model`` still documents it)."""
        return Response(
            self.model_dump_json(),
            status_code=status,
            media_type="application/json",
            headers=headers,
        )

    def to_view(self) -> StepView:
        """Back into the in-process client's ``StepView`` (the HTTP clients answer with it)."""
        return StepView(
            operation_ref=self.operation_ref,
            tool=self.tool,
            state=self.state,
            ui_group=self.ui_group,
            commit_state=self.commit_state,
            attempts=self.attempts,
            max_attempts=self.max_attempts,
            due_at=self.due_at,
            reason=self.reason,
            fields=tuple(self.fields),
            envelope=self.envelope,
            text=self.text,
            history=tuple(
                HistoryEntry(
                    at=item.at,
                    kind=item.kind,
                    from_state=None if item.from_state is None else str(item.from_state),
                    to_state=None if item.to_state is None else str(item.to_state),
                    label=item.label,
                    detail=dict(item.detail),
                )
                for item in self.history
            ),
        )


class ToolInfo(_Model):
    name: str
    title: str | None = None
    description: str
    writes: bool
    has_lookup: bool
    max_attempts: int | None = Field(None, description="the policy's limit on executions")
    input_schema: dict[str, Any]
    output_schema: dict[str, Any] = Field(description="the envelope's JSON Schema")


class ToolList(_Model):
    tools: list[ToolInfo]


class CallRequest(_Model):
    """A tool call: its input, checked against the tool's input schema."""

    input: dict[str, JsonValue]


class CorrectedInput(_Model):
    input: dict[str, JsonValue]


NonEmpty = Annotated[str, Field(min_length=1, max_length=500)]
Actor = Annotated[str, Field(min_length=1, max_length=200)]


class CancelRequest(_Model):
    reason: NonEmpty
    by: Actor | None = Field(None, description="who asks, recorded with the acting key")
    when_possible: bool = Field(
        False,
        description=(
            "if the step cannot be cancelled now (running, or its outcome unknown), record"
            " the request: it takes effect once the step waits with nothing written, and a"
            " write verification finds stays a success"
        ),
    )


class ApprovalRequest(_Model):
    reason: NonEmpty
    approver: Actor | None = Field(None, description="recorded with the acting key")


class ResolveRequest(_Model):
    to: Literal["succeeded", "failed"]
    reason: NonEmpty
    operator: Actor | None = None
    evidence: str | None = Field(
        default=None,
        description=(
            "the downstream reference the operator checked (an invoice id, a URL); "
            "required to close as succeeded (EVIDENCE_REQUIRED, EVIDENCE_INVALID)"
        ),
    )
    confirm_not_written: bool = Field(
        default=False,
        description=(
            "the operator states that a write which may have happened did not; required "
            "to close such a step as failed (NOT_WRITTEN_UNCONFIRMED)"
        ),
    )


class RedriveRequest(_Model):
    reason: NonEmpty
    operator: Actor | None = None


class FieldProblem(_Model):
    field: str
    code: str


class Problem(BaseModel):
    """RFC 9457 problem details; ``code`` is toolsafe's stable identifier."""

    model_config = ConfigDict(extra="allow")

    type: str = "about:blank"
    title: str
    status: int
    detail: str
    code: str
    instance: str | None = None
    operation_ref: str | None = None
    tool: str | None = None
    errors: list[FieldProblem] | None = None
