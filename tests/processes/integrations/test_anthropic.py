"""The Anthropic Messages helpers with the real ``anthropic`` SDK client, pointed at a
scripted Messages endpoint on loopback (the model of the SDK's own kind: it answers from
a script and records every request, so the test sees what the model received), real
workers and the example downstream. No network, no API key."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

import pytest

from tests.processes.integrations.conftest import Processes
from tests.support.lazy import lazy_module
from tests.support.pipeline.harness import Cluster
from toolsafe.agents.anthropic import anthropic_ref

if TYPE_CHECKING:
    from tests.support.integrations import anthropic as kit
else:  # the SDK is imported by the worker that runs these tests, not by every collector
    kit = lazy_module("tests.support.integrations.anthropic")

pytestmark = [pytest.mark.postgres, pytest.mark.redis]

INVOICE = {"customer_id": "cus_an", "amount_cents": 330, "currency": "EUR"}
Reply = Callable[[dict[str, Any]], list[dict[str, Any]]]


class ScriptedMessages:
    """``POST /v1/messages`` answered from a script; ``requests`` holds every body."""

    def __init__(self) -> None:
        self.replies: list[Reply] = []
        self.requests: list[dict[str, Any]] = []
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                endpoint.requests.append(body)
                content = endpoint.replies.pop(0)(body)
                uses = any(block["type"] == "tool_use" for block in content)
                answer = {
                    "id": f"msg_{len(endpoint.requests)}",
                    "type": "message",
                    "role": "assistant",
                    "model": body["model"],
                    "content": content,
                    "stop_reason": "tool_use" if uses else "end_turn",
                    "stop_sequence": None,
                    "usage": {"input_tokens": 1, "output_tokens": 1},
                }
                data = json.dumps(answer).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def endpoint() -> Iterator[ScriptedMessages]:
    running = ScriptedMessages()
    yield running
    running.stop()


def tool_use(name: str, args: dict[str, Any], call_id: str) -> Reply:
    return lambda body: [{"type": "tool_use", "id": call_id, "name": name, "input": args}]


def text(words: str) -> Reply:
    return lambda body: [{"type": "text", "text": words}]


def received_result(body: dict[str, Any], call_id: str) -> tuple[dict[str, Any], bool]:
    """The tool_result the model received for ``call_id``: its JSON text, is_error."""
    for block in body["messages"][-1]["content"]:
        if block["type"] == "tool_result" and block["tool_use_id"] == call_id:
            return json.loads(block["content"][0]["text"]), block["is_error"]
    raise AssertionError(f"no tool_result for {call_id}")


def test_tool_use_to_tool_result_and_a_replayed_tool_use_writes_nothing_again(
    cluster: Cluster, endpoint: ScriptedMessages, processes: Processes
) -> None:
    ref = processes.scoped(anthropic_ref("toolu_inv1", "an_conv1"))
    for _ in range(2):
        endpoint.replies += [tool_use("create_invoice", INVOICE, "toolu_inv1"), text("Done.")]
    asyncio.run(kit.conversation(endpoint.url, processes.aio("first"), "an_conv1", "Bill cus_an"))
    first, is_error = received_result(endpoint.requests[-1], "toolu_inv1")
    assert first["ok"] is True and first["operation_ref"] == ref and is_error is False
    assert "operation_ref" in endpoint.requests[0]["tools"][0]["input_schema"]["properties"]
    assert cluster.effects(ref) == 1

    # The agent crashed before it kept the answer; a fresh process replays the turn.
    asyncio.run(kit.conversation(endpoint.url, processes.aio("second"), "an_conv1", "Bill cus_an"))
    assert received_result(endpoint.requests[-1], "toolu_inv1") == (first, False)
    assert cluster.effects(ref) == 1


def test_a_correction_names_the_ref_and_keeps_it(
    cluster: Cluster, endpoint: ScriptedMessages, processes: Processes
) -> None:
    email = {"recipient_email": "di@mail.invalid", "subject": "Hi"}
    ref = processes.scoped(anthropic_ref("toolu_em1", "an_conv2"))

    def corrected(body: dict[str, Any]) -> list[dict[str, Any]]:
        envelope, _ = received_result(body, "toolu_em1")
        fixed = {**email, "recipient_email": "di@mail.example.org"}
        return tool_use("send_email", {**fixed, "operation_ref": envelope["operation_ref"]},
                        "toolu_em2")(body)  # fmt: skip

    endpoint.replies += [tool_use("send_email", email, "toolu_em1"), corrected, text("Sent.")]
    asyncio.run(kit.conversation(endpoint.url, processes.aio("first"), "an_conv2", "Mail di"))
    flagged, is_error = received_result(endpoint.requests[-2], "toolu_em1")
    assert flagged["next_action"] == "correct_input" and is_error is True
    answer, is_error = received_result(endpoint.requests[-1], "toolu_em2")
    assert answer["ok"] is True and answer["operation_ref"] == ref and is_error is False
    assert cluster.effects(ref) == 1
