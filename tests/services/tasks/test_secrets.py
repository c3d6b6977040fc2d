"""Secret input fields at rest, on SQLite and PostgreSQL: sealed in the row, never in
events, views, the CLI or the task message; opened only for the downstream call; keys
rotate; a worker without the key sends nothing."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import redis
from sqlalchemy import select, text

from tests.support.pipeline.harness import fresh_database
from tests.support.recovery.store_support import LEASE, sql_store
from tests.support.recovery.stores import empty
from toolsafe.recovery.db import make_engine, migrate
from toolsafe.recovery.schema import step_events, steps
from toolsafe.recovery.secrets import SEALED, SecretBox, new_key
from toolsafe.recovery.states import StepState
from toolsafe.recovery.store import OperationRefConflict
from toolsafe.recovery.store.sql.retention import reseal_inputs
from toolsafe.settings import Settings, SettingsError
from toolsafe.tasks import pipeline
from toolsafe.tasks.app import create_app
from toolsafe.tasks.client import Client

pytestmark = [pytest.mark.redis]

TOKEN = "tok_live_Very-Secret-Value-123"
INPUT = {"account": "acct_1", "api_token": TOKEN}


class Downstream:
    """A real HTTP server that records what it was sent and answers 201 with an id."""

    def __init__(self) -> None:
        bodies: list[dict[str, Any]] = []
        self.bodies = bodies

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                bodies.append(json.loads(self.rfile.read(length)))
                payload = json.dumps({"id": f"con_{len(bodies)}"}).encode()
                self.send_response(201)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: Any) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"


class Hints:
    def __init__(self) -> None:
        self.sent: list[tuple[str, str]] = []

    def execute(
        self,
        operation_ref: str,
        due_at: datetime | None,
        now: datetime,
        *,
        tool: str | None = None,
        recovery: bool = False,
    ) -> bool:
        self.sent.append(("execute", operation_ref))
        return True

    def verify(
        self, operation_ref: str, due_at: datetime | None, now: datetime, *, tool: str | None = None
    ) -> bool:
        self.sent.append(("verify", operation_ref))
        return True

    def escalation(self, operation_ref: str, *, tool: str | None = None) -> None:
        self.sent.append(("escalation", operation_ref))


@pytest.fixture(scope="module")
def downstream() -> Iterator[Downstream]:
    server = Downstream()
    yield server
    server.server.shutdown()
    server.server.server_close()


@pytest.fixture(scope="module")
def secrets_pg_url(pg_url: str) -> Iterator[str]:
    with fresh_database(pg_url, "secrets") as url:
        yield url


@pytest.fixture(params=[pytest.param("postgresql", marks=pytest.mark.postgres), "sqlite"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'secrets.db'}"
        migrate(url)
        return url
    found: str = request.getfixturevalue("secrets_pg_url")
    engine = make_engine(found)
    empty(engine)
    engine.dispose()
    return found


def _client(
    database: str, redis_url: str, downstream: Downstream, monkeypatch: pytest.MonkeyPatch,
    keys: tuple[str, ...],
) -> Client:  # fmt: skip
    monkeypatch.setenv("TOOLSAFE_TEST_SECRET_URL", downstream.url)
    settings = Settings().replace(
        store={"url": database},
        broker={"url": redis_url},
        tools={"adapter_modules": ("tests.support.tasks.secret_adapters",), "secret_keys": keys},
    )
    return Client(create_app(settings))


def _dump(client: Client) -> str:
    with sql_store(client.runtime.store).engine.connect() as conn:
        rows = [dict(row._mapping) for row in conn.execute(select(steps)).all()]
        events = [dict(row._mapping) for row in conn.execute(select(step_events)).all()]
    return json.dumps([rows, events], default=str)


def test_sealed_at_rest_opened_only_for_the_call(
    database: str, redis_url: str, downstream: Downstream, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    key = new_key()
    client = _client(database, redis_url, downstream, monkeypatch, (key,))
    try:
        ref = f"secret/{database[:6]}/1"
        view = client.submit("connect_account", INPUT, operation_ref=ref)
        stored = client.runtime.store.get(ref).input
        assert set(stored["api_token"]) == {SEALED} and stored["account"] == "acct_1"
        assert SecretBox((key,)).open(stored)["api_token"] == TOKEN
        # Same call again (a repeat) is the same step; another token is another call.
        assert client.submit("connect_account", dict(INPUT), operation_ref=ref).operation_ref == ref
        with pytest.raises(OperationRefConflict):
            client.submit("connect_account", {**INPUT, "api_token": "other"}, operation_ref=ref)
        # The task message (what Flower shows as args) names the step only.
        queued = redis.Redis.from_url(redis_url).lrange("toolsafe.execute", 0, -1)
        messages = [json.loads(raw) for raw in queued]
        mine = [m for m in messages if ref in m["headers"]["argsrepr"]]
        assert mine and all(TOKEN not in json.dumps(m) for m in mine)
        # A worker opens it for the downstream call, and only there.
        assert pipeline.execute(client.runtime, Hints(), ref) == "succeed"
        assert downstream.bodies[-1] == {"account": "acct_1", "token": TOKEN}
        after = client.view(ref)
        assert after.state is StepState.SUCCEEDED
        shown = json.dumps([view.as_dict(), after.as_dict()], default=str)
        assert TOKEN not in shown and TOKEN not in _dump(client)
        assert TOKEN not in repr(client.runtime.settings) and key not in repr(
            client.runtime.settings
        )
        from toolsafe.cli import ops

        monkeypatch.setattr(ops, "_client", lambda: client)
        from toolsafe.cli.main import main

        assert main(["steps", "show", ref, "--json"]) == 0
        assert main(["steps", "list", "--json"]) == 0
        assert TOKEN not in capsys.readouterr().out
    finally:
        client.close()


def test_keys_rotate_and_a_missing_key_sends_nothing(
    database: str, redis_url: str, downstream: Downstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    old, new = new_key(), new_key()
    first = _client(database, redis_url, downstream, monkeypatch, (old,))
    try:
        first.submit("connect_account", INPUT, operation_ref="secret/rot/1")
        first.submit("connect_account", INPUT, operation_ref="secret/rot/2")
    finally:
        first.close()
    rotated = _client(database, redis_url, downstream, monkeypatch, (new, old))
    try:
        # The new key comes first; the old one still opens what it sealed.
        assert rotated.submit("connect_account", INPUT, operation_ref="secret/rot/1")
        box = rotated.runtime.secret_box
        assert box is not None
        assert reseal_inputs(sql_store(rotated.runtime.store), box.rotate) == 2
        assert (
            SecretBox((new,)).open(rotated.runtime.store.get("secret/rot/1").input)["api_token"]
            == TOKEN
        )
    finally:
        rotated.close()
    only_new = _client(database, redis_url, downstream, monkeypatch, (new,))
    try:
        # After the re-seal the old key can go: a repeat still is the same call.
        only_new.submit("connect_account", INPUT, operation_ref="secret/rot/2")
    finally:
        only_new.close()
    stranger = _client(database, redis_url, downstream, monkeypatch, (new_key(),))
    try:
        sent = len(downstream.bodies)
        assert pipeline.execute(stranger.runtime, Hints(), "secret/rot/2") == "escalate"
        step = stranger.runtime.store.get("secret/rot/2")
        assert step.state is StepState.ESCALATED and step.reason == "SECRET_KEY_MISSING"
        assert len(downstream.bodies) == sent
    finally:
        stranger.close()


def test_a_secret_tool_needs_a_key(
    database: str, redis_url: str, downstream: Downstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = _client(database, redis_url, downstream, monkeypatch, ())
    try:
        with pytest.raises(SettingsError, match="TOOLSAFE_SECRET_KEYS"):
            client.submit("connect_account", INPUT)
        with sql_store(client.runtime.store).engine.connect() as conn:
            assert conn.execute(text("SELECT count(*) FROM steps")).scalar() == 0
    finally:
        client.close()


def test_corrected_input_keeps_the_secret_sealed_and_compares_it_opened(
    database: str, redis_url: str, downstream: Downstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    from toolsafe.adapters import codes
    from toolsafe.recovery.outcomes import Executed
    from toolsafe.tasks.runtime import utcnow

    client = _client(database, redis_url, downstream, monkeypatch, (new_key(),))
    try:
        ref = "secret/fix/1"
        client.submit("connect_account", INPUT, operation_ref=ref)
        store = client.runtime.store
        claim = store.claim_execution(ref, "w", LEASE, utcnow())
        assert claim is not None
        flagged = codes.build_error(
            codes.INVALID_INPUT, ref, {"field": "account", "fields": "account"}
        )
        runtime = client.runtime
        tool = "connect_account"
        store.record(
            claim, Executed(flagged), traits=runtime.traits_for(tool),
            policy=runtime.policy_for(tool), now=utcnow(), rng=runtime.rng,
        )  # fmt: skip
        assert client.runtime.store.get(ref).state is StepState.NEEDS_INPUT
        fixed = client.provide_input(ref, {**INPUT, "account": "acct_2"})
        assert fixed.state is StepState.PENDING
        provided = next(e for e in store.events(ref) if e.kind == "input_provided")
        # The token is re-sealed (a new Fernet token) but did not change: only the account.
        assert provided.detail["changed_fields"] == ["account"]
        stored = client.runtime.store.get(ref).input
        assert set(stored["api_token"]) == {SEALED} and stored["account"] == "acct_2"
        assert TOKEN not in _dump(client)
    finally:
        client.close()
