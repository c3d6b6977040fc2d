"""The store and the broker go down while a real ``toolsafe serve`` is at work, and come
back: what docs/gateway.md promises for 503s, held waits and event streams, against a
PostgreSQL cluster and a ``redis-server`` of the test's own (the shared ones are never
stopped), with a real worker (and its beat) and the example downstream in naive mode.

Down from the start is tested in ``test_http.py``; here the gateway, its pooled and
listening connections and its cached keys were all in use when the service went away."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from tests.support.gateway.harness import GatewayServer, bearer, gateway_for, make_key
from tests.support.machine import session_machine
from tests.support.pipeline import harness as pipeline
from tests.support.pipeline.harness import Cluster, cluster_for, new_ref
from tests.support.private_postgres import PrivateCluster, private_postgres
from toolsafe.harness import Process
from toolsafe.harness.redis_server import RedisServer
from toolsafe.recovery.states import StepState

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.slow]

S = StepState
INVOICE = {"customer_id": "cus_mid", "amount_cents": 900, "currency": "EUR"}
NAMESPACE = "midrun-agent"
SUBMIT = "/v1/tools/create_invoice/calls"
# ?wait= of a request held when the store goes down and ending while it is down.
SHORT_WAIT = 4


@dataclass
class MidRun:
    postgres: PrivateCluster
    broker: RedisServer
    cluster: Cluster
    worker: Process
    server: GatewayServer
    token: str

    def http(self, timeout: float = 30) -> httpx.Client:
        return httpx.Client(base_url=self.server.url, headers=bearer(self.token), timeout=timeout)

    def waits(self) -> int:
        """Requests holding a wait or a stream, as the gateway's liveness probe says."""
        answer = httpx.get(f"{self.server.url}/healthz", timeout=10)
        assert answer.status_code == 200, answer.text
        held: int = answer.json()["waits"]
        return held

    def state(self, ref: str) -> StepState:
        return self.cluster.client.runtime.store.get(ref).state

    def succeeded(self, ref: str) -> Callable[[], bool]:
        return lambda: self.state(ref) is S.SUCCEEDED


@pytest.fixture(scope="module")
def midrun(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MidRun]:
    directory = tmp_path_factory.mktemp("midrun")
    broker = RedisServer(directory)
    broker.start()
    try:
        with private_postgres() as postgres:
            base = postgres.admin_url.replace("postgresql://", "postgresql+psycopg://")
            try:
                with cluster_for(base, broker.url(1), directory, suffix="midrun") as cluster:
                    token = make_key(cluster.env["TOOLSAFE_DATABASE_URL"], NAMESPACE, "agent")
                    worker = cluster.start_worker("midrun", concurrency=2)
                    with gateway_for(cluster.env, directory) as server:
                        yield MidRun(postgres, broker, cluster, worker, server, token)
            finally:
                # This cluster's emptied database is of no use to a later module.
                pipeline._EMPTIED.pop(base, None)
    finally:
        broker.stop()


def submit(http: httpx.Client, key: str) -> httpx.Response:
    return http.post(SUBMIT, json={"input": INVOICE}, headers={"Idempotency-Key": key})


def assert_unavailable(answer: httpx.Response, code: str = "STORE_UNAVAILABLE") -> None:
    """The documented 503: a problem document with its code and a Retry-After."""
    assert answer.status_code == 503, answer.text
    assert answer.headers["content-type"] == "application/problem+json"
    assert answer.json()["code"] == code, answer.text
    assert answer.headers["Retry-After"].isdigit()


@dataclass
class Held:
    """One request run in a thread of its own (a ``?wait=`` held by the gateway)."""

    http: httpx.Client
    path: str
    params: dict[str, Any]
    answer: httpx.Response | None = None
    error: BaseException | None = None
    done: threading.Event = field(default_factory=threading.Event)

    def start(self) -> Held:
        threading.Thread(target=self._run, daemon=True).start()
        return self

    def _run(self) -> None:
        try:
            self.answer = self.http.get(self.path, params=self.params)
        except BaseException as error:  # reported by the test, not lost in the thread
            self.error = error
        finally:
            self.done.set()

    def result(self) -> httpx.Response:
        assert self.error is None, repr(self.error)
        assert self.answer is not None
        return self.answer


