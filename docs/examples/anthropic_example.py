"""The Anthropic Messages loop with toolsafe between the turns.

    python docs/examples/anthropic_example.py

The assistant's message is built here as the Messages API returns it (no API key, no
network); with a real model it is ``await anthropic.AsyncAnthropic().messages.create(...,
tools=tools(client.catalogue()))``.
"""

from __future__ import annotations

import asyncio

from anthropic.types import Message
from embedded import toolsafe_client

from toolsafe import AsyncClient, Client
from toolsafe.integrations.anthropic import tool_results, tools

INVOICE = {"customer_id": "cus_7", "amount_cents": 990, "currency": "EUR"}


async def main(client: Client) -> None:
    offered = tools(client.catalogue())  # what messages.create(tools=...) is given
    print("tools:", ", ".join(tool["name"] for tool in offered))
    message = Message.model_validate({
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude",
        "content": [{"type": "tool_use", "id": "toolu_1", "name": "create_invoice",
                     "input": INVOICE}],
        "stop_reason": "tool_use", "stop_sequence": None,
        "usage": {"input_tokens": 1, "output_tokens": 1},
    })  # fmt: skip
    # The next user turn: one tool_result per tool_use, refs scoped by the conversation.
    results = await tool_results(AsyncClient(client), message, conversation_id="conv_81")
    for block in results:
        print(block["tool_use_id"], "is_error:", block["is_error"])
        print(block["content"][0]["text"])


if __name__ == "__main__":
    with toolsafe_client() as client:
        asyncio.run(main(client))
