"""The step status page (``/ui/``): the article's groups, each step's story, and the
operator's actions, server-rendered for operators signed in with an operator key
(docs/status-page.md)."""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.responses import PlainTextResponse, RedirectResponse

from toolsafe.gateway.state import Gateway
from toolsafe.gateway.ui import routes, streams
from toolsafe.gateway.ui.session import Sessions
from toolsafe.recovery.store import FeatureMissing

__all__ = ["install"]


def install(app: FastAPI, gateway: Gateway) -> None:
    """Mount the page on the gateway's app. It reads the store's overview; over a store
    without one (``memory://``), every ``/ui`` address answers 501 and says so."""
    try:
        overview = gateway.client.runtime.backend.overview
    except FeatureMissing as error:
        _refuse(app, error)
        return
    sessions = Sessions(gateway.authenticator, gateway.settings.gateway.ui_session_key)
    app.state.ui = routes.UiState(gateway, sessions, overview)
    app.include_router(routes.router)
    app.include_router(streams.router)

    @app.get("/ui", include_in_schema=False)
    def ui_root() -> RedirectResponse:
        return RedirectResponse("/ui/", status_code=307)


def _refuse(app: FastAPI, error: FeatureMissing) -> None:
    message = f"the status page is not available: {error}\n"

    @app.get("/ui", include_in_schema=False)
    @app.get("/ui/{path:path}", include_in_schema=False)
    def no_status_page() -> PlainTextResponse:
        return PlainTextResponse(message, status_code=501)
