"""JSON bodies the gateway cannot read exactly are refused before any route (or MCP)
sees them: bytes that are not UTF-8, a lone surrogate escape, NaN, nesting deeper than
``toolsafe.adapters.json_input.MAX_JSON_DEPTH``. ``/v1`` answers a problem
(``INVALID_REQUEST``, 422, the body's fault named; plain malformed JSON is left to the
route's own 422), ``/mcp`` a JSON-RPC error as MCP's stdio does (``-32700``; ``-32600``
for a batch or a value that is not one message; HTTP 400).

Runs inside ``Limits``, which has read the body whole (never past its limit) into one
message, so the check reads it once more and replays it."""

from __future__ import annotations

import json
from typing import Final

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from toolsafe.adapters.json_input import JsonInputError, read_json
from toolsafe.gateway.problems import ApiProblem, problem_response

CHECKED_METHODS: Final = frozenset({"POST", "PUT", "PATCH"})
PARSE_ERROR: Final = -32700
INVALID_REQUEST: Final = -32600


def _is_json(scope: Scope) -> bool:
    content_type: bytes = dict(scope.get("headers") or []).get(b"content-type", b"")
    media = content_type.split(b";", 1)[0].strip().lower()
    return media == b"application/json" or media.endswith(b"+json")


async def _jsonrpc_error(send: Send, code: int, message: str) -> None:
    body = {"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": message}}
    data = json.dumps(body, separators=(",", ":")).encode("utf-8")
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
    await send({"type": "http.response.start", "status": 400, "headers": headers})
    await send({"type": "http.response.body", "body": data})


def _refusal(body: bytes, is_mcp: bool) -> tuple[int, str, str] | None:
    """(JSON-RPC code, message, fault) for a body that must be refused, else None."""
    if not body.strip():
        return None  # the route (or MCP) says what an empty body lacks
    try:
        value = read_json(body)
    except JsonInputError as error:
        return PARSE_ERROR, f"Parse error: {error}", error.fault
    if is_mcp and isinstance(value, list):
        message = (
            "Invalid Request: a JSON array (a JSON-RPC batch) is not accepted; "
            "send one message per request"
        )
        return INVALID_REQUEST, message, "batch"
    if is_mcp and not isinstance(value, dict):
        message = f"Invalid Request: a JSON-RPC message is an object, not {type(value).__name__}"
        return INVALID_REQUEST, message, "not_an_object"
    return None


class JsonBodies:
    """The ASGI check; every other request passes untouched."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in CHECKED_METHODS:
            await self.app(scope, receive, send)
            return
        path = str(scope.get("path", ""))
        is_mcp = path == "/mcp" or path.startswith("/mcp/")
        if not (is_mcp or _is_json(scope)):
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        refused = _refusal(body, is_mcp)
        if refused is not None and not is_mcp and refused[2] == "not_json":
            refused = None  # plain malformed JSON: the route's own 422 names where
        if refused is not None:
            code, detail, fault = refused
            if is_mcp:
                await _jsonrpc_error(send, code, detail)
            else:
                problem = ApiProblem(
                    "INVALID_REQUEST",
                    f"the body is not JSON the gateway can read exactly ({fault}): {detail}",
                )
                await problem_response(problem, path)(scope, receive, send)
            return
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)
