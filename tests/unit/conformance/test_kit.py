"""The kit's parts in-process: the proxy relays and injects over real sockets, reads and
adapters it cannot wrap get the rows that apply to them, the report's two forms agree,
and the room needs neither a broker nor a database."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel

from toolsafe import read_tool
from toolsafe.adapters.envelope import AnySuccess, ToolError, ToolSuccess, Verification
from toolsafe.adapters.protocol import Adapter, CallContext
from toolsafe.conformance import check_adapter

ROOT = Path(__file__).resolve().parents[3]


def test_a_read_tool_gets_the_read_expectations_and_passes() -> None:
    @read_tool(timeout=0.5)
    def balance(account: str) -> dict[str, int]:
        """An account's balance."""
        return {"cents": 100}

    report = check_adapter(balance, {"account": "a"})
    assert report.passed, report.text()
    rows = {check.scenario: check for check in report.checks}
    assert "not unknown" in rows["ConnectionResetError raised after the call"].expected
    assert not any(name.startswith("lookup") for name in rows)


class Anything(BaseModel):
    name: str


class HandWritten(Adapter[Anything]):
    tool: ClassVar[str] = "hand_written"
    writes: ClassVar[bool] = True
    input_model: ClassVar[type[BaseModel]] = Anything

    def execute(
        self, data: Anything, operation_ref: str, context: CallContext
    ) -> AnySuccess | ToolError:
        return ToolSuccess[Any](
            operation_ref=operation_ref,
            result={},
            verification=Verification(checked_at="2026-01-01T00:00:00Z", evidence_ref="e_1"),
        )


def test_an_adapter_the_kit_cannot_wrap_is_told_so() -> None:
    report = check_adapter(HandWritten(), {"name": "n"})
    verdicts = {check.scenario: check.verdict for check in report.checks}
    assert verdicts == {
        "the sample input, no fault": "pass",
        "fault injection": "skip",
        "lookup by operation_ref": "warn",
    }
    assert report.passed
    text = report.text()
    assert "hand_written (adapter): PASSED - 1 passed, 0 failed, 1 warnings, 1 skipped" in text
    data = report.to_json()
    assert data["passed"] is True and len(data["checks"]) == 3  # type: ignore[arg-type]


def test_the_kit_needs_no_broker_or_database() -> None:
    forbidden = ("celery", "kombu", "sqlalchemy", "toolsafe.tasks", "toolsafe.recovery")
    for path in sorted((ROOT / "toolsafe" / "conformance").glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names = (
                [alias.name for alias in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            for name in names:
                assert not name.startswith(forbidden), f"{path.name} imports {name}"
