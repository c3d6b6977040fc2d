"""``toolsafe mcp`` with no settings at all (the embedded default: ``toolsafe.db`` and
the file-system broker in the current folder), as a host starts it: it lists the tools
and takes a call, which stays queued (no worker here) and is answered in progress."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import anyio
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from tests.mcp.support import meta, structured

INVOICE = {"customer_id": "cus_1", "amount_cents": 100, "currency": "EUR"}


def test_mcp_starts_on_the_embedded_default_with_no_settings(tmp_path: Path) -> None:
    env = {key: value for key, value in os.environ.items() if not key.startswith("TOOLSAFE_")}
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "toolsafe", "mcp", "--wait", "0.2"],
        env=env,
        cwd=str(tmp_path),
    )

    async def run() -> None:
        log = tmp_path / "mcp.log"
        with log.open("w", encoding="utf-8") as errlog:
            async with (
                stdio_client(params, errlog=errlog) as (read, write),
                ClientSession(read, write) as session,
            ):
                await session.initialize()
                names = [tool.name for tool in (await session.list_tools()).tools]
                assert names == ["create_invoice", "send_email"]
                answer = await session.call_tool(
                    "create_invoice", dict(INVOICE), meta=meta({"toolsafe/operation_ref": "e/1"})
                )
                assert answer.is_error is False
                assert structured(answer)["in_progress"] is True
                assert structured(answer)["state"] == "pending"
        text = log.read_text(encoding="utf-8")
        assert "embedded default" in text and "TOOLSAFE_BROKER_URL=filesystem://" in text

    anyio.run(run)
    assert (tmp_path / "toolsafe.db").exists() and (tmp_path / "toolsafe-broker").is_dir()
