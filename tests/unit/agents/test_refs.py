"""The replay-stable operation_ref rule (no I/O)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from toolsafe.adapters.envelope import MAX_OPERATION_REF, OPERATION_REF_PATTERN
from toolsafe.agents.ai_sdk import ai_sdk_ref
from toolsafe.agents.anthropic import anthropic_ref
from toolsafe.agents.langgraph import langgraph_ref
from toolsafe.agents.mcp import MCP_META_CALL, MCP_META_REF, MCP_META_SESSION, mcp_ref
from toolsafe.agents.openai import openai_ref
from toolsafe.agents.pydantic_ai import pydantic_ai_ref
from toolsafe.agents.shared import MAX_PART, operation_ref_for, ref_part


def test_each_stack_joins_its_scope_and_call_id() -> None:
    assert openai_ref("call_abc123", "run_81") == "openai:run_81:call_abc123"
    assert anthropic_ref("toolu_01A", "conv-9", "acme") == "acme/anthropic:conv-9:toolu_01A"
    assert pydantic_ai_ref("pyd_ai_x", "run-1") == "pydantic_ai:run-1:pyd_ai_x"
    assert langgraph_ref("call_1", "thread-7") == "langgraph:thread-7:call_1"
    assert ai_sdk_ref("call_7", "conv_9", "acme") == "acme/ai_sdk:conv_9:call_7"


def test_the_same_ids_give_the_same_ref_and_other_ids_another() -> None:
    assert openai_ref("call_1", "run_1") == openai_ref("call_1", "run_1")
    refs = {
        openai_ref("call_1", "run_1"),
        openai_ref("call_1", "run_2"),
        openai_ref("call_2", "run_1"),
        langgraph_ref("call_1", "run_1"),
        openai_ref("call_1", "run_1", "acme"),
    }
    assert len(refs) == 5


def test_odd_or_long_parts_become_a_prefix_and_a_hash() -> None:
    odd = ref_part("thread/with spaces:and colons")
    assert odd.startswith("threadwithspacesand.") and len(odd) == MAX_PART
    long = ref_part("x" * 300)
    assert len(long) <= MAX_PART and "." in long
    # A kept part never has a dot, so it cannot equal a hashed one.
    assert ref_part(odd) != odd
    assert ref_part("...").startswith("h.")


@given(
    scope=st.text(min_size=1, max_size=400),
    call=st.text(min_size=1, max_size=400),
    namespace=st.none() | st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.:\-]{0,99}", fullmatch=True),
)
def test_every_ref_is_valid_and_bounded(scope: str, call: str, namespace: str | None) -> None:
    ref = operation_ref_for("pydantic_ai", scope, call, namespace)
    assert len(ref) <= MAX_OPERATION_REF
    assert OPERATION_REF_PATTERN.fullmatch(ref)
    assert ref == operation_ref_for("pydantic_ai", scope, call, namespace)


def test_missing_parts_are_refused_with_a_reason() -> None:
    with pytest.raises(ValueError, match="needs the run, thread or session id"):
        openai_ref("call_1", "")
    with pytest.raises(ValueError, match="needs the tool-call id"):
        openai_ref("", "run")
    with pytest.raises(ValueError, match="unknown stack"):
        operation_ref_for("crewai", "a", "b")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="namespace"):
        openai_ref("c", "r", "bad/ns")


def test_mcp_meta_ref_then_call_id_then_request_identity() -> None:
    assert mcp_ref({MCP_META_REF: "run_81/step_4"}, "s1", 3) == "run_81/step_4"
    assert mcp_ref({MCP_META_REF: "step_4"}, "s1", 3, "acme") == "acme/step_4"
    assert mcp_ref({MCP_META_REF: "acme/step_4"}, "s1", 3, "acme") == "acme/step_4"
    by_call = {MCP_META_CALL: "call_9", MCP_META_SESSION: "agent-run-1"}
    assert mcp_ref(by_call, "s1", 3) == "mcp:agent-run-1:call_9"
    # The transport session does not matter once the host names its own session.
    assert mcp_ref(by_call, "s2", 8) == mcp_ref(by_call, "s1", 3)
    assert mcp_ref({MCP_META_CALL: "call_9"}, "s1", 3) == "mcp:s1:call_9"
    assert mcp_ref(None, "s1", 3) == "mcp:s1:req-3"
    assert mcp_ref({}, "s1", "abc") == "mcp:s1:req-abc"


def test_bad_mcp_meta_is_refused() -> None:
    with pytest.raises(ValueError, match="not a usable operation_ref"):
        mcp_ref({MCP_META_REF: "has space"}, "s", 1)
    with pytest.raises(ValueError, match="must be a non-empty string"):
        mcp_ref({MCP_META_REF: 7}, "s", 1)
    with pytest.raises(ValueError, match="must be a non-empty string"):
        mcp_ref({MCP_META_CALL: "c", MCP_META_SESSION: ""}, "s", 1)
