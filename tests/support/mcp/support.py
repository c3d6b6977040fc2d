"""The SDK's own client against real ``toolsafe mcp`` processes (stdio) and the
gateway's ``/mcp`` (streamable HTTP)."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any, cast

import httpx2
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import REQUEST_TIMEOUT, CallToolResult, RequestParamsMeta, TextContent

from tests.support.gateway.harness import ROOT
from toolsafe.mcp.client import tasks_session_options


async def discover(session: ClientSession, tries: int = 4) -> None:
    """``server/discover``, asked again while it times out: the SDK gives it 10 s, and
    a server process still importing on a busy machine answers later (the late answer
    is dropped; the protocol is the same either way)."""
    for attempt in range(tries):
        try:
            await session.discover()
            return
        except MCPError as error:
            if error.code != REQUEST_TIMEOUT or attempt == tries - 1:
                raise


@contextlib.asynccontextmanager
async def _session(read: Any, write: Any, tasks: bool) -> AsyncIterator[ClientSession]:
    async with ClientSession(read, write, **(tasks_session_options() if tasks else {})) as session:
        if tasks:
            await discover(session)  # the 2026-07-28 protocol, where tasks live
        else:
            await session.initialize()
        yield session


@contextlib.asynccontextmanager
async def stdio_session(
    env: Mapping[str, str], directory: Path, *args: str, tasks: bool = False
) -> AsyncIterator[ClientSession]:
    """``toolsafe mcp`` as a host starts it: a subprocess speaking MCP on stdio."""
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "toolsafe", "mcp", *args],
        env={**os.environ, **env},
        cwd=str(ROOT),
    )
    with (directory / "mcp-stdio.log").open("a", encoding="utf-8") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            _session(read, write, tasks) as session,
        ):
            yield session


@contextlib.asynccontextmanager
async def http_session(
    url: str, token: str | None, *, tasks: bool = False
) -> AsyncIterator[ClientSession]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=30) as http,
        streamable_http_client(url, http_client=http) as (read, write),
        _session(read, write, tasks) as session,
    ):
        yield session


def mcp_server_pids() -> list[int]:
    """This process's ``toolsafe mcp`` children (found in /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            command = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        if parent == os.getpid() and b"toolsafe" in command and b"mcp" in command:
            found.append(int(entry.name))
    return found


def kill_mcp_servers() -> None:
    pids = mcp_server_pids()
    assert pids, "no toolsafe mcp process to kill"
    for pid in pids:
        os.kill(pid, signal.SIGKILL)


def text(result: CallToolResult) -> str:
    return "".join(block.text for block in result.content if isinstance(block, TextContent))


def structured(result: CallToolResult) -> dict[str, Any]:
    content = result.structured_content
    assert isinstance(content, dict), result
    return content


def meta(values: Mapping[str, str]) -> RequestParamsMeta:
    """A request's ``_meta`` (the SDK's TypedDict admits extra keys; mypy does not)."""
    return cast(RequestParamsMeta, dict(values))
