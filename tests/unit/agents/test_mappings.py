"""The envelope in the shape each agent stack expects (MCP, Anthropic, OpenAI), on the
article's examples: the same envelope JSON everywhere, an error flag exactly when ``ok``
is false."""

from __future__ import annotations

import json

import pytest

from tests.support import fixtures
from toolsafe.adapters.envelope import ToolError, to_wire
from toolsafe.agents.anthropic import to_anthropic_tool_result
from toolsafe.agents.mcp import to_mcp_call_tool_result
from toolsafe.agents.openai import to_openai_function_call_output, to_openai_tool_message
from toolsafe.agents.shared import envelope_text

ALL = [*sorted(fixtures.ARTICLE_EXAMPLES.items()), ("SUCCESS", fixtures.invoice_created)]


@pytest.mark.parametrize(("name", "make"), ALL)
def test_mcp_call_tool_result(name: str, make: object) -> None:
    envelope = make()  # type: ignore[operator]
    mapped = to_mcp_call_tool_result(envelope)
    assert set(mapped) == {"content", "structuredContent", "isError"}
    assert mapped["isError"] is (name != "SUCCESS")
    assert mapped["structuredContent"] == to_wire(envelope)
    [block] = mapped["content"]
    assert block["type"] == "text"
    assert json.loads(block["text"]) == to_wire(envelope)


@pytest.mark.parametrize(("name", "make"), ALL)
def test_anthropic_tool_result(name: str, make: object) -> None:
    envelope = make()  # type: ignore[operator]
    mapped = to_anthropic_tool_result(envelope, "toolu_01")
    assert mapped["type"] == "tool_result"
    assert mapped["tool_use_id"] == "toolu_01"
    assert mapped["is_error"] is (name != "SUCCESS")
    assert json.loads(mapped["content"][0]["text"]) == to_wire(envelope)


@pytest.mark.parametrize(("name", "make"), ALL)
def test_openai_tool_message(name: str, make: object) -> None:
    envelope = make()  # type: ignore[operator]
    mapped = to_openai_tool_message(envelope, "call_9")
    assert mapped["role"] == "tool"
    assert mapped["tool_call_id"] == "call_9"
    assert json.loads(mapped["content"]) == to_wire(envelope)


@pytest.mark.parametrize(("name", "make"), ALL)
def test_openai_function_call_output(name: str, make: object) -> None:
    envelope = make()  # type: ignore[operator]
    item = to_openai_function_call_output(envelope, "call_abc")
    assert set(item) == {"type", "call_id", "output"}
    assert item["type"] == "function_call_output" and item["call_id"] == "call_abc"
    assert json.loads(item["output"]) == to_wire(envelope)


def test_mcp_keeps_not_before() -> None:
    envelope = fixtures.dependency_unavailable()
    assert isinstance(envelope, ToolError)
    mapped = to_mcp_call_tool_result(envelope)
    assert mapped["structuredContent"]["retry"]["not_before"] == "2026-11-30T09:16:00Z"


@pytest.mark.parametrize(("name", "make"), ALL)
def test_every_text_channel_carries_the_envelope_text(name: str, make: object) -> None:
    envelope = make()  # type: ignore[operator]
    text = envelope_text(envelope)
    assert json.loads(text) == to_wire(envelope)
    assert to_anthropic_tool_result(envelope, "t")["content"][0]["text"] == text
    assert to_openai_tool_message(envelope, "c")["content"] == text
    assert to_openai_function_call_output(envelope, "c")["output"] == text
