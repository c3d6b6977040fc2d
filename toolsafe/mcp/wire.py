"""One line of MCP's stdio transport read as JSON-RPC 2.0 says: a message for the
server, or the error to answer at once (``-32700`` for text that is not JSON toolsafe
can read exactly, ``-32600`` for JSON that is not one JSON-RPC message). A line that
could not be read exactly never reaches a handler, so nothing of it is stored or sent."""

from __future__ import annotations

from typing import Final

from mcp.shared.message import SessionMessage
from mcp_types import (
    INVALID_REQUEST,
    PARSE_ERROR,
    ErrorData,
    JSONRPCError,
    RequestId,
    jsonrpc_message_adapter,
)
from pydantic import ValidationError

from toolsafe.adapters.json_input import JsonInputError, read_json

MAX_LINE_BYTES: Final = 4 * 1024 * 1024
"""A longer line is refused (``-32600``) and skipped to its end, never held whole."""


def refusal(code: int, message: str, request_id: RequestId | None = None) -> JSONRPCError:
    return JSONRPCError(jsonrpc="2.0", id=request_id, error=ErrorData(code=code, message=message))


def too_long(limit: int = MAX_LINE_BYTES) -> JSONRPCError:
    return refusal(INVALID_REQUEST, f"Invalid Request: a message over {limit} bytes")


def _request_id(value: object) -> RequestId | None:
    """The id of a malformed message when it has a usable one (JSON-RPC answers
    ``id: null`` when it cannot tell)."""
    if isinstance(value, dict):
        found = value.get("id")
        if isinstance(found, str) or (isinstance(found, int) and not isinstance(found, bool)):
            return found
    return None


def read_line(line: bytes) -> SessionMessage | JSONRPCError | None:
    """The message in ``line`` (its newline removed), the error that answers it, or
    None for a blank line (nothing to answer)."""
    if not line.strip():
        return None
    try:
        value = read_json(line)
    except JsonInputError as error:
        return refusal(PARSE_ERROR, f"Parse error: {error}")
    if isinstance(value, list):
        return refusal(
            INVALID_REQUEST,
            "Invalid Request: a JSON array (a JSON-RPC batch) is not accepted; "
            "MCP sends one message per line",
        )
    if not isinstance(value, dict):
        return refusal(
            INVALID_REQUEST,
            f"Invalid Request: a JSON-RPC message is an object, not {type(value).__name__}",
        )
    try:
        message = jsonrpc_message_adapter.validate_python(value, by_name=False)
    except ValidationError as error:
        fields = sorted(
            {".".join(str(part) for part in item["loc"][1:2]) for item in error.errors()}
        )
        named = ", ".join(field for field in fields if field) or "its members"
        return refusal(
            INVALID_REQUEST,
            f"Invalid Request: not a JSON-RPC 2.0 message (check {named})",
            _request_id(value),
        )
    return SessionMessage(message)
