"""Issue 28 (part 4), in process: bad tokens for an existing key id are 401 until
``TOOLSAFE_GATEWAY_AUTH_FAILURES``, then 429 with ``Retry-After`` from that address,
while the key's good token from another address still passes and the limit lifts after
``TOOLSAFE_GATEWAY_AUTH_WINDOW``. The FastAPI app over a real SQLite store and real keys
(scrypt included), requests through Starlette's ``TestClient``; the window's clock is
the test's."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from tests.support.gateway.harness import bearer, make_key
from toolsafe.adapters.registry import Registry
from toolsafe.gateway.app import create_gateway
from toolsafe.gateway.auth import Authenticator
from toolsafe.recovery.db import migrate
from toolsafe.settings import Settings
from toolsafe.tasks.client import Client
from toolsafe.tasks.runtime import Runtime
from toolsafe.testing import RecordingHints, ScriptedAdapter

FAILURES: Final = 3
WINDOW: Final = 60.0
ATTACKER: Final = ("203.0.113.66", 40000)
AGENT: Final = ("198.51.100.7", 40001)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Gateway:
    app: FastAPI
    attacker: TestClient
    agent: TestClient
    token: str
    clock: Clock

    @property
    def bad(self) -> str:
        """A token of the agent's key id with a wrong secret."""
        return self.token[: len("tsk_") + 16] + "_" + "x" * 43


@pytest.fixture
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    url = f"sqlite:///{tmp_path_factory.mktemp('bad_tokens') / 'toolsafe.db'}"
    migrate(url)
    settings = Settings().replace(
        store={"url": url}, gateway={"auth_failures": FAILURES, "auth_window": WINDOW}
    )
    registry = Registry()
    registry.register(ScriptedAdapter())
    client = Client(runtime=Runtime(settings, registry=registry), hints=RecordingHints())
    token = make_key(url, "team", "agent")
    app = create_gateway(settings, client=client)
    clock = Clock()
    authenticator: Authenticator = app.state.authenticator
    authenticator.failures.clock = clock
    # One client runs the app's lifespan (it can run once); the other only sends.
    with TestClient(app, client=ATTACKER) as attacker:
        yield Gateway(app, attacker, TestClient(app, client=AGENT), token, clock)
    client.close()


def test_bad_tokens_are_401_then_429_with_retry_after_and_the_limit_lifts(
    gateway: Gateway,
) -> None:
    for _ in range(FAILURES):
        refused = gateway.attacker.get("/v1/tools", headers=bearer(gateway.bad))
        assert refused.status_code == 401, refused.text
        assert refused.json()["code"] == "UNAUTHENTICATED"
    gateway.clock.now += 10
    limited = gateway.attacker.get("/v1/tools", headers=bearer(gateway.bad))
    assert limited.status_code == 429, limited.text
    assert limited.headers["content-type"].startswith("application/problem+json")
    assert limited.headers["Retry-After"] == str(int(WINDOW - 10))
    problem = limited.json()
    assert problem["code"] == "TOO_MANY_BAD_KEYS" and problem["status"] == 429
    assert problem["type"] == "urn:toolsafe:problem:too-many-bad-keys"
    # Refused before anything is checked: even the good token, from that address.
    assert gateway.attacker.get("/v1/tools", headers=bearer(gateway.token)).status_code == 429

    # The key's good token from another address still verifies, and /mcp agrees.
    assert gateway.agent.get("/v1/tools", headers=bearer(gateway.token)).status_code == 200
    assert gateway.agent.get("/v1/tools", headers=bearer(gateway.bad)).status_code == 401
    mcp = gateway.attacker.post("/mcp", json={}, headers=bearer(gateway.bad))
    assert mcp.status_code == 429 and mcp.json()["code"] == "TOO_MANY_BAD_KEYS"

    gateway.clock.now += WINDOW - 10  # the failures (all at once) leave the window
    for _ in range(FAILURES):
        again = gateway.attacker.get("/v1/tools", headers=bearer(gateway.bad))
        assert again.status_code == 401, again.text
    assert gateway.attacker.get("/v1/tools", headers=bearer(gateway.bad)).status_code == 429


def test_a_verified_token_is_never_limited_from_the_attacked_address(gateway: Gateway) -> None:
    # The agent's key is verified once (from the address the attack will come from).
    assert gateway.attacker.get("/v1/tools", headers=bearer(gateway.token)).status_code == 200
    for _ in range(FAILURES + 2):
        gateway.attacker.get("/v1/tools", headers=bearer(gateway.bad))
    assert gateway.attacker.get("/v1/tools", headers=bearer(gateway.bad)).status_code == 429
    assert gateway.attacker.get("/v1/tools", headers=bearer(gateway.token)).status_code == 200


def test_every_v1_route_documents_the_429(gateway: Gateway) -> None:
    document = gateway.agent.get("/openapi.json").json()
    for path, operations in document["paths"].items():
        if path.startswith("/v1/"):
            for method, operation in operations.items():
                assert "429" in operation["responses"], (method, path)


def test_the_status_page_login_shares_the_limit(gateway: Gateway) -> None:
    for _ in range(FAILURES - 1):
        refused = gateway.attacker.get("/v1/tools", headers=bearer(gateway.bad))
        assert refused.status_code == 401
    login = gateway.attacker.post("/ui/login", data={"key": gateway.bad}, follow_redirects=False)
    assert login.status_code == 401  # the last failure the window allows
    login = gateway.attacker.post("/ui/login", data={"key": gateway.bad}, follow_redirects=False)
    assert login.status_code == 429 and login.headers["Retry-After"] == str(int(WINDOW))
    assert "too many failed checks" in login.text
    login = gateway.agent.post("/ui/login", data={"key": gateway.bad}, follow_redirects=False)
    assert login.status_code == 401  # another address: its own count
