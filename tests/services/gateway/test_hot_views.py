"""The hot view's lane (``toolsafe.gateway.hot``), in process over a real SQLite store:
whichever way a ``GET /v1/calls/{operation_ref}`` goes — the lane, for a known key and
a plain query, or FastAPI's full way — the caller gets the same answer, byte for byte;
refusals, limits, metrics, revocation and dependency overrides hold in the lane too."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

import httpx2
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, update

from tests.support.gateway.harness import bearer, make_key
from tests.support.gateway.in_process import in_process_gateway
from toolsafe.gateway import auth, hot
from toolsafe.gateway.auth import Principal, caller
from toolsafe.recovery.schema import api_keys
from toolsafe.tasks import pipeline
from toolsafe.tasks.runtime import utcnow
from toolsafe.testing import SCRIPTED_TOOL, envelopes

INPUT: Final = {"recipient_email": "a@example.com", "amount": 120}
FULL_WAY: Final = "&by=the-route"
"""A query parameter the route ignores and the lane does not take: the full way."""


@dataclass
class Served:
    app: FastAPI
    http: TestClient
    url: str
    agent: dict[str, str]
    done: str  # a succeeded step of the agent's namespace
    pending: str  # a step no worker ran


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    built = in_process_gateway(tmp_path_factory.mktemp("hot"), max_wait=0.3)
    url, app, client, adapter, hints = (
        built.url,
        built.app,
        built.client,
        built.adapter,
        built.hints,
    )
    agent = bearer(make_key(url, "team", "agent"))
    with TestClient(app) as http:
        refs = []
        for name in ("done", "pending"):
            made = http.post(
                f"/v1/tools/{SCRIPTED_TOOL}/calls",
                json={"input": INPUT},
                headers={**agent, "Idempotency-Key": name},
            )
            assert made.status_code == 201, made.text
            refs.append(made.json()["operation_ref"])
        adapter.answers.append(envelopes.success)
        pipeline.execute(client.runtime, hints, refs[0])
        yield Served(app, http, url, agent, refs[0], refs[1])
    client.close()


def both_ways(served: Served, path: str, query: str, headers: dict[str, str]) -> httpx2.Response:
    """The answer of the lane to ``path?query``, checked equal to the full way's."""
    lane = served.http.get(f"{path}?{query}" if query else path, headers=headers)
    full = served.http.get(f"{path}?{query or 'wait=0'}{FULL_WAY}", headers=headers)
    assert (lane.status_code, lane.content) == (full.status_code, full.content)
    for name in ("content-type", "www-authenticate", "retry-after"):
        assert lane.headers.get(name) == full.headers.get(name), name
    return lane


def test_the_lane_is_built_for_the_gateway_and_sees_the_routes_beside_it(served: Served) -> None:
    lane = hot.lane_of(served.app)
    assert lane is not None and lane.pattern.match("/v1/calls/team/done")
    others = {pattern.pattern for pattern in lane.others}
    assert r"^/v1/calls/(?P<operation_ref>.*)/events$" in others
    assert not any("/ui/" in pattern for pattern in others)


def test_a_known_key_reads_the_same_view_either_way(served: Served) -> None:
    view = both_ways(served, f"/v1/calls/{served.done}", "", served.agent)
    assert view.status_code == 200 and view.json()["state"] == "succeeded"
    assert view.json()["envelope"]["ok"] is True
    # Inside the namespace by its short name too, and held (it is terminal: at once).
    assert both_ways(served, "/v1/calls/done", "wait=5", served.agent).content == view.content
    held = both_ways(served, f"/v1/calls/{served.pending}", "wait=0.05", served.agent)
    assert held.json()["state"] == "pending"


def test_refusals_are_the_same_problems_either_way(served: Served) -> None:
    missing = both_ways(served, "/v1/calls/team/nothing-here", "", served.agent)
    assert (missing.status_code, missing.json()["code"]) == (404, "STEP_NOT_FOUND")
    unnamable = both_ways(served, "/v1/calls/bad ref", "", served.agent)
    assert unnamable.status_code == 404
    for headers in ({}, bearer("tsk_nobody_secret"), {"Authorization": "Basic eDp5"}):
        refused = both_ways(served, f"/v1/calls/{served.done}", "", headers)
        assert (refused.status_code, refused.json()["code"]) == (401, "UNAUTHENTICATED")
        assert refused.headers["www-authenticate"].startswith("Bearer")


@pytest.mark.parametrize("query", ["wait=-1", "wait=86401", "wait=abc", "wait=1e3", "wait="])
def test_a_query_the_lane_does_not_take_gets_the_route_s_validation(
    served: Served, query: str
) -> None:
    answer = served.http.get(f"/v1/calls/{served.done}?{query}", headers=served.agent)
    if query == "wait=1e3":  # a float the route reads (1000 s, held at most max_wait)
        assert answer.status_code == 200 and answer.json()["state"] == "succeeded"
        return
    assert (answer.status_code, answer.json()["code"]) == (422, "INVALID_REQUEST")


def test_plain_waits() -> None:
    assert hot.plain_wait(b"") == 0.0
    assert hot.plain_wait(b"wait=30.000") == 30.0
    assert hot.plain_wait(b"wait=86400") == 86_400.0
    for query in (b"wait=86400.5", b"wait=-1", b"wait=1e3", b"wait=1&wait=2", b"x=1", b"wait"):
        assert hot.plain_wait(query) is None, query


def test_a_path_another_route_takes_is_left_to_it(served: Served) -> None:
    stream = served.http.get(f"/v1/calls/{served.done}/events", headers=served.agent)
    assert stream.headers["content-type"].startswith("text/event-stream")
    assert "event: end" in stream.text


def test_limits_and_metrics_see_the_lane(served: Served) -> None:
    huge = {**served.agent, "X-Padding": "x" * 70_000}
    too_large = served.http.get(f"/v1/calls/{served.done}", headers=huge)
    assert (too_large.status_code, too_large.json()["code"]) == (431, "HEADERS_TOO_LARGE")

    def count() -> float:
        text = served.http.get("/metrics").text
        line = re.search(
            r'^toolsafe_gateway_requests_total\{method="GET",'
            r'route="/v1/calls/\{operation_ref\}",status="200"\} (\S+)$',
            text,
            re.M,
        )
        return 0.0 if line is None else float(line.group(1))

    before = count()
    for _ in range(3):
        assert served.http.get(f"/v1/calls/{served.done}", headers=served.agent).is_success
    assert count() == before + 3


def test_a_revoked_key_is_refused_once_its_check_is_stale(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    token = make_key(served.url, "leaving", "agent", "team")
    path = f"/v1/calls/{served.done}"
    assert served.http.get(path, headers=bearer(token)).status_code == 200
    engine = create_engine(served.url)
    with engine.begin() as conn:
        leaving = api_keys.c.name == "leaving"
        conn.execute(update(api_keys).where(leaving).values(revoked_at=utcnow()))
    engine.dispose()
    monkeypatch.setattr(auth, "CACHE_SECONDS", 0.0)  # the verified key's time is up
    refused = served.http.get(path, headers=bearer(token))
    assert (refused.status_code, refused.json()["code"]) == (401, "UNAUTHENTICATED")


def test_dependency_overrides_are_honoured(served: Served) -> None:
    served.app.dependency_overrides[caller] = lambda: Principal("other", "agent", "elsewhere")
    try:
        # The known key's request now acts as another namespace's caller: not found.
        answer = served.http.get(f"/v1/calls/{served.done}", headers=served.agent)
    finally:
        served.app.dependency_overrides.clear()
    assert answer.status_code == 404
