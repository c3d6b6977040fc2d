"""Pure pieces of the gateway, no I/O: namespaces, the Idempotency-Key header, loopback
detection, the key hash, problem mapping, and the HTTP client's error mapping."""

from __future__ import annotations

import pickle

import httpx
import pytest

from toolsafe.adapters.errors import UnknownToolError
from toolsafe.gateway.auth import Principal
from toolsafe.gateway.cli import is_loopback
from toolsafe.gateway.client import OPERATIONS, GatewayError, raise_problem
from toolsafe.gateway.problems import CODES, ApiProblem, from_error, instance_of, problem_response
from toolsafe.gateway.routes.calls import idempotency_key, location
from toolsafe.recovery.outcomes import TransitionRefused
from toolsafe.recovery.store import OperationRefConflict, StepNotFound
from toolsafe.recovery.store.keys import KeyRefused, hash_secret
from toolsafe.tasks.client import InvalidInput, WaitTimeout


def test_a_namespace_key_can_only_name_refs_inside_it() -> None:
    agent = Principal("a", "agent", "team-a")
    assert agent.scoped("run/1") == "team-a/run/1"
    assert agent.scoped("team-a/run/1") == "team-a/run/1"
    assert agent.scoped("team-b/run/1") == "team-a/team-b/run/1"
    with pytest.raises(StepNotFound):
        agent.existing("bad ref with spaces")
    assert Principal("ops", "operator", None).scoped("team-b/x") == "team-b/x"
    assert agent.by(None) == "key:a" and agent.by("ana") == "ana (key:a)"


def test_the_idempotency_key_header() -> None:
    assert idempotency_key('"run_81/step_4"') == "run_81/step_4"
    assert idempotency_key(" run_81/step_4 ") == "run_81/step_4"
    assert idempotency_key(None) is None
    assert location("a/b c") == "/v1/calls/a/b%20c"


@pytest.mark.parametrize(
    ("host", "loopback"),
    [("127.0.0.1", True), ("::1", True), ("localhost", True), ("0.0.0.0", False),
     ("10.0.0.1", False), ("example.org", False)],
)  # fmt: skip
def test_development_mode_needs_a_loopback_address(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_the_secret_is_hashed_with_its_salt() -> None:
    one, two = hash_secret("s3cret", b"a" * 16), hash_secret("s3cret", b"b" * 16)
    assert one != two and "s3cret" not in one and len(one) == 128
    refused = KeyRefused("KEY_EXISTS", "a key named x exists already")
    assert str(pickle.loads(pickle.dumps(refused))) == str(refused)


def test_every_error_becomes_a_problem_with_a_known_code() -> None:
    cases = [
        (InvalidInput("t", (("f", "MISSING"),)), 422, "INVALID_INPUT"),
        (UnknownToolError("t"), 404, "UNKNOWN_TOOL"),
        (StepNotFound("r"), 404, "STEP_NOT_FOUND"),
        (OperationRefConflict("r", "input"), 409, "OPERATION_REF_CONFLICT"),
        (TransitionRefused("IDENTICAL_INPUT", "same"), 409, "IDENTICAL_INPUT"),
        (RuntimeError("boom"), 500, "INTERNAL"),
    ]
    for error, status, code in cases:
        problem = from_error(error)
        assert (problem.status, problem.code) == (status, code)
        assert problem.code in CODES or isinstance(error, TransitionRefused)


def test_a_problem_instance_is_a_uri_reference() -> None:
    assert instance_of("/v1/calls/a_b:c/1") == "/v1/calls/a_b:c/1"
    assert instance_of("/v1/calls/with space/é") == "/v1/calls/with%20space/%C3%A9"
    assert instance_of(None) is None
    response = problem_response(ApiProblem("STEP_NOT_FOUND", "no"), "/v1/calls/a b")
    assert b'"instance":"/v1/calls/a%20b"' in response.body


def _problem(status: int, **body: object) -> httpx.Response:
    return httpx.Response(status, json=body)


def test_the_http_client_raises_what_the_in_process_client_raises() -> None:
    with pytest.raises(InvalidInput) as invalid:
        raise_problem(
            _problem(422, code="INVALID_INPUT", tool="t", errors=[{"field": "f", "code": "X"}])
        )
    assert invalid.value.errors == (("f", "X"),)
    with pytest.raises(OperationRefConflict):
        raise_problem(_problem(409, code="OPERATION_REF_CONFLICT", operation_ref="r"))
    with pytest.raises(TransitionRefused) as refused:
        raise_problem(_problem(409, code="FLAGGED_FIELD_UNCHANGED", detail="x"))
    assert refused.value.code == "FLAGGED_FIELD_UNCHANGED"
    with pytest.raises(GatewayError) as other:
        raise_problem(httpx.Response(502, text="bad gateway"))
    assert other.value.status == 502
    request = next(OPERATIONS.submit("create_invoice", {"a": 1}, "run/1"))
    assert request.headers == {"Idempotency-Key": "run/1"}
    assert request.path == "/v1/tools/create_invoice/calls"


def test_the_gateway_clients_plans_send_what_the_routes_take_and_map_the_answers() -> None:
    """One plan per operation, driven by both clients: a settle holds ``?wait=`` and
    asks again until the step needs the agent; a wait past its timeout raises."""
    view: dict[str, object] = {"operation_ref": "r", "tool": "t", "state": "pending",
            "ui_group": "queued",
            "commit_state": None, "attempts": 0, "max_attempts": 3, "due_at": None,
            "reason": None, "fields": [], "envelope": None, "text": "queued",
            "needs_agent": False, "terminal": False}  # fmt: skip
    steps = OPERATIONS.settle("r", 0.0)
    assert next(steps).params == {}
    with pytest.raises(StopIteration) as done:
        steps.send(httpx.Response(200, json=view))
    assert done.value.value.state == "pending"
    waiting = OPERATIONS.wait("r", 0.0)
    next(waiting)
    with pytest.raises(WaitTimeout):
        waiting.send(httpx.Response(200, json=view))
    created = OPERATIONS.submit_call("t", {}, "r")
    next(created)
    with pytest.raises(StopIteration) as made:
        created.send(httpx.Response(201, json=view))
    assert made.value.value.created is True
    with pytest.raises(TypeError, match="actor"):
        next(OPERATIONS.submit_call("t", {}, "r", actor="someone"))
    resolve = next(OPERATIONS.resolve("r", "succeeded", "ops", "checked", evidence="inv_1"))
    assert resolve.path == "/v1/calls/r/resolve"
    assert resolve.json == {"to": "succeeded", "reason": "checked", "operator": "ops",
                            "evidence": "inv_1"}  # fmt: skip
