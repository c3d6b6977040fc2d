"""One call, one trace (DESIGN §7b): a gateway request carrying a W3C ``traceparent``
is followed through a real ``toolsafe serve``, the Celery message and a real worker
process to the example downstream, which receives the same trace id. Every process
exports over OTLP/HTTP to a receiver the test runs; the ``execute_tool`` span carries
the GenAI attributes and nothing of the input."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest

from tests.support.gateway.harness import GatewayServer, bearer, gateway_for, make_key
from tests.support.otlp import OtlpReceiver, Received
from tests.support.pipeline.harness import Cluster, cluster_for, new_ref

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.slow]

SECRET_CUSTOMER = "cus_tracing_never_in_a_span"
INVOICE = {"customer_id": SECRET_CUSTOMER, "amount_cents": 4242, "currency": "EUR"}


@dataclass
class Traced:
    cluster: Cluster
    server: GatewayServer
    receiver: OtlpReceiver
    agent: str


@pytest.fixture(scope="module")
def traced(
    pg_url: str, redis_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Traced]:
    directory = tmp_path_factory.mktemp("tracing")
    receiver = OtlpReceiver().start()
    env = {
        # The SDK's own variables: tracing on, OTLP over HTTP to the receiver, batches
        # sent every 100 ms (a worker is killed at the end, not drained).
        "OTEL_TRACES_EXPORTER": "otlp",
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
        "OTEL_BSP_SCHEDULE_DELAY": "100",
        "OTEL_SERVICE_NAME": "toolsafe-under-test",
    }
    try:
        with cluster_for(pg_url, redis_url, directory, suffix="tracing", env=env) as cluster:
            agent = make_key(cluster.env["TOOLSAFE_DATABASE_URL"], "tracer", "agent")
            cluster.start_worker("traced", concurrency=1)
            with gateway_for(cluster.env, directory) as server:
                yield Traced(cluster, server, receiver, agent)
    finally:
        receiver.stop()


def _one(spans: list[Received], name: str) -> Received:
    named = [span for span in spans if span.name == name]
    assert len(named) == 1, (name, [span.name for span in spans])
    return named[0]


def test_a_gateway_call_is_one_trace_down_to_the_downstream(traced: Traced) -> None:
    cluster = traced.cluster
    trace_id = secrets.token_hex(16)
    caller_span = secrets.token_hex(8)
    ref = new_ref("trace/invoice")
    with httpx.Client(base_url=traced.server.url, headers=bearer(traced.agent), timeout=30) as http:
        made = http.post(
            "/v1/tools/create_invoice/calls",
            json={"input": INVOICE},
            headers={"Idempotency-Key": ref, "traceparent": f"00-{trace_id}-{caller_span}-01"},
        )
    assert made.status_code == 201, made.text
    ref = made.json()["operation_ref"]

    # The downstream received the caller's trace id with the write.
    cluster.wait_for(lambda: cluster.effects(ref) == 1, what="the write downstream")
    [arrived] = cluster.downstream.traceparents(ref)
    version, arrived_trace, arrived_parent, _flags = arrived.split("-")
    assert (version, arrived_trace) == ("00", trace_id)

    # Every process exported its part of the trace: the gateway's request and submit,
    # the worker's task, claim, execute_tool, adapter call, HTTP request, record, decision.
    wanted = {
        "POST /v1/tools/{tool}/calls",
        "toolsafe.submit",
        "process toolsafe.execute",
        "toolsafe.claim",
        "execute_tool create_invoice",
        "toolsafe.adapter.call",
        "POST",
        "toolsafe.record",
        "toolsafe.decision",
    }

    def exported() -> bool:
        return wanted <= {span.name for span in traced.receiver.spans(trace_id)}

    try:
        cluster.wait_for(exported, what="the trace's spans at the OTLP receiver")
    except TimeoutError:
        got = sorted(span.name for span in traced.receiver.spans(trace_id))
        raise AssertionError(f"spans of the trace: {got}; wanted {sorted(wanted)}") from None
    spans = traced.receiver.spans(trace_id)
    by_id = {span.span_id: span for span in spans}

    request = _one(spans, "POST /v1/tools/{tool}/calls")
    assert (request.kind, request.parent_span_id) == ("server", caller_span)
    assert request.attributes["http.response.status_code"] == 201
    submit = _one(spans, "toolsafe.submit")
    assert by_id[submit.parent_span_id] is request
    task = _one(spans, "process toolsafe.execute")
    assert task.kind == "consumer" and by_id[task.parent_span_id] is submit
    tool = _one(spans, "execute_tool create_invoice")
    assert by_id[tool.parent_span_id] is task
    # The downstream's parent is the worker's HTTP client span, under the adapter's call.
    sent = by_id[arrived_parent]
    assert (sent.name, sent.kind) == ("POST", "client")
    assert by_id[sent.parent_span_id].name == "toolsafe.adapter.call"
    assert by_id[by_id[sent.parent_span_id].parent_span_id] is tool
    assert {span.service for span in spans} == {"toolsafe-under-test"}

    # The GenAI conventions' attributes, and toolsafe's own.
    attributes = tool.attributes
    assert attributes["gen_ai.operation.name"] == "execute_tool"
    assert attributes["gen_ai.tool.name"] == "create_invoice"
    assert attributes["gen_ai.tool.call.id"] == ref
    assert attributes["toolsafe.commit_state"] == "committed"
    assert attributes["toolsafe.step.state"] == "succeeded"
    assert "error.type" not in attributes
    # Redacted: nothing of the input anywhere in the trace.
    values = [str(v) for span in spans for v in span.attributes.values()]
    assert not [value for value in values if SECRET_CUSTOMER in value or "4242" in value]
