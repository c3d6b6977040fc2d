"""An OpenAI Agents SDK agent whose tools run through toolsafe.

    python docs/examples/openai_agents_example.py

The model is scripted (no API key, no network): it calls create_invoice once, then says
what the tool returned. With a real model, give ``Agent(model="...")`` instead.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from agents import Agent, Model, ModelResponse, RunConfig, Runner, Usage
from embedded import toolsafe_client
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

from toolsafe import AsyncClient, Client
from toolsafe.integrations.openai_agents import ToolsafeTools

INVOICE = {"customer_id": "cus_7", "amount_cents": 990, "currency": "EUR"}


class ScriptedModel(Model):
    async def get_response(self, system_instructions: Any, input: Any, *args: Any,
                           **kwargs: Any) -> ModelResponse:  # fmt: skip
        answers = [item for item in input if item.get("type") == "function_call_output"]
        if not answers:  # the first turn: call the tool
            call = ResponseFunctionToolCall(
                id="fc_1", call_id="call_1", type="function_call",
                name="create_invoice", arguments=json.dumps(INVOICE),
            )  # fmt: skip
            return ModelResponse(output=[call], usage=Usage(), response_id=None)
        text = ResponseOutputText(type="output_text", annotations=[],
                                  text=f"The tool answered: {answers[-1]['output']}")  # fmt: skip
        message = ResponseOutputMessage(id="msg_1", type="message", role="assistant",
                                        status="completed", content=[text])  # fmt: skip
        return ModelResponse(output=[message], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


async def main(client: Client) -> None:
    # scope: the run or conversation id your application keeps across a replay.
    tools = ToolsafeTools(AsyncClient(client), scope="run_81")
    agent = Agent(name="billing", instructions="Bill customers.", tools=tools.tools(),
                  model=ScriptedModel())  # fmt: skip
    result = await Runner.run(agent, "Bill cus_7 9.90 EUR",
                              run_config=RunConfig(tracing_disabled=True))  # fmt: skip
    print(result.final_output)
    print("operation_ref:", tools.operation_ref("call_1"))


if __name__ == "__main__":
    with toolsafe_client() as client:
        asyncio.run(main(client))
