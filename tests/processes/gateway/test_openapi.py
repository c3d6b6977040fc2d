"""The whole API fuzzed from its own OpenAPI document (schemathesis, bounded in time):
no 5xx, every response matches its documented schema and status, every error is
problem+json. A real ``toolsafe serve`` on PostgreSQL with an operator key, so that
every route is reachable; one real step exists, so views, waits and streams find one."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import BaseSchema, Case
from schemathesis.checks import not_a_server_error
from schemathesis.core.result import Ok
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.support.gateway.harness import GatewayServer, bearer, gateway_for, make_key
from tests.support.pipeline.harness import cluster_for

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.slow]

EXAMPLES_PER_OPERATION = 100
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]


@pytest.fixture(scope="module")
def served(
    pg_url: str, redis_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[GatewayServer, str]]:
    directory: Path = tmp_path_factory.mktemp("openapi")
    env = {"TOOLSAFE_GATEWAY_MAX_WAIT": "0.5"}
    with cluster_for(pg_url, redis_url, directory, suffix="openapi", env=env) as cluster:
        token = make_key(cluster.env["TOOLSAFE_DATABASE_URL"], "fuzz", "operator")
        with gateway_for(cluster.env, directory) as server:
            answer = httpx.post(
                f"{server.url}/v1/tools/create_invoice/calls",
                json={"input": {"customer_id": "c", "amount_cents": 1, "currency": "EUR"}},
                headers={**bearer(token), "Idempotency-Key": "fuzz"},
            )
            assert answer.status_code == 201
            yield server, token


@pytest.fixture(scope="module")
def api(served: tuple[GatewayServer, str]) -> BaseSchema:
    server, _ = served
    return schemathesis.openapi.from_url(f"{server.url}/openapi.json")


def _check(case: Case[Any], server: GatewayServer, token: str) -> None:
    response = case.call(base_url=server.url, headers=bearer(token), timeout=10)
    case.validate_response(response, checks=CHECKS)
    if response.status_code >= 400:
        assert response.headers["content-type"] == ["application/problem+json"], response.text
        problem = response.json()
        assert problem["status"] == response.status_code and problem["code"]


def test_every_route_keeps_its_documented_promises(
    api: BaseSchema, served: tuple[GatewayServer, str]
) -> None:
    # Hypothesis drives schemathesis' strategies directly (its pytest plugin lags
    # behind pytest 9); each operation gets a bounded number of examples.
    server, token = served
    operations = []
    for result in api.get_all_operations():
        assert isinstance(result, Ok), result
        operations.append(result.ok())
    assert len(operations) == 10
    for operation in operations:

        @given(case=operation.as_strategy())
        @settings(
            max_examples=EXAMPLES_PER_OPERATION,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            database=None,
        )
        def run(case: Case[Any]) -> None:
            _check(case, server, token)

        run()


def test_the_document_names_every_route(api: BaseSchema) -> None:
    paths = set(api.raw_schema["paths"])
    assert api.raw_schema["openapi"].startswith("3.1")
    assert paths == {
        "/v1/tools",
        "/v1/tools/{tool}/calls",
        "/v1/calls/{operation_ref}",
        "/v1/calls/{operation_ref}/events",
        *(f"/v1/calls/{{operation_ref}}/{action}" for action in (
            "input", "cancel", "approve", "reject", "resolve", "redrive"
        )),
    }  # fmt: skip
