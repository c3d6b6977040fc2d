"""Tool definitions for every stack, from a registry of the example adapters (no I/O)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import ClassVar

import jsonschema
import pytest
from pydantic import BaseModel

from tests.support import fixtures
from toolsafe.adapters.decorators import read_tool, tool
from toolsafe.adapters.envelope import AnySuccess, ToolError, to_wire
from toolsafe.adapters.examples.email import SendEmail
from toolsafe.adapters.examples.invoice import CreateInvoice, InvoiceInput
from toolsafe.adapters.http import HttpSettings
from toolsafe.adapters.protocol import Adapter, CallContext
from toolsafe.adapters.registry import Registry
from toolsafe.agents.anthropic import anthropic_tools
from toolsafe.agents.mcp import mcp_tools
from toolsafe.agents.openai import openai_chat_tools, openai_responses_tools
from toolsafe.agents.pydantic_ai import pydantic_ai_tool_definitions
from toolsafe.agents.shared import InProgress, plain_names, tool_for_name, tool_output_schema


@read_tool(name="crm.lookup", title="Find a customer")
def find_customer(customer_id: str) -> dict[str, str]:
    """Finds a customer by id."""
    return {"id": customer_id}


def registry() -> Registry:
    settings = HttpSettings(base_url="http://127.0.0.1:9")
    found = Registry()
    found.register(CreateInvoice(settings))
    found.register(SendEmail(settings))
    found.register(find_customer)
    return found


def test_mcp_tools_carry_description_schemas_and_annotations() -> None:
    tools = {entry["name"]: entry for entry in mcp_tools(registry())}
    assert set(tools) == {"create_invoice", "send_email", "crm.lookup"}
    invoice = tools["create_invoice"]
    assert invoice["description"] == CreateInvoice.description
    assert invoice["title"] == "Create an invoice"
    assert invoice["inputSchema"] == InvoiceInput.model_json_schema()
    assert invoice["annotations"] == {
        "readOnlyHint": False,
        "destructiveHint": True,
        "idempotentHint": True,
        "title": "Create an invoice",
    }
    read = tools["crm.lookup"]
    assert read["description"] == "Finds a customer by id."
    assert read["annotations"] == {"readOnlyHint": True, "title": "Find a customer"}
    assert read["inputSchema"]["required"] == ["customer_id"]
    assert invoice["outputSchema"]["type"] == "object"


def test_the_output_schema_takes_every_envelope_and_the_in_progress_answer() -> None:
    schema = tool_output_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    examples: list[AnySuccess | ToolError] = [
        *(make() for make in fixtures.ARTICLE_EXAMPLES.values()),
        fixtures.invoice_created(),
    ]
    for envelope in examples:
        validator.validate(to_wire(envelope))
    waiting = InProgress(
        operation_ref="run_81/step_4",
        tool="create_invoice",
        state="waiting_retry",
        not_before=datetime(2026, 1, 1, tzinfo=UTC),
        agent_message="create_invoice will be retried automatically",
    )
    validator.validate(waiting.model_dump(mode="json"))
    # Neither a half envelope nor a bare object passes.
    assert not validator.is_valid({"ok": False, "code": "X"})
    assert not validator.is_valid({})


def test_openai_and_anthropic_shapes() -> None:
    found = registry()
    chat = {entry["function"]["name"]: entry for entry in openai_chat_tools(found)}
    assert set(chat) == {"create_invoice", "send_email", "crm_lookup"}
    assert chat["crm_lookup"] == {
        "type": "function",
        "function": {
            "name": "crm_lookup",
            "description": "Finds a customer by id.",
            "parameters": find_customer.input_model.model_json_schema(),
            "strict": False,
        },
    }
    responses = {entry["name"]: entry for entry in openai_responses_tools(found)}
    assert responses["create_invoice"]["type"] == "function"
    assert responses["create_invoice"]["parameters"] == InvoiceInput.model_json_schema()
    assert "function" not in responses["create_invoice"]
    anthropic = {entry["name"]: entry for entry in anthropic_tools(found)}
    assert anthropic["send_email"]["input_schema"]["type"] == "object"
    assert set(anthropic["send_email"]) == {"name", "description", "input_schema"}
    assert tool_for_name(found, "crm_lookup") == "crm.lookup"
    assert tool_for_name(found, "crm.lookup") == "crm.lookup"


def test_pydantic_ai_tool_definitions() -> None:
    definitions = {item.name: item for item in pydantic_ai_tool_definitions(registry())}
    assert definitions["create_invoice"].description == CreateInvoice.description
    assert definitions["crm_lookup"].parameters_json_schema["required"] == ["customer_id"]


def test_two_tools_that_would_share_a_function_name_are_refused() -> None:
    found = registry()

    @tool(name="crm_lookup", evidence=None)
    def other(customer_id: str, operation_ref: str) -> None:
        """Another."""

    found.register(other)
    with pytest.raises(ValueError, match=r"'crm.lookup' and 'crm_lookup'|'crm_lookup' and"):
        plain_names(found)


class _Bare(Adapter[InvoiceInput]):
    tool: ClassVar[str] = "bare_write"
    writes: ClassVar[bool] = True
    input_model: ClassVar[type[BaseModel]] = InvoiceInput

    def execute(
        self, data: InvoiceInput, operation_ref: str, context: CallContext
    ) -> AnySuccess | ToolError:
        raise NotImplementedError


class _Documented(_Bare):
    """Writes a documented thing.

    Details the model need not read."""

    tool: ClassVar[str] = "documented"


def test_describe_falls_back_to_the_own_docstring_then_a_plain_sentence() -> None:
    assert _Documented.describe() == "Writes a documented thing."
    # The base Adapter's docstring is not a description of this tool.
    assert _Bare.describe() == "The bare_write tool (a write), run through toolsafe."
    assert CreateInvoice.describe() == CreateInvoice.description


def test_a_blank_title_is_refused() -> None:
    with pytest.raises(ValueError, match="title must be non-empty"):

        @read_tool(title=" ")
        def blank(x: int) -> int:
            return x
