"""The view read on the event loop (``recovery/store/sql/loop_reads.py``) on a real
PostgreSQL store: a gateway that reads there and its twin that reads in a worker thread
(today's path, on the same client and store) answer ``GET /v1/calls/{operation_ref}``
with the same status, headers and bytes, a 404 and a store that is down included; a
connection the server killed is replaced on first use; the connections close with the
app. SQLite and the memory store keep the thread."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import httpx2
import psycopg
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy.engine import make_url

from tests.support.gateway.harness import bearer, make_key
from tests.support.gateway.in_process import InProcess, in_process_gateway, twin_gateway
from tests.support.recovery.databases import own_database
from toolsafe.harness.proxy import FaultProxy
from toolsafe.recovery.db import make_engine
from toolsafe.recovery.records import event_record
from toolsafe.recovery.store import StepNotFound
from toolsafe.recovery.store.memory.backend import memory_backend
from toolsafe.recovery.store.shared import needs_step
from toolsafe.recovery.store.sql import loop_reads as loop_reads_module
from toolsafe.recovery.store.sql import statements as sql
from toolsafe.recovery.store.sql.backend import sql_backend
from toolsafe.recovery.store.sql.loop_reads import APPLICATION_NAME, LoopReads
from toolsafe.recovery.store.sql.steps import StepStore
from toolsafe.tasks import pipeline
from toolsafe.tasks.async_client import AsyncClient
from toolsafe.testing import SCRIPTED_TOOL, envelopes
from toolsafe.testing.runtime import Script

INPUT: Final = {"recipient_email": "a@example.com", "amount": 120}
SCRIPTS: Final[dict[str, Script | None]] = {
    "done": envelopes.success,
    "fix-input": envelopes.correct_input,
    "approval": envelopes.needs_approval,
    "conflict": envelopes.escalate,
    "unknown": envelopes.unknown,
    "pending": None,  # no worker ran it
}


@pytest.fixture(scope="module")
def views_pg_url(pg_url: str) -> Iterator[str]:
    """A PostgreSQL database of this module's own (migrated by the gateway's builder)."""
    with own_database(pg_url, "loop_views") as url:
        yield url


def loop_connections(url: str) -> list[int]:
    """The server pids of the loop reads' connections to ``url``'s database."""
    parsed = make_url(url)
    with psycopg.connect(
        parsed.set(drivername="postgresql", database="postgres").render_as_string(False),
        autocommit=True,
    ) as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = %s AND datname = %s",
            (APPLICATION_NAME, parsed.database),
        ).fetchall()
    return [row[0] for row in rows]


def kill_loop_connections(url: str) -> int:
    """Terminate the loop reads' server processes on ``url``'s database; returns once
    they are gone (their connections closed by the server)."""
    pids = loop_connections(url)
    admin = make_url(url).set(drivername="postgresql", database="postgres")
    with psycopg.connect(admin.render_as_string(False), autocommit=True) as conn:
        for pid in pids:
            conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
    deadline = time.monotonic() + 10
    while set(pids) & set(loop_connections(url)):
        assert time.monotonic() < deadline, "the terminated backends did not exit"
        time.sleep(0.02)
    return len(pids)


@dataclass
class Twins:
    built: InProcess
    loop: TestClient  # reads on the event loop
    thread: TestClient  # today's path: the read in a worker thread
    headers: dict[str, str]
    refs: dict[str, str]  # name → operation_ref

    @property
    def reads(self) -> LoopReads:
        app: FastAPI = self.loop.app  # type: ignore[assignment]
        reads = app.state.gateway.views.reads
        assert isinstance(reads, LoopReads)
        return reads

    def same(self, path: str) -> httpx2.Response:
        """The loop's answer to ``path``, checked equal to the thread's, byte for byte."""
        loop = self.loop.get(path, headers=self.headers)
        thread = self.thread.get(path, headers=self.headers)
        assert (loop.status_code, loop.content) == (thread.status_code, thread.content), path
        assert loop.headers.multi_items() == thread.headers.multi_items(), path
        return loop


@contextlib.contextmanager
def twins(built: InProcess, headers: dict[str, str], *, auth: bool = True) -> Iterator[Twins]:
    """``built``'s app (reading on the loop) and a twin on its client made to read in
    a worker thread, both running (their lifespans started)."""
    with TestClient(built.app) as loop, TestClient(twin_gateway(built, auth=auth)) as thread:
        state = thread.app.state.gateway  # type: ignore[attr-defined]
        assert state.views.reads is not None  # PostgreSQL: it would read on the loop too
        state.views = state.aclient  # ... but takes today's path
        yield Twins(built, loop, thread, headers, {})


def submit_all(twins: Twins) -> None:
    """One step per script, run once by the pipeline (``pending`` left as submitted)."""
    for name, script in SCRIPTS.items():
        made = twins.loop.post(
            f"/v1/tools/{SCRIPTED_TOOL}/calls",
            json={"input": INPUT},
            headers={**twins.headers, "Idempotency-Key": name},
        )
        assert made.status_code == 201, made.text
        ref = made.json()["operation_ref"]
        twins.refs[name] = ref
        if script is not None:
            twins.built.adapter.answers.append(script)
            pipeline.execute(twins.built.client.runtime, twins.built.hints, ref)


@pytest.fixture(scope="module")
def served(views_pg_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Twins]:
    built = in_process_gateway(tmp_path_factory.mktemp("loop"), max_wait=0.3, url=views_pg_url)
    agent = bearer(make_key(views_pg_url, "team", "agent"))
    try:
        with twins(built, agent) as both:
            submit_all(both)
            yield both
    finally:
        built.client.close()


def test_on_postgresql_the_view_reads_on_the_loop_elsewhere_in_a_thread(
    served: Twins, tmp_path: Path
) -> None:
    assert served.reads is not None
    assert served.built.client.runtime.backend.has("loop_reads")
    engine = make_engine(f"sqlite:///{tmp_path / 'steps.db'}")
    try:
        assert not sql_backend(StepStore(engine), dispose=False).has("loop_reads")
    finally:
        engine.dispose()
    assert not memory_backend().has("loop_reads")


def test_every_state_reads_the_same_bytes_either_way(served: Twins) -> None:
    states = set()
    for name, ref in served.refs.items():
        view = served.same(f"/v1/calls/{ref}")
        assert view.status_code == 200, view.text
        states.add(view.json()["state"])
        assert served.same(f"/v1/calls/{ref}?wait=0").content == view.content
        assert served.same(f"/v1/calls/{name}").content == view.content  # by its short name
        # The full way (FastAPI's routing) reads on the loop too.
        assert served.same(f"/v1/calls/{ref}?wait=0&by=the-route").content == view.content
        held = served.same(f"/v1/calls/{ref}?wait=0.05")
        assert held.json()["state"] == view.json()["state"]
    assert {"succeeded", "needs_input", "awaiting_approval", "escalated", "pending"} <= states


def test_a_held_wait_looks_on_the_loop_with_the_same_answer(served: Twins) -> None:
    """With a live worker's heartbeat a ``?wait=`` is held (``settle``): its looks read
    on the loop; the answer at the wait's end, or at once for a settled step, is the
    thread's."""
    runtime = served.built.client.runtime
    workers = runtime.backend.workers
    workers.beat("loop-views-worker", 1, ["toolsafe"], now=runtime.now())
    try:
        for state in (served.loop, served.thread):
            state.app.state.gateway._live = None  # type: ignore[attr-defined]
        for name, ref in served.refs.items():
            held = served.same(f"/v1/calls/{ref}?wait=0.05")
            assert held.status_code == 200, held.text
            assert held.json()["hint"] is None, name  # held, not answered as no_worker
    finally:
        workers.forget("loop-views-worker")
        for state in (served.loop, served.thread):
            state.app.state.gateway._live = None  # type: ignore[attr-defined]


