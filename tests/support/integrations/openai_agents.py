"""The OpenAI Agents SDK's side of tests/processes/integrations/test_openai_agents.py: a
model of the SDK's own kind playing from a script, and the items it answers with."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

from agents import Agent, Model, ModelResponse, RunConfig, Runner, RunState, Usage
from agents.items import TResponseOutputItem
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

from toolsafe.integrations.openai_agents import ToolsafeTools

__all__ = ["RunState", "ScriptedModel", "Step", "TResponseOutputItem", "ToolsafeTools"]

Step = Callable[[list[dict[str, Any]]], list[TResponseOutputItem]]


def call(name: str, arguments: dict[str, Any], call_id: str) -> ResponseFunctionToolCall:
    return ResponseFunctionToolCall(
        id=f"fc_{call_id}",
        call_id=call_id,
        type="function_call",
        name=name,
        arguments=json.dumps(arguments),
    )


def say(text: str) -> ResponseOutputMessage:
    return ResponseOutputMessage(
        id="msg_1",
        type="message",
        role="assistant",
        status="completed",
        content=[ResponseOutputText(type="output_text", text=text, annotations=[])],
    )


class ScriptedModel(Model):
    """A model of the SDK's own kind: each turn answers from the script, given the
    input it received (recorded in ``received``)."""

    def __init__(self, steps: list[Step]) -> None:
        self.steps = list(steps)
        self.received: list[list[dict[str, Any]]] = []

    async def get_response(self, system_instructions: Any, input: Any, *args: Any,
                           **kwargs: Any) -> ModelResponse:  # fmt: skip
        items = [{"type": "message", "content": input}] if isinstance(input, str) else input
        seen = [dict(item) if isinstance(item, dict) else item.model_dump() for item in items]
        self.received.append(seen)
        output = self.steps.pop(0)(seen)
        return ModelResponse(output=output, usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError("the tests run without streaming")


def outputs(items: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The function_call_output items the model received, by call_id, parsed."""
    return {
        item["call_id"]: json.loads(item["output"])
        for item in items
        if item.get("type") == "function_call_output"
    }


def run(agent: Agent[Any], given: Any) -> Any:
    config = RunConfig(tracing_disabled=True)
    return asyncio.run(Runner.run(agent, given, run_config=config))


def agent_with(tools: ToolsafeTools, model: ScriptedModel) -> Agent[Any]:
    return Agent(name="billing", instructions="Bill customers.", tools=tools.tools(),
                 model=model)  # fmt: skip
