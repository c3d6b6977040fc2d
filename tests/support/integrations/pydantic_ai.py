"""Pydantic AI's side of tests/processes/integrations/test_pydantic_ai.py: a script for
the SDK's own ``FunctionModel``, the responses it plays and what it was given."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.tools import DeferredToolRequests

from toolsafe.integrations.pydantic_ai import Decision, ToolsafeToolset

__all__ = ["Decision", "DeferredToolRequests", "Script", "ToolsafeToolset"]

Step = Callable[[list[ModelMessage]], ModelResponse]


class Script:
    """A ``FunctionModel`` function: one scripted response per model request, recording
    the messages each request carried."""

    def __init__(self, steps: list[Step]) -> None:
        self.steps = list(steps)
        self.received: list[list[ModelMessage]] = []

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.received.append(list(messages))
        return self.steps.pop(0)(messages)

    def last_parts(self, index: int) -> list[Any]:
        """The parts of the last request the model got on its ``index``-th call."""
        request = self.received[index][-1]
        assert isinstance(request, ModelRequest)
        return list(request.parts)


def calls(*parts: tuple[str, dict[str, Any], str]) -> Step:
    return lambda messages: ModelResponse(
        parts=[ToolCallPart(name, args, tool_call_id=call_id) for name, args, call_id in parts]
    )


def text(words: str) -> Step:
    return lambda messages: ModelResponse(parts=[TextPart(words)])


def is_retry(part: Any) -> bool:
    """The retry the model was asked for (its return part marked ``retried``)."""
    if isinstance(part, ToolReturnPart):
        return part.outcome == "retried"
    return isinstance(part, RetryPromptPart)


def returned(parts: list[Any]) -> dict[str, Any]:
    return {
        part.tool_call_id: part.content
        for part in parts
        if isinstance(part, ToolReturnPart) and part.outcome == "success"
    }


def agent(toolset: ToolsafeToolset, script: Script) -> Agent[None, str | DeferredToolRequests]:
    return Agent(FunctionModel(script), toolsets=[toolset],
                 output_type=[str, DeferredToolRequests])  # fmt: skip
