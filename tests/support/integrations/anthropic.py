"""The Anthropic SDK's side of tests/processes/integrations/test_anthropic.py: the usual
Messages loop against a scripted endpoint, with toolsafe's helpers between the turns."""

from __future__ import annotations

from typing import Any

import anthropic

from toolsafe.integrations.anthropic import tool_results, tools
from toolsafe.tasks.calls import AsyncCalls


async def conversation(url: str, client: AsyncCalls, conversation_id: str, prompt: str) -> None:
    """The usual Messages loop, with toolsafe's helpers between the turns."""
    model = anthropic.AsyncAnthropic(base_url=url, api_key="unused", max_retries=0)
    history: list[dict[str, Any]] = [{"role": "user", "content": prompt}]
    offered = tools(client.catalogue())
    try:
        while True:
            message = await model.messages.create(
                model="scripted", max_tokens=256, messages=history,  # type: ignore[arg-type]
                tools=offered,  # type: ignore[arg-type]
            )  # fmt: skip
            history.append({"role": "assistant", "content": message.content})
            if message.stop_reason != "tool_use":
                return
            results = await tool_results(client, message, conversation_id=conversation_id)
            history.append({"role": "user", "content": results})
    finally:
        await model.close()