def test_the_records_are_the_store_s(served: Twins) -> None:
    store = served.built.client.runtime.store
    engine = store.engine  # type: ignore[attr-defined]
    reads = LoopReads(engine)
    with engine.connect() as conn:
        stored = [
            event_record(row)
            for ref in served.refs.values()
            for row in conn.execute(sql.EVENTS, {"ref": ref})
        ]
    # Some events name their step's envelope: the second statement fills them in.
    assert any(needs_step(event) for event in stored)

    async def read_all() -> None:
        try:
            for ref in served.refs.values():
                assert await reads.get(ref) == store.get(ref)
                assert await reads.events(ref) == store.events(ref)
        finally:
            await reads.aclose()

    asyncio.run(read_all())


def test_an_unknown_or_impossible_ref_is_the_same_404(served: Twins) -> None:
    for path in ("/v1/calls/team/nothing-here", "/v1/calls/bad ref", "/v1/calls/nothing?wait=0.05"):
        missing = served.same(path)
        assert (missing.status_code, missing.json()["code"]) == (404, "STEP_NOT_FOUND")

    async def absent() -> None:
        reads = LoopReads(served.built.client.runtime.store.engine)  # type: ignore[attr-defined]
        try:
            with pytest.raises(StepNotFound):
                await reads.get("team/nothing-here")
        finally:
            await reads.aclose()

    asyncio.run(absent())


