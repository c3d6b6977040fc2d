"""The step status page (``/ui/``): the article's groups, each step's story, and the
operator's actions, server-rendered for operators signed in with an operator key
(docs/status-page.md)."""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.responses import RedirectResponse

from toolsafe.gateway.state import Gateway
from toolsafe.gateway.ui import routes, streams
from toolsafe.gateway.ui.session import Sessions
from toolsafe.recovery.store import StepStore
from toolsafe.recovery.store.overview import Overview

__all__ = ["install"]


def install(app: FastAPI, gateway: Gateway) -> None:
    """Mount the page on the gateway's app; it reads the database store, so a gateway
    over the in-memory store (tests of other parts) has no page."""
    store = gateway.client.runtime.store
    if not isinstance(store, StepStore):
        return
    sessions = Sessions(gateway.authenticator, gateway.settings.ui_session_key)
    app.state.ui = routes.UiState(gateway, sessions, Overview(store.engine))
    app.include_router(routes.router)
    app.include_router(streams.router)

    @app.get("/ui", include_in_schema=False)
    def ui_root() -> RedirectResponse:
        return RedirectResponse("/ui/", status_code=307)
