"""A Pydantic AI agent whose tools are a toolsafe toolset.

    python docs/examples/pydantic_ai_example.py

The model is Pydantic AI's own FunctionModel, scripted (no API key, no network): it calls
create_invoice once, then says what the tool returned. With a real model, give
``Agent("provider:model", toolsets=[...])`` instead.
"""

from __future__ import annotations

import asyncio
import json

from embedded import toolsafe_client
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.tools import DeferredToolRequests

from toolsafe import AsyncClient, Client
from toolsafe.integrations.pydantic_ai import ToolsafeToolset

INVOICE = {"customer_id": "cus_7", "amount_cents": 990, "currency": "EUR"}


def scripted(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    returns = [part for message in messages for part in message.parts
               if part.part_kind == "tool-return"]  # fmt: skip
    if not returns:
        return ModelResponse(parts=[ToolCallPart("create_invoice", INVOICE, tool_call_id="c1")])
    return ModelResponse(parts=[TextPart(f"The tool answered: {json.dumps(returns[-1].content)}")])


async def main(client: Client) -> None:
    agent = Agent(FunctionModel(scripted), toolsets=[ToolsafeToolset(AsyncClient(client))],
                  output_type=[str, DeferredToolRequests])  # fmt: skip
    # The conversation id scopes the refs: keep it to replay or resume the conversation.
    result = await agent.run("Bill cus_7 9.90 EUR", conversation_id="conv_81")
    print(result.output)


if __name__ == "__main__":
    with toolsafe_client() as client:
        asyncio.run(main(client))
