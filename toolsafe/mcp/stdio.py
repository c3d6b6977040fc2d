"""``toolsafe mcp`` over stdio: one client (the host that started the process),
newline-delimited JSON-RPC on stdin and stdout.

toolsafe reads the wire itself rather than through the SDK's text reader, which
replaces bytes that are not UTF-8 with U+FFFD and drops lines it cannot parse without
an answer: here every line is read exactly or answered with its JSON-RPC error
(``toolsafe.mcp.wire``), and only a message read exactly reaches the server. While it
serves, fd 0 reads the null device and fd 1 points at stderr, so stray output from a
library never lands on the wire.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Iterator
from typing import BinaryIO

import anyio
import anyio.to_thread
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.shared.message import SessionMessage

from toolsafe.mcp.server import ToolsafeMCP
from toolsafe.mcp.wire import MAX_LINE_BYTES, read_line, too_long

Incoming = MemoryObjectReceiveStream[SessionMessage | Exception]
Outgoing = MemoryObjectSendStream[SessionMessage]


@contextlib.contextmanager
def claimed_wire() -> Iterator[tuple[BinaryIO, BinaryIO]]:
    """Private duplicates of fd 0 and fd 1 for the wire; the standard descriptors point
    at the null device and at stderr until the server is done, then come back."""
    wire_in, wire_out = os.dup(0), os.dup(1)
    saved_in, saved_out = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDONLY)
    try:
        os.dup2(null, 0)
        os.dup2(2, 1)
        with os.fdopen(wire_in, "rb") as reader, os.fdopen(wire_out, "wb") as writer:
            yield reader, writer
    finally:
        os.dup2(saved_in, 0)
        os.dup2(saved_out, 1)
        for fd in (null, saved_in, saved_out):
            os.close(fd)


def _next_line(reader: BinaryIO, limit: int) -> tuple[bytes, bool] | None:
    """The next line without its newline and whether it fit in ``limit`` bytes (the
    rest of a longer one is read and dropped); None at the end of input."""
    line = reader.readline(limit + 1)
    if not line:
        return None
    if len(line) <= limit or line.endswith(b"\n"):
        return line.rstrip(b"\r\n"), True
    while line and not line.endswith(b"\n"):
        line = reader.readline(limit)
    return b"", False


@contextlib.asynccontextmanager
async def stdio_streams(
    reader: BinaryIO, writer: BinaryIO, limit: int = MAX_LINE_BYTES
) -> AsyncIterator[tuple[Incoming, Outgoing]]:
    """The server's streams over ``reader`` and ``writer``: messages read exactly go
    in; a line that cannot be read is answered on the wire by the reader itself."""
    to_server, from_wire = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    to_wire, from_server = anyio.create_memory_object_stream[SessionMessage](0)
    answers = to_wire.clone()

    async def read_wire() -> None:
        async with to_server, answers:
            while True:
                found = await anyio.to_thread.run_sync(_next_line, reader, limit)
                if found is None:
                    return
                line, fits = found
                read = read_line(line) if fits else too_long(limit)
                if isinstance(read, SessionMessage):
                    await to_server.send(read)
                elif read is not None:
                    await answers.send(SessionMessage(read))

    def write(message: SessionMessage) -> None:
        data = message.message.model_dump_json(by_alias=True, exclude_unset=True)
        writer.write(data.encode("utf-8") + b"\n")
        writer.flush()

    async def write_wire() -> None:
        async with from_server:
            async for message in from_server:
                await anyio.to_thread.run_sync(write, message)

    async with anyio.create_task_group() as group:
        group.start_soon(read_wire)
        group.start_soon(write_wire)
        yield from_wire, to_wire


async def serve_stdio(mcp: ToolsafeMCP) -> None:
    """Serve until the host closes stdin."""
    with claimed_wire() as (reader, writer):
        async with stdio_streams(reader, writer) as (read, write):
            await mcp.server.run(read, write, mcp.server.create_initialization_options())
