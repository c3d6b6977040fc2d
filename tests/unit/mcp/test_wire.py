"""One stdio line read as JSON-RPC says, without I/O (the process test feeds the same
lines to a real server)."""

from __future__ import annotations

import pytest
from mcp.shared.message import SessionMessage
from mcp_types import JSONRPCError, JSONRPCRequest

from tests.support.mcp.raw import bad_lines
from toolsafe.mcp.wire import read_line, too_long


@pytest.mark.parametrize(
    ("case", "raw", "code"),
    [(case, raw, code) for case, raw, code, _ in bad_lines("w") if code != -32602],
)
def test_a_bad_line_is_answered_with_its_code(case: str, raw: bytes, code: int) -> None:
    answer = read_line(raw)
    assert isinstance(answer, JSONRPCError), case
    assert answer.error.code == code and answer.error.message


def test_a_good_line_is_a_message_and_a_blank_one_nothing() -> None:
    read = read_line(b'{"jsonrpc":"2.0","id":3,"method":"tools/list"}')
    assert isinstance(read, SessionMessage) and isinstance(read.message, JSONRPCRequest)
    assert read_line(b"   ") is None
    kept = read_line(b'{"jsonrpc":"1.0","id":"a-1","method":"x"}')
    assert isinstance(kept, JSONRPCError) and kept.id == "a-1"
    assert too_long(10).error.code == -32600
