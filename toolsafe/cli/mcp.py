"""``toolsafe mcp``: the MCP server over stdio, for a host (an IDE, an agent) that
starts it as a subprocess. On the embedded default it uses ``toolsafe.db`` and the
file-system broker beside it, like ``toolsafe serve``; workers started in the same
folder with ``TOOLSAFE_BROKER_URL`` (printed on stderr) run the calls."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from toolsafe.settings import Settings

EXIT_USAGE = 2


def add_parser(commands: Any) -> None:
    command = commands.add_parser(
        "mcp", help="serve the registered tools over MCP on stdio (docs/mcp.md)"
    )
    command.add_argument(
        "--wait",
        type=float,
        default=None,
        metavar="SECONDS",
        help="how long a tools/call holds for the step (default TOOLSAFE_MCP_WAIT)",
    )
    command.set_defaults(handler=mcp_command)


def _say(line: str) -> None:
    sys.stderr.write(f"toolsafe mcp: {line}\n")
    sys.stderr.flush()


def mcp_command(args: argparse.Namespace) -> int:
    try:
        import anyio

        from toolsafe.mcp.server import ToolsafeMCP
        from toolsafe.mcp.stdio import serve_stdio
    except ImportError as error:
        _say(f"the MCP server needs its extra: pip install 'toolsafe[mcp]' ({error.name})")
        return EXIT_USAGE
    from toolsafe.gateway.cli import embedded
    from toolsafe.tasks.async_client import AsyncClient
    from toolsafe.tasks.client import Client

    settings: Settings = args.settings
    if args.wait is not None and not args.wait > 0:
        _say(f"error: --wait must be a positive number of seconds, got {args.wait}")
        return EXIT_USAGE
    settings, is_embedded = embedded(settings)
    if is_embedded:
        from toolsafe.recovery.db import migrate

        migrate(settings.store.url)
        _say(f"embedded default: store {settings.store.url} (migrated)")
        _say(f"run workers here with TOOLSAFE_BROKER_URL={settings.broker.url}")
    client = AsyncClient(Client.from_settings(settings))
    server = ToolsafeMCP(
        client, wait=args.wait if args.wait is not None else settings.gateway.mcp_wait
    )
    try:
        anyio.run(serve_stdio, server)
    except KeyboardInterrupt:
        pass
    finally:
        client.client.close()
    return 0