@dataclass
class Follower:
    """A client of ``/events`` that does what docs/gateway.md tells one to: read events,
    open the stream again after the last event seen when the gateway ends it before
    ``event: end``, and come back after ``Retry-After`` when it answers 503."""

    http: httpx.Client
    path: str
    events: list[tuple[int | None, str, dict[str, Any]]] = field(default_factory=list)
    early_ends: int = 0
    refusals: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    connected: threading.Event = field(default_factory=threading.Event)
    done: threading.Event = field(default_factory=threading.Event)

    def start(self) -> Follower:
        threading.Thread(target=self._run, daemon=True).start()
        return self

    def _run(self) -> None:
        last: int | None = None
        try:
            while True:
                headers = {} if last is None else {"Last-Event-ID": str(last)}
                with self.http.stream("GET", self.path, headers=headers) as answer:
                    if answer.status_code == 503:
                        answer.read()
                        self.refusals.append(str(answer.json().get("code")))
                        time.sleep(int(answer.headers["Retry-After"]))
                        continue
                    if answer.status_code != 200:
                        answer.read()
                        self.failures.append(f"{answer.status_code}: {answer.text}")
                        return
                    self.connected.set()
                    for kind, ident, data in _parse(answer.iter_lines()):
                        self.events.append((ident, kind, data))
                        if ident is not None:
                            last = ident
                        if kind == "end":
                            return
                    self.early_ends += 1
        except httpx.HTTPError as error:  # a broken stream is no documented ending
            self.failures.append(repr(error))
        finally:
            self.done.set()


def _parse(lines: Iterator[str]) -> Iterator[tuple[str, int | None, dict[str, Any]]]:
    """Server-Sent Events: (event, id, data) per event; comments (keep-alives) skipped."""
    kind, ident, data = "message", None, ""
    for line in lines:
        if line == "":
            if data:
                yield kind, ident, json.loads(data)
            kind, ident, data = "message", None, ""
        elif line.startswith(":"):
            continue
        else:
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if name == "event":
                kind = value
            elif name == "id":
                ident = int(value)
            elif name == "data":
                data += value


def retried(midrun: MidRun, http: httpx.Client, key: str) -> httpx.Response:
    """Submit as a client told "retry after Retry-After" does: until it is not 503."""
    answers: list[httpx.Response] = []

    def answered() -> bool:
        answers.append(submit(http, key))
        return answers[-1].status_code != 503

    midrun.cluster.wait_for(answered, timeout=60, what="the store to be back", interval=1)
    return answers[-1]


