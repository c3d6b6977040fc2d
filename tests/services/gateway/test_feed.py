"""Push completion: a waiter wakes at the commit that concerns it (LISTEN/NOTIFY on
PostgreSQL, one shared poller on SQLite), with no polling of its own, and recovers when
the listening connection is killed. Real PostgreSQL and Redis; no worker runs, another
client's action is the change waited for."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from sqlalchemy import event

from tests.support.pipeline.harness import Cluster, cluster_for, new_ref
from tests.support.recovery.store_support import sql_feed, sql_store
from toolsafe.harness import wait_until
from toolsafe.recovery.db import normalize_url
from toolsafe.recovery.schema import STEP_CHANNEL
from toolsafe.recovery.states import StepState
from toolsafe.recovery.store.sql.feed import LISTENER_NAME
from toolsafe.settings import Settings
from toolsafe.tasks.app import create_app
from toolsafe.tasks.async_client import AsyncClient
from toolsafe.tasks.client import Client, WaitTimeout

pytestmark = [pytest.mark.postgres, pytest.mark.redis]

INVOICE = {"customer_id": "cus_1", "amount_cents": 100, "currency": "EUR"}


@pytest.fixture(scope="module", params=["postgresql", "sqlite"])
def cluster(
    request: pytest.FixtureRequest,
    pg_url: str,
    redis_url: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Cluster]:
    directory = tmp_path_factory.mktemp("feed")
    sqlite = request.param == "sqlite"
    with cluster_for(pg_url, redis_url, directory, suffix="feed", sqlite=sqlite) as running:
        yield running


@pytest.fixture
def other(cluster: Cluster) -> Iterator[Client]:
    """A second client with engines of its own: the one that makes the change."""
    client = Client(create_app(Settings.from_env(cluster.env)))
    yield client
    client.close()


def _psycopg_url(cluster: Cluster) -> str:
    url = normalize_url(cluster.env["TOOLSAFE_DATABASE_URL"]).set(drivername="postgresql")
    return url.render_as_string(hide_password=False)


class Queries:
    """Counts the statements the waiting thread sends (the proof that it does not poll;
    SQLite's one shared poller runs in a thread of its own)."""

    def __init__(self, client: Client) -> None:
        self.count = 0
        self.thread = threading.get_ident()
        self.engine = sql_store(client.runtime.store).engine
        event.listen(self.engine, "before_cursor_execute", self._seen)

    def _seen(self, _conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        # Reads of the step store, not pool pings, BEGINs or PRAGMAs.
        reads = "FROM steps" in statement or "FROM step_events" in statement
        if reads and threading.get_ident() == self.thread:
            self.count += 1

    def close(self) -> None:
        event.remove(self.engine, "before_cursor_execute", self._seen)


def _cancel_later(
    client: Client, ref: str, delay: float, done: dict[str, float]
) -> threading.Thread:
    def run() -> None:
        time.sleep(delay)  # the wait must span a stretch in which nothing happens
        client.cancel(ref, "the test changed its mind")
        done["committed"] = time.monotonic()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_wait_returns_at_the_commit_without_polling(cluster: Cluster, other: Client) -> None:
    client = cluster.client
    ref = new_ref("feed/wait")
    client.submit("create_invoice", INVOICE, ref)
    if sql_feed(client.runtime).listens:
        sql_feed(client.runtime).subscribe("warm-up").close()  # the listener is up before we count
        assert sql_feed(client.runtime).connected.wait(10)
    queries = Queries(client)
    done: dict[str, float] = {}
    thread = _cancel_later(other, ref, 1.5, done)
    try:
        view = client.wait(ref, timeout=20)
        woke = time.monotonic()
    finally:
        thread.join(10)
        queries.close()
    assert view.state is StepState.CANCELLED
    # One read at the start; after the change one read and the view (step + events).
    # SQLite's poller, idle until this wait, wakes its new waiter once to re-read.
    # A poll every 50 ms over 1.5 s would have been 30 statements.
    assert queries.count <= (4 if sql_feed(client.runtime).listens else 5), queries.count
    assert woke - done["committed"] < 0.5


@pytest.mark.parametrize("cluster", ["postgresql"], indirect=True)  # SQLite: no listener
def test_waiters_recover_when_the_listening_connection_is_killed(
    cluster: Cluster, other: Client
) -> None:
    assert sql_feed(cluster.client.runtime).listens
    client = cluster.client
    feed = sql_feed(client.runtime)
    refs = [new_ref("feed/killed") for _ in range(5)]
    for ref in refs:
        client.submit("create_invoice", INVOICE, ref)
    results: dict[str, StepState] = {}
    heard: list[str | None] = []  # a watcher (the hint relay's way) is told of the gap
    feed.watch(heard.append)

    def wait(ref: str) -> None:
        results[ref] = client.wait(ref, timeout=30).state

    waiters = [threading.Thread(target=wait, args=(ref,)) for ref in refs]
    for waiter in waiters:
        waiter.start()
    deadline = time.monotonic() + 10
    while feed.waiting() < len(refs) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert feed.connected.wait(10)
    reconnects = feed.reconnects
    with psycopg.connect(_psycopg_url(cluster), autocommit=True) as admin:
        killed = admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE application_name = %s AND datname = current_database()",
            (LISTENER_NAME,),
        ).fetchall()
        assert killed and all(row[0] for row in killed)
        # Changes committed while nobody listens: only the re-read after the reconnect
        # can tell the waiters.
        for ref in refs:
            other.cancel(ref, "while the listener is down")
    for waiter in waiters:
        waiter.join(30)
    assert results == {ref: StepState.CANCELLED for ref in refs}
    assert feed.reconnects > reconnects
    feed.unwatch(heard.append)
    assert None in heard  # whatever committed while nobody listened: look again


@pytest.mark.parametrize("cluster", ["postgresql"], indirect=True)  # SQLite: no NOTIFY
def test_a_notification_is_delivered_at_the_commit_never_before(cluster: Cluster) -> None:
    assert sql_feed(cluster.client.runtime).listens
    url = _psycopg_url(cluster)
    ref = new_ref("feed/commit")
    with psycopg.connect(url, autocommit=True) as listener, psycopg.connect(url) as writer:
        listener.execute(f"LISTEN {STEP_CHANNEL}")
        writer.execute(
            "INSERT INTO step_events (operation_ref, at, kind, label, detail) "
            "VALUES (%s, now(), 'noop', 'test', '{}')",
            (ref,),
        )
        before = [n.payload for n in listener.notifies(timeout=0.5)]
        writer.commit()
        after = [n.payload for n in listener.notifies(timeout=2, stop_after=1)]
    assert ref not in before
    assert after == [ref]


def test_async_wait_is_woken_and_cancel_safe(cluster: Cluster, other: Client) -> None:
    client = AsyncClient(cluster.client)
    feed = sql_feed(cluster.client.runtime)
    ref = new_ref("feed/async")
    cluster.client.submit("create_invoice", INVOICE, ref)

    async def run() -> StepState:
        waiting = asyncio.create_task(client.wait(ref, timeout=30))
        await asyncio.sleep(0.3)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        assert feed.waiting() == 0, "a cancelled wait left its subscription behind"
        with pytest.raises(WaitTimeout):
            await client.wait(ref, timeout=0.2)
        done: dict[str, float] = {}
        thread = _cancel_later(other, ref, 0.5, done)
        view = await client.wait(ref, timeout=20)
        thread.join(10)
        return view.state

    assert asyncio.run(run()) is StepState.CANCELLED


@pytest.mark.parametrize("cluster", ["sqlite"], indirect=True)  # PostgreSQL listens instead
def test_the_poller_reads_nothing_while_nobody_waits(cluster: Cluster, tmp_path: Path) -> None:
    feed = sql_feed(cluster.client.runtime)
    assert not feed.listens
    deadline = time.monotonic() + 5
    while feed.waiting() and time.monotonic() < deadline:
        time.sleep(0.01)
    polls = feed.polls
    time.sleep(0.5)
    assert feed.polls - polls <= 1


def test_a_watcher_hears_every_change_and_a_reconnect(cluster: Cluster, other: Client) -> None:
    """What the hint relay watches: each change of any step, from any process, once per
    change (None after a reconnect: the test above); nothing once unwatched."""
    feed = sql_feed(cluster.client.runtime)
    heard: list[str | None] = []
    lock = threading.Lock()

    def watcher(ref: str | None) -> None:
        with lock:
            heard.append(ref)

    def times(ref: str) -> int:
        with lock:
            return heard.count(ref)

    feed.watch(watcher)
    try:
        assert feed.connected.wait(10)
        refs = [new_ref("feed/watched") for _ in range(3)]
        for ref in refs:
            other.submit("create_invoice", INVOICE, ref)
        other.cancel(refs[0], "a second change of the same step")
        wait_until(
            lambda: times(refs[0]) >= 2 and all(times(ref) for ref in refs[1:]),
            10,
            "every change to reach the watcher",
            interval=0.01,
        )
        assert times(refs[0]) == 2  # submitted, cancelled
    finally:
        feed.unwatch(watcher)
    count = len(heard)
    other.submit("create_invoice", INVOICE, new_ref("feed/unwatched"))
    time.sleep(0.3)
    assert len(heard) == count  # no longer told
