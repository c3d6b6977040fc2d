"""The committed JSON Schema matches the models; `toolsafe schema` prints it."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from tests.support import fixtures
from toolsafe.adapters.envelope import json_schema, to_wire

SCHEMA_FILE = Path(__file__).resolve().parents[3] / "adapters" / "schema" / "envelope.schema.json"


def test_committed_schema_matches_the_models() -> None:
    committed = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    assert committed == json_schema(), (
        "adapters/schema/envelope.schema.json is stale: run `make schema` and commit it"
    )


def test_schema_names_the_wire_fields() -> None:
    schema = json_schema()
    error = schema["$defs"]["ToolError"]
    assert error["additionalProperties"] is False
    assert set(error["required"]) >= {
        "code",
        "category",
        "commit_state",
        "retry",
        "next_action",
        "operation_ref",
        "agent_message",
        "user_message",
    }
    assert error["properties"]["next_action"]["enum"] == [
        "correct_input",
        "wait_and_retry",
        "verify_operation",
        "request_approval",
        "escalate",
    ]


@pytest.mark.parametrize("name", sorted(fixtures.ARTICLE_EXAMPLES))
def test_examples_validate_against_the_schema(name: str) -> None:
    jsonschema.validate(to_wire(fixtures.ARTICLE_EXAMPLES[name]()), json_schema())