def test_the_store_going_down_mid_run(midrun: MidRun) -> None:
    cluster, server = midrun.cluster, midrun.server
    assert server.process is not None
    pid = server.process.pid
    factor = session_machine().factor
    with midrun.http() as http, midrun.http(timeout=120) as holder:
        # Calls succeed.
        warm = new_ref("midrun/store/warm")
        assert submit(http, warm).status_code == 201
        cluster.wait_for(lambda: midrun.state(f"{NAMESPACE}/{warm}") is S.SUCCEEDED)
        assert http.get(f"/v1/calls/{warm}").json()["state"] == "succeeded"

        # A step the downstream rate-limits stays open across the outage: a ?wait and the
        # event stream hold on it when the store goes down.
        held = new_ref("midrun/store/held")
        ref = f"{NAMESPACE}/{held}"
        # Long enough to outlast the set-up below, short enough for the long wait to see
        # the step succeed within its 60 s (TOOLSAFE_GATEWAY_MAX_WAIT).
        rate_limited = min(int(8 * factor), 20)
        cluster.fault(fault="rate_limit", operation_ref=ref, retry_after=rate_limited)
        assert submit(http, held).status_code == 201
        cluster.wait_for(lambda: midrun.state(ref) is S.WAITING_RETRY, what="the rate limit")
        follower = Follower(holder, f"/v1/calls/{held}/events").start()
        cluster.wait_for(follower.connected.is_set, what="the event stream")
        long_wait = Held(holder, f"/v1/calls/{held}", {"wait": 60}).start()
        short_wait = Held(holder, f"/v1/calls/{held}", {"wait": SHORT_WAIT}).start()
        cluster.wait_for(lambda: midrun.waits() == 3, what="two waits and a stream held")

        midrun.postgres.kill()
        try:
            assert not short_wait.done.is_set(), "the short wait ended before the outage"
            # The liveness probe answers; a submit (twice, with the same key) and a view
            # are 503 STORE_UNAVAILABLE with Retry-After.
            assert httpx.get(f"{server.url}/healthz", timeout=10).status_code == 200
            during = new_ref("midrun/store/during")
            for _ in range(2):
                assert_unavailable(submit(http, during))
            assert_unavailable(http.get(f"/v1/calls/{held}"))
            # A wait that ends while the store is down answers 503 too.
            cluster.wait_for(short_wait.done.is_set, what="the short wait's answer")
            assert_unavailable(short_wait.result())
            # The stream ends (the gateway re-reads the step at least every keep-alive);
            # the client's reconnection with Last-Event-ID is 503 until the store is back.
            cluster.wait_for(
                lambda: (
                    follower.done.is_set()
                    or (follower.early_ends >= 1 and len(follower.refusals) >= 1)
                ),
                timeout=40,
                what="the stream to end and its reconnection to be refused",
            )
            assert follower.failures == [], follower.failures
            assert set(follower.refusals) == {"STORE_UNAVAILABLE"}
            # The long wait is still held, and the gateway is the same process.
            assert not long_wait.done.is_set()
            assert server.alive() and server.process.pid == pid
        finally:
            midrun.postgres.run("start")

        # The same gateway serves again: the submit retried with the same key is one step
        # (201: the 503s committed nothing), then the same step (200), and one effect.
        first = retried(midrun, http, during)
        assert first.status_code == 201, first.text
        again = submit(http, during)
        assert again.status_code == 200, again.text
        assert again.json()["operation_ref"] == first.json()["operation_ref"]
        full = f"{NAMESPACE}/{during}"
        cluster.wait_for(lambda: midrun.state(full) is S.SUCCEEDED, timeout=60)
        assert cluster.effects(full) == 1

        # The long wait held through the outage answers with the step succeeded, and the
        # stream, reopened after its last event, ends with it: every event once, in order.
        cluster.wait_for(long_wait.done.is_set, timeout=60, what="the long wait's answer")
        view = long_wait.result()
        assert view.status_code == 200, view.text
        assert view.json()["state"] == "succeeded", view.json()
        cluster.wait_for(follower.done.is_set, timeout=60, what="the stream's end")
        assert follower.failures == [], follower.failures
        _, kind, data = follower.events[-1]
        assert (kind, data["state"]) == ("end", "succeeded")
        seen = [event_id for event_id, _, _ in follower.events if event_id is not None]
        stored = [event.id for event in cluster.client.runtime.store.events(ref)]
        assert seen == stored
        assert cluster.effects(ref) == 1
        assert cluster.effects(f"{NAMESPACE}/{warm}") == 1
        assert server.alive() and server.process.pid == pid


def test_the_broker_going_down_mid_run(midrun: MidRun) -> None:
    cluster, server = midrun.cluster, midrun.server
    with midrun.http() as http:
        before = new_ref("midrun/broker/before")
        assert submit(http, before).status_code == 201
        cluster.wait_for(lambda: midrun.state(f"{NAMESPACE}/{before}") is S.SUCCEEDED)

        midrun.broker.kill()
        acknowledged: list[str] = []
        try:
            # R2: the commit is what a submit acknowledges; a broker that refuses the hint
            # does not fail it (docs/gateway.md, Idempotency).
            for number in range(3):
                key = new_ref(f"midrun/broker/down{number}")
                answer = submit(http, key)
                assert answer.status_code == 201, answer.text
                acknowledged.append(f"{NAMESPACE}/{key}")
            # The store answers: the steps are there, and nothing reached the downstream.
            for key in acknowledged:
                view = http.get(f"/v1/calls/{key.removeprefix(NAMESPACE + '/')}")
                assert view.status_code == 200, view.text
                assert view.json()["terminal"] is False
                assert cluster.effects(key) == 0
            assert httpx.get(f"{server.url}/healthz", timeout=10).status_code == 200
            assert server.alive()
        finally:
            midrun.broker.restart(down=0)

        # The worker's main process survived; its sweeper publishes the hints that were
        # never sent, and every acknowledged step reaches the downstream exactly once.
        after = new_ref("midrun/broker/after")
        assert submit(http, after).status_code == 201
        for key in [*acknowledged, f"{NAMESPACE}/{after}"]:
            cluster.wait_for(midrun.succeeded(key), timeout=60)
            assert cluster.effects(key) == 1
        assert cluster.effects(f"{NAMESPACE}/{before}") == 1
        assert midrun.worker.alive(), midrun.worker.text()[-4000:]
        assert server.alive()
