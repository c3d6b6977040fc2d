"""What the MCP client hears when the step store fails under a request: one clear
JSON-RPC error (``-32603``), never the driver's raw text. A database without toolsafe's
schema says to run ``toolsafe migrate``, as the CLI does."""

from __future__ import annotations

import logging
from typing import Any, Final

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types import INTERNAL_ERROR
from sqlalchemy.exc import DBAPIError

from toolsafe.recovery.db import schema_missing

log = logging.getLogger("toolsafe.mcp")

NO_SCHEMA: Final = "the database has no toolsafe schema: run `toolsafe migrate` first"
UNAVAILABLE: Final = (
    "the step store is unavailable (STORE_UNAVAILABLE); ask again later with the same "
    "operation_ref: a repeated call never writes twice"
)


class StoreFailures:
    """A server middleware: the store's errors as JSON-RPC errors a host can show."""

    async def __call__(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        try:
            return await call_next(ctx)
        except DBAPIError as error:
            if schema_missing(error):
                raise MCPError(INTERNAL_ERROR, NO_SCHEMA, {"code": "SCHEMA_MISSING"}) from None
            log.warning(
                "%s: the step store failed (%s)",
                ctx.method,
                type(error.orig).__name__,
                extra={"event": "mcp_store_unavailable"},
            )
            raise MCPError(INTERNAL_ERROR, UNAVAILABLE, {"code": "STORE_UNAVAILABLE"}) from None
