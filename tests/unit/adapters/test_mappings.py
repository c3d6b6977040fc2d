"""The envelope mapped to MCP, Anthropic, OpenAI and RFC 9457, on the article's examples."""

from __future__ import annotations

import json

import pytest

from tests.support import fixtures
from toolsafe.adapters.envelope import ToolError, to_wire
from toolsafe.adapters.mappings import (
    PROBLEM_TYPE_PREFIX,
    from_problem_details,
    to_anthropic_tool_result,
    to_mcp_call_tool_result,
    to_openai_tool_message,
    to_problem_details,
)

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


@pytest.mark.parametrize(
    ("name", "status"),
    [
        ("INVALID_RECIPIENT_ADDRESS", 422),
        ("DEPENDENCY_UNAVAILABLE", 503),
        ("VERSION_CONFLICT", 409),
        ("MISSING_APPROVAL", 403),
        ("OUTCOME_UNKNOWN", 503),
    ],
)
def test_problem_details(name: str, status: int) -> None:
    envelope = fixtures.ARTICLE_EXAMPLES[name]()
    problem = to_problem_details(envelope)
    assert problem["type"] == PROBLEM_TYPE_PREFIX + name
    assert problem["detail"] == envelope.agent_message
    assert problem["instance"] == "run_81/step_4"
    assert problem["status"] == status
    assert problem["title"]
    wire = to_wire(envelope)
    for member in ("commit_state", "retry", "next_action", "safe_details", "user_message"):
        assert problem[member] == wire[member]
    assert from_problem_details(problem) == envelope
    json.dumps(problem)


def test_problem_details_refuses_a_success() -> None:
    with pytest.raises(ValueError, match="only a ToolError"):
        to_problem_details(fixtures.invoice_created())  # type: ignore[arg-type]


def test_problem_details_refuses_a_foreign_type() -> None:
    problem = to_problem_details(fixtures.outcome_unknown())
    problem["type"] = "about:blank"
    with pytest.raises(ValueError, match="problem type must start with"):
        from_problem_details(problem)


def test_retry_keeps_not_before_in_every_mapping() -> None:
    envelope = fixtures.dependency_unavailable()
    assert isinstance(envelope, ToolError)
    expected = "2026-11-30T09:16:00Z"
    assert to_problem_details(envelope)["retry"]["not_before"] == expected
    assert to_mcp_call_tool_result(envelope)["structuredContent"]["retry"]["not_before"] == expected
