"""``toolsafe mcp`` over stdio: one client (the host that started the process), stdout
for JSON-RPC only (the SDK points stray output at stderr while it serves)."""

from __future__ import annotations

from mcp.server.stdio import stdio_server

from toolsafe.mcp.server import ToolsafeMCP


async def serve_stdio(mcp: ToolsafeMCP) -> None:
    """Serve until the host closes stdin."""
    async with stdio_server() as (read, write):
        await mcp.server.run(read, write, mcp.server.create_initialization_options())
