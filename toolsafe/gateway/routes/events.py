"""``GET /v1/calls/{operation_ref}/events``: the step's changes as Server-Sent Events.

Each event row is one SSE event (``id`` = the event's id, ``event`` = its kind, ``data``
= its safe view as JSON, with ``state``: the step's state once that event had happened,
the same whenever the stream is read); the stream ends with ``event: end`` at a terminal state, or
after ``TOOLSAFE_GATEWAY_MAX_WAIT`` seconds, or when the store cannot be read (reconnect
with ``Last-Event-ID``; that request is 503 ``STORE_UNAVAILABLE`` until the store is back).
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from typing import Annotated, Final

from fastapi import APIRouter, Depends, Header
from fastapi.responses import StreamingResponse
from sqlalchemy.exc import DBAPIError
from starlette.concurrency import run_in_threadpool

from toolsafe.gateway.auth import Caller
from toolsafe.gateway.models import HistoryItem
from toolsafe.gateway.problems import (
    RETRY_AFTER_UNAVAILABLE,
    WAIT_OR_KEY_LIMIT,
    documented,
    from_error,
    log,
)
from toolsafe.gateway.routes.calls import PROBLEMS
from toolsafe.gateway.state import Gateway, gateway
from toolsafe.recovery.states import TERMINAL
from toolsafe.recovery.store import EventRecord
from toolsafe.tasks.views import history

router = APIRouter(tags=["calls"])

KEEPALIVE_SECONDS: Final = 15.0
STREAM: Final = {
    "description": "one SSE event per state change; `event: end` at a terminal state",
    "content": {"text/event-stream": {"schema": {"type": "string"}}},
}


def sse(event: EventRecord, state: str) -> str:
    (entry,) = history([event])
    item = HistoryItem.model_validate(
        {
            "at": entry.at,
            "kind": entry.kind,
            "from_state": entry.from_state,
            "to_state": entry.to_state,
            "label": entry.label,
            "detail": entry.detail,
        }
    )
    data = {"id": event.id, "state": state, **item.model_dump(mode="json")}
    return f"id: {event.id}\nevent: {event.kind}\ndata: {json.dumps(data)}\n\n"


async def step_stream(state: Gateway, ref: str, after: int) -> AsyncIterator[str]:
    """The step's events after ``after`` as SSE text, until a terminal state or
    ``TOOLSAFE_GATEWAY_MAX_WAIT``; counted as a held wait while it runs."""
    store = state.client.runtime.store
    last = after
    deadline = time.monotonic() + state.settings.gateway.max_wait
    state.waits += 1
    try:
        with state.client.runtime.feed.subscribe(ref) as changes:
            while True:
                try:
                    step = await run_in_threadpool(store.get, ref)
                    found = await run_in_threadpool(store.events, ref)
                except DBAPIError as error:
                    if from_error(error).code != "STORE_UNAVAILABLE":
                        raise
                    # The answer has begun: no 503 can be sent now. End the stream as at
                    # the wait limit (a complete response, not a broken one); the
                    # reconnection with Last-Event-ID is 503 until the store is back.
                    log.warning(
                        "event stream of %s ended: the store cannot be reached",
                        ref,
                        extra={"event": "gateway_error", "code": "STORE_UNAVAILABLE"},
                    )
                    yield f": store unavailable\nretry: {RETRY_AFTER_UNAVAILABLE * 1000}\n\n"
                    return
                # The state each event left the step in, from the events themselves:
                # the step read above may already be past the newest event read here
                # (or behind it), so it cannot stand for any one event's state.
                reached = ""
                for event in found:
                    reached = str(event.to_state) if event.to_state else reached
                    if event.id > last:
                        last = event.id
                        yield sse(event, reached or str(step.state))
                if step.state in TERMINAL:
                    end = {"operation_ref": ref, "state": str(step.state)}
                    yield f"event: end\ndata: {json.dumps(end)}\n\n"
                    return
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return
                if not await changes.wait_async(min(remaining, KEEPALIVE_SECONDS)):
                    yield ": keep-alive\n\n"
    finally:
        state.leave_wait()


@router.get(
    "/calls/{operation_ref:path}/events",
    response_class=StreamingResponse,
    summary="The step's state changes as Server-Sent Events",
    responses={200: STREAM, 429: documented(WAIT_OR_KEY_LIMIT), **PROBLEMS},
)
async def events(
    operation_ref: str,
    principal: Caller,
    state: Annotated[Gateway, Depends(gateway)],
    last_event_id: Annotated[
        str | None, Header(alias="Last-Event-ID", description="resume after this event")
    ] = None,
) -> StreamingResponse:
    ref = principal.existing(operation_ref)
    store = state.client.runtime.store
    await run_in_threadpool(store.get, ref)  # 404 before the stream starts
    after = int(last_event_id) if last_event_id and last_event_id.isdigit() else 0
    state.enter_wait()  # refused here (429) rather than in a stream already begun
    state.leave_wait()  # counted again once the stream runs, so a stream never started
    # (the client went away first) holds no count
    return StreamingResponse(
        step_stream(state, ref, after),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )
