"""The gateway over real HTTP: a ``toolsafe serve`` process, real PostgreSQL and Redis,
real workers and the example downstream (naive: every duplicate write would show)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.support.gateway.harness import ROOT, GatewayServer, bearer, gateway_for, make_key
from tests.support.pipeline.harness import Cluster, cluster_for, new_ref
from toolsafe.adapters.envelope import to_wire
from toolsafe.adapters.errors import UnknownToolError
from toolsafe.gateway.client import AsyncGatewayClient, GatewayClient, GatewayError
from toolsafe.recovery.outcomes import TransitionRefused
from toolsafe.recovery.states import StepState
from toolsafe.recovery.store import OperationRefConflict, StepNotFound
from toolsafe.tasks.client import InvalidInput
from toolsafe.tasks.faults import write_plan

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.slow]

INVOICE = {"customer_id": "cus_1", "amount_cents": 100, "currency": "EUR"}
EMAIL = {"recipient_email": "ana@exmaple.com", "subject": "Hi", "body": "Thanks."}


@dataclass
class Setup:
    cluster: Cluster
    server: GatewayServer
    directory: Path
    agent_a: str
    agent_b: str
    operator: str

    def http(self, token: str | None = None) -> httpx.Client:
        return httpx.Client(
            base_url=self.server.url, headers=bearer(token) if token else {}, timeout=30
        )

    def client(self, token: str) -> GatewayClient:
        return GatewayClient(self.server.url, token, timeout=30)


@pytest.fixture(scope="module")
def setup(pg_url: str, redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    directory = tmp_path_factory.mktemp("gateway")
    with cluster_for(pg_url, redis_url, directory, suffix="gateway") as cluster:
        database = cluster.env["TOOLSAFE_DATABASE_URL"]
        keys = (
            make_key(database, "agent-a", "agent", "team-a"),
            make_key(database, "agent-b", "agent", "team-b"),
            make_key(database, "ops", "operator"),
        )
        cluster.start_worker("gw", concurrency=2)
        with gateway_for(cluster.env, directory) as server:
            yield Setup(cluster, server, directory, *keys)


def test_submit_and_wait_for_the_envelope(setup: Setup) -> None:
    ref = new_ref("gw/flow")
    with setup.http(setup.agent_a) as http:
        made = http.post(
            "/v1/tools/create_invoice/calls",
            json={"input": INVOICE},
            headers={"Idempotency-Key": ref},
        )
        assert made.status_code == 201, made.text
        assert made.headers["Location"] == f"/v1/calls/team-a/{ref}"
        body = made.json()
        assert body["operation_ref"] == f"team-a/{ref}"
        assert body["history"][0]["detail"]["actor"] == "key:agent-a"
        done = http.get(made.headers["Location"], params={"wait": 20})
        assert done.status_code == 200
        view = done.json()
    assert view["state"] == "succeeded", view
    assert view["envelope"]["ok"] is True and view["envelope"]["commit_state"] == "committed"
    assert setup.cluster.effects(f"team-a/{ref}") == 1


def test_without_a_key_every_route_is_401(setup: Setup) -> None:
    paths = [
        ("GET", "/v1/tools"),
        ("POST", "/v1/tools/create_invoice/calls"),
        ("GET", "/v1/calls/x"),
        ("GET", "/v1/calls/x/events"),
        *[("POST", f"/v1/calls/x/{action}") for action in ("input", "cancel", "approve")],
        *[("POST", f"/v1/calls/x/{action}") for action in ("reject", "resolve", "redrive")],
    ]
    with setup.http() as http:
        for method, path in paths:
            for headers in (
                {},
                {"Authorization": "Bearer tsk_0123456789abcdef_wrongwrongwrongwrong"},
            ):
                answer = http.request(method, path, headers=headers, json={})
                assert answer.status_code == 401, (method, path, answer.text)
                assert answer.headers["content-type"] == "application/problem+json"
                assert answer.json()["code"] == "UNAUTHENTICATED"
                assert answer.headers["WWW-Authenticate"].startswith("Bearer")


def test_same_key_from_20_connections_makes_one_step_and_one_effect(setup: Setup) -> None:
    ref = new_ref("gw/race")
    barrier = threading.Barrier(20)
    answers: list[httpx.Response] = []
    lock = threading.Lock()

    def submit() -> None:
        with setup.http(setup.agent_a) as http:  # a connection of its own
            barrier.wait()
            answer = http.post(
                "/v1/tools/create_invoice/calls",
                json={"input": INVOICE},
                headers={"Idempotency-Key": ref},
            )
        with lock:
            answers.append(answer)

    threads = [threading.Thread(target=submit) for _ in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    statuses = sorted(answer.status_code for answer in answers)
    assert statuses == [200] * 19 + [201], [a.text for a in answers if a.status_code >= 300]
    assert {answer.json()["operation_ref"] for answer in answers} == {f"team-a/{ref}"}
    with setup.client(setup.agent_a) as client:
        assert client.wait(ref, timeout=20).state is StepState.SUCCEEDED
    store = setup.cluster.client.runtime.store
    assert len([e for e in store.events(f"team-a/{ref}") if e.kind == "submitted"]) == 1
    assert setup.cluster.effects(f"team-a/{ref}") == 1


def test_refusals_are_problems_with_the_clients_codes(setup: Setup) -> None:
    ref = new_ref("gw/refuse")
    with setup.http(setup.agent_a) as http:
        first = http.post(
            "/v1/tools/create_invoice/calls",
            json={"input": INVOICE},
            headers={"Idempotency-Key": ref},
        )
        assert first.status_code == 201
        other = {**INVOICE, "amount_cents": 101}
        conflict = http.post(
            "/v1/tools/create_invoice/calls",
            json={"input": other},
            headers={"Idempotency-Key": ref},
        )
        assert conflict.status_code == 409
        assert conflict.json()["code"] == "OPERATION_REF_CONFLICT"
        invalid = http.post(
            "/v1/tools/create_invoice/calls",
            json={"input": {"customer_id": "", "amount_cents": "many", "extra": 1}},
        )
        assert invalid.status_code == 422
        problem = invalid.json()
        assert problem["code"] == "INVALID_INPUT"
        assert {item["field"] for item in problem["errors"]} >= {
            "customer_id",
            "amount_cents",
            "currency",
            "extra",
        }
        unknown = http.post("/v1/tools/nope/calls", json={"input": {}})
        assert (unknown.status_code, unknown.json()["code"]) == (404, "UNKNOWN_TOOL")
        big = http.post("/v1/tools/create_invoice/calls", content=b"{" + b" " * 2_000_000 + b"}")
        assert (big.status_code, big.json()["code"]) == (413, "BODY_TOO_LARGE")
        headers = http.get("/v1/tools", headers={"X-Padding": "x" * 20_000})
        assert (headers.status_code, headers.json()["code"]) == (431, "HEADERS_TOO_LARGE")
        for answer in (conflict, invalid, unknown, big, headers):
            assert answer.headers["content-type"] == "application/problem+json"
    # The HTTP client raises what the in-process client raises.
    with setup.client(setup.agent_a) as client:
        with pytest.raises(OperationRefConflict):
            client.submit("create_invoice", {**INVOICE, "amount_cents": 7}, ref)
        with pytest.raises(InvalidInput) as caught:
            client.submit("create_invoice", {"customer_id": "c"})
        assert caught.value.tool == "create_invoice"
        assert ("amount_cents", "MISSING") in caught.value.errors
        with pytest.raises(UnknownToolError):
            client.submit("nope", {})
        with pytest.raises(StepNotFound):
            client.view(new_ref("gw/none"))


def test_corrected_input_runs_and_the_acting_key_is_recorded(setup: Setup) -> None:
    ref = new_ref("gw/fix")
    with setup.client(setup.agent_a) as client:
        client.submit("send_email", EMAIL, ref)
        stuck = client.wait(ref, timeout=20)
        assert stuck.state is StepState.NEEDS_INPUT
        with pytest.raises(TransitionRefused) as refused:
            client.provide_input(ref, EMAIL)
        assert refused.value.code == "IDENTICAL_INPUT"
        fixed = client.provide_input(ref, {**EMAIL, "recipient_email": "ana@example.com"})
        # The hint is out before the view is read: a worker may have claimed it already.
        assert fixed.state in (StepState.PENDING, StepState.IN_FLIGHT, StepState.SUCCEEDED)
        assert client.wait(ref, timeout=20).state is StepState.SUCCEEDED
    events = setup.cluster.client.runtime.store.events(f"team-a/{ref}")
    provided = [event for event in events if event.kind == "input_provided"]
    assert [event.detail["actor"] for event in provided] == ["key:agent-a"]


def test_namespaces_hide_other_steps_and_only_operators_approve(setup: Setup) -> None:
    ref = new_ref("gw/ns")
    full = f"team-b/{ref}"
    setup.cluster.fault(fault="require_approval", operation_ref=full, times=None)
    with setup.client(setup.agent_b) as b:
        b.submit("create_invoice", INVOICE, ref)
        assert b.wait(ref, timeout=20).state is StepState.AWAITING_APPROVAL
        # An agent key cannot approve, even in its own namespace.
        with pytest.raises(GatewayError) as forbidden:
            b.approve(ref, "me", "looks fine")
        assert (forbidden.value.status, forbidden.value.code) == (403, "FORBIDDEN")
    with setup.http(setup.agent_a) as a:
        for method, path, body in (
            ("GET", f"/v1/calls/{full}", None),
            ("GET", f"/v1/calls/{full}?wait=1", None),
            ("GET", f"/v1/calls/{full}/events", None),
            ("POST", f"/v1/calls/{full}/input", {"input": INVOICE}),
            ("POST", f"/v1/calls/{full}/cancel", {"reason": "not mine"}),
        ):
            answer = a.request(method, path, json=body)
            assert answer.status_code == 404, (method, path, answer.text)
            assert answer.json()["code"] == "STEP_NOT_FOUND"
    with setup.client(setup.operator) as ops:
        approved = ops.approve(full, "finance", "amount matches")
        # Approved: back to pending, or already claimed by the worker the hint woke.
        assert approved.state in {StepState.PENDING, StepState.IN_FLIGHT, StepState.SUCCEEDED}
        # The same action again is no error and changes nothing (as the CLI's "nothing
        # to do"); a different one is still refused.
        again = ops.approve(full, "finance", "amount matches")
        assert again.operation_ref == full and again.state is not StepState.AWAITING_APPROVAL
        with pytest.raises(TransitionRefused) as refused:
            ops.reject(full, "finance", "changed my mind")
        assert refused.value.code == "NOT_AWAITING_APPROVAL"
    approvals = [
        event
        for event in setup.cluster.client.runtime.store.events(full)
        if event.kind == "approved"
    ]
    assert approvals[0].detail["approver"] == "finance (key:ops)"
    assert len(approvals) == 1


def test_an_operator_resolves_to_succeeded_only_with_evidence(setup: Setup) -> None:
    ref = new_ref("gw/resolve")
    full = f"team-a/{ref}"
    setup.cluster.fault(fault="version_conflict", operation_ref=full)
    with setup.client(setup.agent_a) as agent:
        agent.submit("create_invoice", INVOICE, ref)
        assert agent.wait(ref, timeout=20).state is StepState.ESCALATED
    with setup.client(setup.operator) as ops:
        # The same refusal the in-process client raises (a 409 problem on the wire).
        with pytest.raises(TransitionRefused) as refused:
            ops.resolve(full, "succeeded", "oncall", "seen in billing")
        assert refused.value.code == "EVIDENCE_REQUIRED"
        closed = ops.resolve(full, "succeeded", "oncall", "seen in billing", evidence="inv_81")
    assert closed.state is StepState.SUCCEEDED and closed.ui_group == "resolved by an operator"
    assert (
        closed.envelope is not None and to_wire(closed.envelope)["result"]["evidence"] == "inv_81"
    )
    assert "toolsafe did not verify it" in closed.text
    [event] = [e for e in setup.cluster.client.runtime.store.events(full) if e.kind == "resolved"]
    assert (event.detail["evidence"], event.detail["operator"]) == ("inv_81", "oncall (key:ops)")


def test_events_stream_ends_at_the_terminal_state(setup: Setup) -> None:
    ref = new_ref("gw/sse")
    with setup.client(setup.agent_a) as client:
        client.submit("create_invoice", INVOICE, ref)
    kinds: list[str] = []
    states: list[str] = []
    with (
        setup.http(setup.agent_a) as http,
        http.stream("GET", f"/v1/calls/{ref}/events") as stream,
    ):
        assert stream.headers["content-type"].startswith("text/event-stream")
        event = ""
        first = ""
        for line in stream.iter_lines():
            if line.startswith("id: ") and not first:
                first = line.removeprefix("id: ")
            if line.startswith("event: "):
                event = line.removeprefix("event: ")
            elif line.startswith("data: "):
                kinds.append(event)
                states.append(json.loads(line.removeprefix("data: "))["state"])
    assert kinds[0] == "submitted" and kinds[-1] == "end", kinds
    assert states[-1] == "succeeded"
    # Resuming after the first event sends the rest, not the first again.
    with (
        setup.http(setup.agent_a) as http,
        http.stream("GET", f"/v1/calls/{ref}/events", headers={"Last-Event-ID": first}) as again,
    ):
        resumed = [
            line.removeprefix("event: ")
            for line in again.iter_lines()
            if line.startswith("event: ")
        ]
    assert resumed == kinds[1:]


def test_the_async_client_speaks_to_the_gateway(setup: Setup) -> None:
    async def run() -> tuple[StepState, StepState]:
        ref = new_ref("gw/async")
        async with AsyncGatewayClient(setup.server.url, setup.agent_a, timeout=30) as client:
            made = await client.submit("create_invoice", INVOICE, ref)
            done = await client.wait(ref, timeout=20)
            return made.state, done.state

    assert asyncio.run(run()) == (StepState.PENDING, StepState.SUCCEEDED)


def test_a_crash_between_commit_and_answer_loses_nothing(setup: Setup) -> None:
    """The server dies after the step's commit, before answering; the retry with the
    same key gets 200 and the same step, and the downstream sees one write."""
    ref = new_ref("gw/crash")
    full = f"team-a/{ref}"
    write_plan(setup.cluster.env["TOOLSAFE_FAULT_PLAN"], {full: {"after_submit_commit": "kill"}})
    with setup.http(setup.agent_a) as http, pytest.raises(httpx.TransportError):
        http.post(
            "/v1/tools/create_invoice/calls",
            json={"input": INVOICE},
            headers={"Idempotency-Key": ref},
        )
    assert setup.server.wait_exit() != 0
    assert (
        setup.cluster.client.runtime.store.get(full).state in StepState
    )  # committed before the crash
    setup.server.start()
    with setup.http(setup.agent_a) as http:
        again = http.post(
            "/v1/tools/create_invoice/calls",
            json={"input": INVOICE},
            headers={"Idempotency-Key": ref},
        )
    assert again.status_code == 200, again.text
    assert again.json()["operation_ref"] == full
    with setup.client(setup.agent_a) as client:
        assert client.wait(ref, timeout=30).state is StepState.SUCCEEDED
    assert setup.cluster.effects(full) == 1


def test_database_or_broker_down_is_503_and_the_server_stays_up(
    setup: Setup, tmp_path: Path
) -> None:
    from toolsafe.harness import free_port

    dead = free_port()
    # A database nobody listens on: every call is 503 with Retry-After, the server lives.
    env = {
        **setup.cluster.env,
        "TOOLSAFE_DATABASE_URL": f"postgresql+psycopg://postgres@127.0.0.1:{dead}/none",
    }
    with (
        gateway_for(env, tmp_path, "--no-auth", name="nodb") as server,
        httpx.Client(base_url=server.url, timeout=30) as http,
    ):
        for _ in range(2):
            answer = http.post("/v1/tools/create_invoice/calls", json={"input": INVOICE})
            assert answer.status_code == 503, answer.text
            assert answer.json()["code"] == "STORE_UNAVAILABLE"
            assert answer.headers["Retry-After"].isdigit()
        assert server.alive() and http.get("/healthz").status_code == 200
    # A broker nobody listens on: the commit is what is acknowledged (201); the sweeper
    # of the running workers publishes the step later (R7) and it succeeds.
    env = {**setup.cluster.env, "TOOLSAFE_BROKER_URL": f"redis://127.0.0.1:{dead}/0"}
    ref = new_ref("gw/nobroker")
    with (
        gateway_for(env, tmp_path, "--no-auth", name="nobroker") as server,
        httpx.Client(base_url=server.url, timeout=60) as http,
    ):
        answer = http.post(
            "/v1/tools/create_invoice/calls",
            json={"input": INVOICE},
            headers={"Idempotency-Key": ref},
        )
        assert answer.status_code == 201, answer.text
        assert server.alive()
    assert setup.cluster.client.wait(ref, timeout=30).state is StepState.SUCCEEDED
    assert setup.cluster.effects(ref) == 1


def test_the_readme_curl_example_submits_and_waits_for_the_envelope(setup: Setup) -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    marker = "<!-- gateway-curl"
    assert marker in readme, "the README's curl example is gone"
    block = readme.split(marker, 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    token = make_key(setup.cluster.env["TOOLSAFE_DATABASE_URL"], "readme", "agent", None)
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", block],
        env={**os.environ, "TOOLSAFE_GATEWAY": setup.server.url, "TOOLSAFE_KEY": token},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr + done.stdout
    submitted, waited = (json.loads(line) for line in done.stdout.splitlines() if line)
    assert submitted["operation_ref"] == "readme/run_81/step_4"
    assert waited["state"] == "succeeded", waited
    assert waited["envelope"]["ok"] is True
    assert setup.cluster.effects("readme/run_81/step_4") == 1


def test_bad_input_gets_a_clear_problem_through_the_gateway(setup: Setup) -> None:
    """The bad-input walk of the Python client and the CLI (tests/services/tasks/test_bad_input.py),
    over HTTP: the same call read the same, inputs that are no JSON object, toolsafe's own
    size limit, and an operation_ref far too long, echoed only as a short prefix."""
    ref = new_ref("gw/bad/same")
    with setup.http(setup.agent_a) as http:

        def submit(body: object, key: str | None = None) -> httpx.Response:
            headers = {"Idempotency-Key": key} if key is not None else {}
            return http.post("/v1/tools/create_invoice/calls", json=body, headers=headers)

        first = submit({"input": INVOICE}, ref)
        assert first.status_code == 201
        # 100.0 is the model's 100, and the default memo made explicit is the same call.
        again = submit({"input": {**INVOICE, "amount_cents": 100.0, "memo": None}}, ref)
        assert again.status_code == 200, again.text
        assert again.json()["operation_ref"] == first.json()["operation_ref"]
        for not_an_object in (None, [1, 2], "customer_id=cus_1", 42):
            answer = submit({"input": not_an_object})
            assert answer.status_code == 422, (not_an_object, answer.text)
            assert answer.headers["content-type"] == "application/problem+json"
            assert answer.json()["code"] in {"INPUT_NOT_AN_OBJECT", "INVALID_REQUEST"}
        # Under the gateway's body limit, over toolsafe's own input limit (256 KiB).
        large = submit({"input": {**INVOICE, "memo": "x" * 300_000}}, new_ref("gw/bad/large"))
        assert large.status_code in {413, 422}, large.text
        assert large.json()["code"] == "INPUT_TOO_LARGE"
        huge_ref = "r" * 100_000
        long_ref = submit({"input": INVOICE}, huge_ref)
        assert long_ref.status_code in {400, 422, 431}, long_ref.text[:300]
        assert long_ref.headers["content-type"] == "application/problem+json"
        assert len(long_ref.text) < 2_000, "the problem echoes the whole operation_ref"
        # Nothing of the refused calls was stored.
        for refused in ("gw/bad/large",):
            listed = http.get("/v1/calls/" + refused)
            assert listed.status_code == 404


def test_metrics_count_this_gateways_requests_by_route_and_status(setup: Setup) -> None:
    def sample(text: str, name: str, **labels: str) -> float:
        wanted = name + "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"
        for line in text.splitlines():
            if line.startswith(wanted + " "):
                return float(line.rsplit(" ", 1)[1])
        return 0.0

    tools = {"route": "/v1/tools", "method": "GET"}
    with setup.http() as anonymous, setup.http(setup.agent_a) as agent:
        before = anonymous.get("/metrics").text
        for _ in range(3):
            assert agent.get("/v1/tools").status_code == 200
        assert anonymous.get("/v1/tools").status_code == 401
        assert anonymous.get(f"/no/such/{new_ref('path')}").status_code == 404
        assert agent.get(f"/v1/calls/{new_ref('gw/none')}").status_code == 404
        after = anonymous.get("/metrics")
    assert after.headers["content-type"].startswith("text/plain")
    text = after.text
    requests = "toolsafe_gateway_requests_total"
    assert (
        sample(text, requests, **tools, status="200")
        - sample(before, requests, **tools, status="200")
        == 3
    )
    assert (
        sample(text, requests, **tools, status="401")
        - sample(before, requests, **tools, status="401")
        == 1
    )
    unmatched = {"route": "unmatched", "method": "GET", "status": "404"}
    assert sample(text, requests, **unmatched) - sample(before, requests, **unmatched) == 1
    call = {"route": "/v1/calls/{operation_ref}", "method": "GET", "status": "404"}
    assert sample(text, requests, **call) - sample(before, requests, **call) == 1  # not the ref
    latency = "toolsafe_gateway_request_duration_seconds_count"
    assert sample(text, latency, **tools) - sample(before, latency, **tools) == 4
    assert sample(text, "toolsafe_gateway_request_duration_seconds_bucket", **tools, le="+Inf") >= 4
    assert "toolsafe_steps{" not in text  # store-wide figures come from `toolsafe metrics`
