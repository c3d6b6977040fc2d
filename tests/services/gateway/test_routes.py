"""Every route of the gateway, in process: the FastAPI app over a real SQLite store, the
client it serves built from ``toolsafe.testing`` (the scripted adapter, the recording
publisher; the pipeline's ``execute`` run here instead of a worker), requests through
Starlette's ``TestClient``. The fast loop; the real ``toolsafe serve`` with workers is
tested in tests/processes/gateway. ``test_every_route_has_a_test`` fails when a route
is added without one."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Final, TypeVar

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from tests.support.gateway.harness import bearer, make_key
from tests.support.gateway.in_process import in_process_gateway
from toolsafe.recovery.states import StepState
from toolsafe.tasks import pipeline
from toolsafe.tasks.client import Client
from toolsafe.testing import (
    SCRIPTED_TOOL,
    Hint,
    RecordingHints,
    Script,
    ScriptedAdapter,
    envelopes,
)

INPUT: Final = {"recipient_email": "a@example.com", "amount": 120}
NAMESPACE: Final = "team"
COVERED: set[tuple[str, str]] = set()
"""The (method, path) of every route a test below exercises, declared with ``covers``."""

F = TypeVar("F", bound=Callable[..., None])


def covers(*routes: str) -> Callable[[F], F]:
    """Declare the routes (``"GET /v1/tools"``) the decorated test requests."""

    def mark(test: F) -> F:
        COVERED.update((route.split(" ", 1)[0], route.split(" ", 1)[1]) for route in routes)
        return test

    return mark


@dataclass
class Gateway:
    app: FastAPI
    http: TestClient
    client: Client
    adapter: ScriptedAdapter
    hints: RecordingHints
    agent: dict[str, str]
    operator: dict[str, str]
    operator_key: str

    def step(self, ref: str, *answers: Script) -> str:
        """Submit ``ref`` over the gateway, then run it as a worker would, the adapter
        answering ``answers``; returns the ref as stored (inside the agent's namespace)."""
        made = self.http.post(
            f"/v1/tools/{SCRIPTED_TOOL}/calls",
            json={"input": INPUT},
            headers={**self.agent, "Idempotency-Key": ref},
        )
        assert made.status_code == 201, made.text
        stored: str = made.json()["operation_ref"]
        for answer in answers:
            self.adapter.answers.append(answer)
            pipeline.execute(self.client.runtime, self.hints, stored)
        return stored

    def state(self, ref: str) -> StepState:
        return self.client.view(ref).state


def routes(app: FastAPI) -> set[tuple[str, str]]:
    """Every (method, path) the app answers, the included routers' routes included."""
    found: set[tuple[str, str]] = set()
    for route in app.router.routes:
        contexts = getattr(route, "effective_route_contexts", None)
        for each in contexts() if contexts is not None else (route,):
            for method in getattr(each, "methods", None) or ():
                if method != "HEAD":
                    found.add((method, str(getattr(each, "path", ""))))
    return found


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    built = in_process_gateway(tmp_path_factory.mktemp("routes"), max_wait=0.5)
    url, app, client, adapter, hints = (
        built.url,
        built.app,
        built.client,
        built.adapter,
        built.hints,
    )
    agent_key = make_key(url, NAMESPACE, "agent")
    operator_key = make_key(url, "ops", "operator")
    with TestClient(app) as http:
        yield Gateway(
            app, http, client, adapter, hints, bearer(agent_key), bearer(operator_key),
            operator_key,
        )  # fmt: skip
    client.close()


@covers("GET /v1/tools")
def test_tools_lists_the_catalogue(gateway: Gateway) -> None:
    assert gateway.http.get("/v1/tools").status_code == 401
    [tool] = gateway.http.get("/v1/tools", headers=gateway.agent).json()["tools"]
    limit = gateway.client.runtime.policy_for(SCRIPTED_TOOL).retry.max_attempts
    assert (tool["name"], tool["writes"], tool["max_attempts"]) == (SCRIPTED_TOOL, True, limit)
    assert tool["input_schema"]["required"] == ["recipient_email", "amount"]


@covers("POST /v1/tools/{tool}/calls")
def test_submit_commits_publishes_once_and_a_repeat_is_the_same_step(gateway: Gateway) -> None:
    gateway.hints.take()
    path, headers = f"/v1/tools/{SCRIPTED_TOOL}/calls", {**gateway.agent, "Idempotency-Key": "r1"}
    made = gateway.http.post(path, json={"input": INPUT}, headers=headers)
    again = gateway.http.post(path, json={"input": INPUT}, headers=headers)
    assert (made.status_code, again.status_code) == (201, 200)
    assert made.headers["Location"] == f"/v1/calls/{NAMESPACE}/r1"
    assert made.json()["operation_ref"] == again.json()["operation_ref"] == f"{NAMESPACE}/r1"
    assert gateway.hints.take() == [Hint("execute", f"{NAMESPACE}/r1")]
    other = gateway.http.post(path, json={"input": {**INPUT, "amount": 1}}, headers=headers)
    assert (other.status_code, other.json()["code"]) == (409, "OPERATION_REF_CONFLICT")
    bad = gateway.http.post(path, json={"input": {"amount": "x"}}, headers=gateway.agent)
    assert bad.status_code == 422 and {e["field"] for e in bad.json()["errors"]} >= {"amount"}


@covers("GET /v1/calls/{operation_ref:path}")
def test_view_and_a_held_view(gateway: Gateway) -> None:
    ref = gateway.step("r2", envelopes.success)
    done = gateway.http.get(f"/v1/calls/{ref}", headers=gateway.agent)
    assert done.json()["state"] == "succeeded" and done.json()["envelope"]["ok"] is True
    pending = gateway.step("r2b")
    held = gateway.http.get(f"/v1/calls/{pending}", params={"wait": 5}, headers=gateway.agent)
    assert held.json()["state"] == "pending"  # held at most TOOLSAFE_GATEWAY_MAX_WAIT
    assert gateway.http.get("/v1/calls/other/r2", headers=gateway.agent).status_code == 404


@covers("POST /v1/calls/{operation_ref:path}/input")
def test_corrected_input_goes_out_under_the_same_ref(gateway: Gateway) -> None:
    ref = gateway.step("r3", envelopes.correct_input)
    assert gateway.state(ref) is StepState.NEEDS_INPUT
    path = f"/v1/calls/{ref}/input"
    same = gateway.http.post(path, json={"input": INPUT}, headers=gateway.agent)
    assert same.status_code == 409
    fixed = {**INPUT, "recipient_email": "b@example.com"}
    answer = gateway.http.post(path, json={"input": fixed}, headers=gateway.agent)
    assert answer.status_code == 200 and answer.json()["state"] == "pending"
    assert answer.json()["operation_ref"] == ref


@covers("POST /v1/calls/{operation_ref:path}/cancel")
def test_cancel(gateway: Gateway) -> None:
    ref = gateway.step("r4")
    path = f"/v1/calls/{ref}/cancel"
    answer = gateway.http.post(path, json={"reason": "not needed"}, headers=gateway.agent)
    assert answer.json()["state"] == "cancelled"
    assert gateway.http.post(path, json={"reason": ""}, headers=gateway.agent).status_code == 422


@covers("POST /v1/calls/{operation_ref:path}/cancel")
def test_a_cancel_when_possible_is_recorded_while_the_outcome_is_unknown(gateway: Gateway) -> None:
    ref = gateway.step("r4unknown", envelopes.unknown)
    assert gateway.state(ref) is StepState.VERIFYING
    path = f"/v1/calls/{ref}/cancel"
    refused = gateway.http.post(path, json={"reason": "not needed"}, headers=gateway.agent)
    assert refused.status_code == 409
    body = {"reason": "not needed", "when_possible": True}
    answer = gateway.http.post(path, json=body, headers=gateway.agent)
    # Recorded, not cancelled: a write verification finds must stay a success.
    assert answer.status_code == 200 and answer.json()["state"] == "verifying"
    assert "cancel_requested" in [event.kind for event in gateway.client.view(ref).history]


@pytest.mark.parametrize(("action", "state"), [("approve", "pending"), ("reject", "failed")])
@covers("POST /v1/calls/{operation_ref:path}/approve", "POST /v1/calls/{operation_ref:path}/reject")
def test_approve_and_reject_need_an_operator_key(gateway: Gateway, action: str, state: str) -> None:
    ref = gateway.step(f"r5{action}", envelopes.needs_approval)
    assert gateway.state(ref) is StepState.AWAITING_APPROVAL
    path, body = f"/v1/calls/{ref}/{action}", {"reason": "checked", "approver": "ana"}
    refused = gateway.http.post(path, json=body, headers=gateway.agent)
    assert (refused.status_code, refused.json()["code"]) == (403, "FORBIDDEN")
    answer = gateway.http.post(path, json=body, headers=gateway.operator)
    assert answer.status_code == 200 and answer.json()["state"] == state
    assert gateway.state(ref) is StepState(state)


@covers(
    "POST /v1/calls/{operation_ref:path}/resolve", "POST /v1/calls/{operation_ref:path}/redrive"
)
def test_resolve_and_redrive_an_escalated_step(gateway: Gateway) -> None:
    first, second = (gateway.step(ref, envelopes.escalate) for ref in ("r6a", "r6b"))
    assert gateway.state(first) is gateway.state(second) is StepState.ESCALATED
    resolve = f"/v1/calls/{first}/resolve"
    body = {"to": "succeeded", "reason": "found it", "operator": "ops"}
    missing = gateway.http.post(resolve, json=body, headers=gateway.operator)
    assert (missing.status_code, missing.json()["code"]) == (409, "EVIDENCE_REQUIRED")
    closed = gateway.http.post(
        resolve, json={**body, "evidence": "inv_81"}, headers=gateway.operator
    )
    assert closed.json()["state"] == "succeeded"
    redrive = gateway.http.post(
        f"/v1/calls/{second}/redrive", json={"reason": "fixed upstream"}, headers=gateway.operator
    )
    assert redrive.json()["state"] == "pending"


@covers("GET /v1/calls/{operation_ref:path}/events")
def test_events_stream_until_the_terminal_state(gateway: Gateway) -> None:
    ref = gateway.step("r7", envelopes.success)
    text = gateway.http.get(f"/v1/calls/{ref}/events", headers=gateway.agent).text
    assert re.findall(r"^event: (\w+)$", text, flags=re.MULTILINE)[0] == "submitted"
    assert text.rstrip().endswith('"state": "succeeded"}')
    # Each event carries the state it left the step in, not the state the step had when
    # the stream read it (a stream read after the end would say "succeeded" throughout).
    data = [json.loads(line) for line in re.findall(r"^data: (.*)$", text, flags=re.MULTILINE)]
    moved = [item for item in data[:-1] if item["to_state"]]
    assert moved and all(item["state"] == item["to_state"] for item in moved), data
    assert data[0]["state"] == "pending", data


@covers("POST /mcp", "GET /mcp", "DELETE /mcp")
def test_mcp_lists_the_tools_under_a_key(gateway: Gateway) -> None:
    request = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    accept = {"Accept": "application/json, text/event-stream"}
    for method in ("GET", "POST", "DELETE"):
        refused = gateway.http.request(method, "/mcp", json=request, headers=accept)
        assert refused.status_code == 401, method
    answer = gateway.http.post("/mcp", json=request, headers={**accept, **gateway.agent})
    assert answer.status_code == 200, answer.text
    assert SCRIPTED_TOOL in answer.text


def _login(gateway: Gateway) -> TestClient:
    http = gateway.http
    http.cookies.clear()
    answer = http.post("/ui/login", data={"key": gateway.operator_key, "next": "/ui/"},
                       follow_redirects=False)  # fmt: skip
    assert answer.status_code == 303, answer.text
    return http


@covers(
    "GET /ui",
    "GET /ui/login",
    "POST /ui/login",
    "GET /ui/",
    "GET /ui/steps/{operation_ref:path}",
    "POST /ui/act/{action}/{operation_ref:path}",
    "POST /ui/logout",
    "GET /ui/static/{name}",
)
def test_the_status_page_signs_in_shows_and_acts(gateway: Gateway) -> None:
    ref = gateway.step("r8", envelopes.needs_approval)
    http = gateway.http
    http.cookies.clear()
    assert http.get("/ui", follow_redirects=False).status_code in (302, 303, 307)
    assert "key" in http.get("/ui/login").text
    wrong = http.post("/ui/login", data={"key": "nope"}, follow_redirects=False)
    assert wrong.status_code == 401
    _login(gateway)
    assert ref in http.get("/ui/").text
    page = http.get(f"/ui/steps/{ref}").text
    [csrf] = re.findall(r'name="csrf" value="([^"]+)"', page)[:1]
    acted = http.post(f"/ui/act/approve/{ref}", data={"csrf": csrf, "reason": "fine"},
                      follow_redirects=False)  # fmt: skip
    assert acted.status_code == 303, acted.text
    assert gateway.state(ref) is StepState.PENDING
    stale = http.post(f"/ui/act/approve/{ref}", data={"csrf": "stale", "reason": "x"})
    assert stale.status_code == 403
    assert http.get("/ui/static/ui.css").status_code == 200
    assert http.get("/ui/static/nothing.css").status_code == 404
    out = http.post("/ui/logout", data={"csrf": csrf}, follow_redirects=False)
    assert out.status_code == 303
    assert http.get("/ui/", follow_redirects=False).status_code in (302, 303, 307)


@covers("GET /ui/stream/{operation_ref:path}", "GET /ui/events")
def test_the_status_page_streams(gateway: Gateway) -> None:
    ref = gateway.step("r9", envelopes.success)
    http = gateway.http
    http.cookies.clear()
    assert http.get("/ui/events").status_code == 401
    _login(gateway)
    stream = http.get(f"/ui/stream/{ref}").text
    assert "event: end" in stream and "succeeded" in stream
    assert http.get("/ui/events").text.startswith(": listening")  # ends at the max wait
    assert http.get("/ui/stream/team/none").status_code == 404


@covers(
    "GET /healthz", "GET /metrics", "GET /openapi.json", "GET /docs", "GET /docs/oauth2-redirect"
)
def test_health_metrics_and_the_documents(gateway: Gateway) -> None:
    assert gateway.http.get("/healthz").json()["ok"] is True
    assert "toolsafe_gateway" in gateway.http.get("/metrics").text
    document = gateway.http.get("/openapi.json").json()
    assert "/v1/tools/{tool}/calls" in document["paths"]
    assert "swagger" in gateway.http.get("/docs").text.lower()
    assert gateway.http.get("/docs/oauth2-redirect").status_code == 200


def test_every_route_has_a_test(gateway: Gateway) -> None:
    """Each route of the app is declared (``covers``) by a test above that requests it."""
    missing = sorted(routes(gateway.app) - COVERED)
    assert not missing, f"routes without an in-process test: {missing}"
    assert not COVERED - routes(gateway.app), "a test names a route the app does not have"
