"""The gateway in this process over a SQLite store (or a PostgreSQL one given by URL)
and the scripted adapter, for the route tests that drive it through ``TestClient`` (no
worker: a test runs a step with ``toolsafe.tasks.pipeline`` itself)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from fastapi import FastAPI

from toolsafe.adapters.registry import Registry
from toolsafe.gateway.app import create_gateway
from toolsafe.recovery.db import migrate
from toolsafe.settings import Settings
from toolsafe.tasks.client import Client
from toolsafe.tasks.runtime import Runtime
from toolsafe.testing import RecordingHints, ScriptedAdapter


@dataclass(frozen=True)
class InProcess:
    url: str  # the store's
    app: FastAPI
    client: Client
    adapter: ScriptedAdapter
    hints: RecordingHints


def in_process_gateway(
    directory: Path, max_wait: float, *, url: str | None = None, auth: bool = True
) -> InProcess:
    """A migrated SQLite store in ``directory`` (or the store at ``url``, migrated) and a
    gateway app on it whose waits end after ``max_wait`` seconds (``auth=False``: the
    development mode); close ``client`` when done."""
    url = url if url is not None else f"sqlite:///{directory / 'toolsafe.db'}"
    migrate(url)
    settings = Settings().replace(store={"url": url}, gateway={"max_wait": max_wait})
    registry = Registry()
    adapter = ScriptedAdapter()
    registry.register(adapter)
    hints = RecordingHints()
    client = Client(runtime=Runtime(settings, registry=registry), hints=hints)
    app = create_gateway(settings, client=client, auth=auth)
    return InProcess(url, app, client, adapter, hints)


def twin_gateway(built: InProcess, *, auth: bool = True) -> FastAPI:
    """A second gateway app on ``built``'s client (the same store and adapter)."""
    return create_gateway(built.client.runtime.settings, client=built.client, auth=auth)
