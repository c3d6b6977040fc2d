"""``toolsafe mcp``: the registry as an MCP server on the official SDK (extra ``mcp``).

Over stdio (``toolsafe mcp``) and streamable HTTP (``/mcp`` in the gateway). A
``tools/call`` submits the step under a replay-stable operation_ref and waits up to
``TOOLSAFE_MCP_WAIT``; a client that declares the tasks extension gets a task at once,
backed by the step store, so it survives a restart of the server (docs/mcp.md).

The SDK-free pieces it builds on (``mcp_tools``, ``mcp_ref``, ``to_mcp_call_tool_result``)
are :mod:`toolsafe.agents.mcp`.
"""

from toolsafe.mcp.server import ToolsafeMCP

__all__ = ["ToolsafeMCP"]
