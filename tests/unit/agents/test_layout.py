"""Each stack's pieces live in its own module; ``toolsafe.agents`` re-exports them, and
defines nothing itself."""

from __future__ import annotations

import importlib

import toolsafe.agents

HOMES = {
    "mcp": ("mcp_tools", "mcp_ref", "to_mcp_call_tool_result"),
    "openai": (
        "openai_chat_tools",
        "openai_responses_tools",
        "openai_ref",
        "to_openai_tool_message",
        "to_openai_function_call_output",
    ),
    "anthropic": ("anthropic_tools", "anthropic_ref", "to_anthropic_tool_result"),
    "pydantic_ai": ("pydantic_ai_tool_definitions", "pydantic_ai_ref"),
    "langgraph": ("langgraph_ref",),
    "ai_sdk": ("ai_sdk_ref",),
}


def test_every_stack_name_is_defined_in_its_stacks_module_and_re_exported() -> None:
    for stack, names in HOMES.items():
        module = importlib.import_module(f"toolsafe.agents.{stack}")
        for name in names:
            value = getattr(module, name)
            assert value.__module__ == module.__name__, name
            assert getattr(toolsafe.agents, name) is value, name
            assert name in toolsafe.agents.__all__, name


def test_the_package_re_exports_only_what_its_modules_define() -> None:
    for name in toolsafe.agents.__all__:
        value = getattr(toolsafe.agents, name)
        assert value.__module__.startswith("toolsafe.agents."), name
