"""The answer for a step toolsafe is still working on (queued, running, waiting to
retry, verifying): not an error, and not a result. It names the operation_ref, the
state and ``not_before`` so the model (or its host) waits instead of calling again."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from toolsafe.recovery.states import NEEDS_AGENT
from toolsafe.tasks.views import StepView


class InProgress(BaseModel):
    """toolsafe still owns this call and will finish it by itself."""

    model_config = ConfigDict(extra="forbid", title="InProgress")

    in_progress: Literal[True] = True
    operation_ref: str
    tool: str
    state: str = Field(description="pending, in_flight, waiting_retry or verifying")
    not_before: datetime | None = Field(
        None, description="the earliest time the step runs again (waiting_retry)"
    )
    last_envelope: dict[str, Any] | None = Field(
        None, description="the envelope of the previous attempt, if there was one"
    )
    agent_message: str = Field(description="what to tell the model: wait, do not call again")


def in_progress(view: StepView) -> InProgress:
    """The in-progress answer for a step that does not need the agent yet."""
    if view.state in NEEDS_AGENT:
        raise ValueError(f"step {view.operation_ref} is {view.state}: answer with its envelope")
    waiting = view.due_at if str(view.state) == "waiting_retry" else None
    return InProgress(
        operation_ref=view.operation_ref,
        tool=view.tool,
        state=str(view.state),
        not_before=waiting,
        last_envelope=view.envelope_json(),
        agent_message=view.text,
    )


def in_progress_text(answer: InProgress) -> str:
    """One line for a text channel; the model reads it as "wait", never as a failure."""
    when = f", not before {answer.not_before.isoformat()}" if answer.not_before else ""
    return (
        f"Still in progress (operation_ref {answer.operation_ref}, state {answer.state}"
        f"{when}): {answer.agent_message} toolsafe finishes it by itself; ask again with "
        "the same operation_ref instead of making a new call."
    )
