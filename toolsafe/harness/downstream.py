"""The example downstream service as a child process (``python -m
toolsafe.adapters.examples.downstream``), with its control API: faults and effects."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolsafe.harness.errors import HarnessError
from toolsafe.harness.processes import Process, spawn

if TYPE_CHECKING:
    import httpx


class DownstreamProcess:
    """The downstream in a process of its own (naive by default: it stores every
    duplicate, so a duplicate write shows in ``effects()``)."""

    def __init__(
        self,
        directory: Path,
        env: Mapping[str, str],
        *,
        naive: bool = True,
        timeout: float = 20.0,
        name: str = "downstream",
    ) -> None:
        argv = [sys.executable, "-m", "toolsafe.adapters.examples.downstream"]
        argv += ["--host", "127.0.0.1", "--port", "0", *(["--naive"] if naive else [])]
        self.process: Process = spawn(name, argv, env=env, directory=directory)
        try:
            # Its first line of output is its URL.
            self.url = self.process.wait_for_output("http://", timeout).strip()
        except HarnessError:
            self.process.kill()
            raise
        import httpx

        self.http: httpx.Client = httpx.Client(base_url=self.url, timeout=10.0)

    def add_fault(self, operation_ref: str, fault: Mapping[str, Any]) -> None:
        reply = self.http.post("/_control/faults", json={**fault, "operation_ref": operation_ref})
        if reply.status_code != 201:
            raise HarnessError(f"the downstream refused a fault: {reply.text[:200]}")

    def effects(self) -> dict[str, int]:
        """Writes stored per operation_ref: the downstream's own record of the truth."""
        reply = self.http.get("/_control/effects")
        reply.raise_for_status()
        data: dict[str, int] = reply.json()
        return data

    def deduplicated(self) -> dict[str, int]:
        """Requests per operation_ref the downstream answered from its key (a replay of
        the stored record, or "key in flight"); always empty when it runs naive."""
        reply = self.http.get("/_control/deduplicated")
        reply.raise_for_status()
        data: dict[str, int] = reply.json()
        return data

    def stop(self, grace: float = 10.0) -> int:
        """Stop the service (SIGTERM; it exits 0); returns its exit code."""
        self.http.close()
        return self.process.stop(grace)
