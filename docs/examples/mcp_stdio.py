"""Start `toolsafe mcp` the way an MCP host does (a subprocess on stdio) and use it
with the official SDK's client: list the tools, call one, replay the call.

Run it from a folder where a worker runs on the embedded default (docs/mcp.md):

    python docs/examples/mcp_stdio.py
"""

from __future__ import annotations

import sys

import anyio
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

INVOICE = {"customer_id": "cus_42", "amount_cents": 1250, "currency": "EUR"}
# What the host keeps across a replay: the model's tool-call id and the agent run.
META = {"toolsafe/call_id": "call_7Qx", "toolsafe/session": "run-2024"}


async def main() -> None:
    server = StdioServerParameters(command=sys.executable, args=["-m", "toolsafe", "mcp"])
    async with stdio_client(server) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        for tool in (await session.list_tools()).tools:
            print(f"tool {tool.name}: {tool.description}")
        for attempt in ("call", "replay"):
            result = await session.call_tool("create_invoice", INVOICE, meta=META)
            envelope = result.structured_content or {}
            print(f"{attempt}: isError={result.is_error} ok={envelope.get('ok')} "
                  f"operation_ref={envelope.get('operation_ref')}")  # fmt: skip
            print(f"  {result.content[0].text}")


anyio.run(main)