def test_a_connection_the_server_killed_is_replaced_on_first_use(served: Twins) -> None:
    path = f"/v1/calls/{served.refs['done']}"
    first = served.same(path)
    opened = served.reads.opened
    assert kill_loop_connections(served.built.url) >= 1
    assert served.same(path).content == first.content
    assert served.reads.opened == opened + 1


def test_a_connection_lost_under_a_read_is_read_again_on_a_new_one(
    served: Twins, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    path = f"/v1/calls/{served.refs['fix-input']}"
    first = served.same(path)
    opened = served.reads.opened
    # Not seen dead while idle: the read itself meets the lost connection.
    monkeypatch.setattr(loop_reads_module, "_has_input", lambda conn: False)
    assert kill_loop_connections(served.built.url) >= 1
    with caplog.at_level(logging.WARNING, logger="toolsafe.store"):
        assert served.same(path).content == first.content
    assert served.reads.opened == opened + 1
    assert [getattr(record, "event", None) for record in caplog.records] == ["db_retry"]


def test_the_connections_close_with_the_gateway(views_pg_url: str, tmp_path: Path) -> None:
    built = in_process_gateway(tmp_path, max_wait=0.3, url=views_pg_url, auth=False)
    others = set(loop_connections(views_pg_url))  # other gateways' (this module's twins)
    try:
        with TestClient(built.app) as http:
            made = http.post(f"/v1/tools/{SCRIPTED_TOOL}/calls", json={"input": INPUT})
            assert http.get(made.headers["location"]).status_code == 200
            reads = built.app.state.gateway.views.reads
            assert isinstance(reads, LoopReads) and reads.opened >= 1
            mine = set(loop_connections(views_pg_url)) - others
            assert mine
        assert built.app.state.gateway.views.reads is None
        deadline = time.monotonic() + 10
        while mine & set(loop_connections(views_pg_url)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not mine & set(loop_connections(views_pg_url))
    finally:
        built.client.close()


def test_a_store_that_is_down_is_the_same_problem(views_pg_url: str, tmp_path: Path) -> None:
    server = make_url(views_pg_url)
    proxy = FaultProxy((server.host or "127.0.0.1", server.port or 5432), name="pg").start()
    closed = False
    built = in_process_gateway(tmp_path, max_wait=0.3, url=proxy.url(views_pg_url), auth=False)
    try:
        with twins(built, {}, auth=False) as both:
            made = both.loop.post(
                f"/v1/tools/{SCRIPTED_TOOL}/calls",
                json={"input": INPUT},
                headers={"Idempotency-Key": "down"},
            )
            path = made.headers["location"]
            assert both.same(path).status_code == 200
            proxy.close()  # every connection cut, every new one refused
            closed = True
            for query in ("", "?wait=0", "?wait=0.05"):
                down = both.same(path + query)
                assert (down.status_code, down.json()["code"]) == (503, "STORE_UNAVAILABLE")
                assert down.headers["retry-after"]
    finally:
        if not closed:
            proxy.close()
        built.client.close()


def test_an_async_client_without_reads_keeps_the_thread(served: Twins) -> None:
    client = AsyncClient(served.built.client)
    assert client.reads is None
    view = asyncio.run(client.view(served.refs["done"]))
    assert view == served.built.client.view(served.refs["done"])
