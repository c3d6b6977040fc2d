"""The status page's live updates: a step's events (the gateway's own stream of them)
and, for the overview, "something changed" whenever any step does. Both are
authenticated by the session cookie and count as held waits."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Final

from fastapi import APIRouter, Request
from fastapi.responses import Response, StreamingResponse
from starlette.concurrency import run_in_threadpool

from toolsafe.gateway.routes.events import KEEPALIVE_SECONDS, step_stream
from toolsafe.gateway.state import Gateway
from toolsafe.gateway.ui.routes import step_ref, ui_state
from toolsafe.recovery.store import StepNotFound
from toolsafe.recovery.store.feed import ANY

router = APIRouter(prefix="/ui", include_in_schema=False)

OVERVIEW_COALESCE: Final = 0.5
"""The overview stream tells of changes at most this often (the page re-reads them all)."""


def _unauthorized() -> Response:
    return Response("sign in first", status_code=401, media_type="text/plain")


@router.get("/stream/{operation_ref:path}", response_model=None)
async def step_events(request: Request, operation_ref: str, after: str = "0") -> Response:
    """The step's events after ``after`` (the page's last), from the gateway's stream."""
    ui = ui_state(request)
    session = await run_in_threadpool(ui.sessions.of, request)
    if session is None:
        return _unauthorized()
    ref = step_ref(session, operation_ref)
    store = ui.gateway.client.runtime.store
    try:
        if ref is None:
            raise StepNotFound(operation_ref)
        await run_in_threadpool(store.get, ref)
    except StepNotFound:
        return Response("no such step", status_code=404, media_type="text/plain")
    resume = request.headers.get("last-event-id", after)
    ui.gateway.enter_wait()
    ui.gateway.leave_wait()
    return StreamingResponse(
        step_stream(ui.gateway, ref, int(resume) if resume.isdigit() else 0),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


@router.get("/events", response_model=None)
async def overview_events(request: Request) -> Response:
    """``event: changed`` whenever any step changes (at most every half second): the
    overview reads itself again."""
    ui = ui_state(request)
    session = await run_in_threadpool(ui.sessions.of, request)
    if session is None:
        return _unauthorized()
    ui.gateway.enter_wait()
    ui.gateway.leave_wait()
    return StreamingResponse(
        _changes(ui.gateway),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


async def _changes(state: Gateway) -> AsyncIterator[str]:
    deadline = time.monotonic() + state.settings.gateway.max_wait
    state.waits += 1
    try:
        with state.client.runtime.feed.subscribe(ANY) as changes:
            yield ": listening\n\n"
            while (remaining := deadline - time.monotonic()) > 0:
                if await changes.wait_async(min(remaining, KEEPALIVE_SECONDS)):
                    yield "event: changed\ndata: {}\n\n"
                    await asyncio.sleep(OVERVIEW_COALESCE)
                else:
                    yield ": keep-alive\n\n"
    finally:
        state.leave_wait()
