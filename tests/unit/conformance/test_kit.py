"""The kit's parts in-process: reads and adapters it cannot wrap get the rows that apply
to them, the report's two forms agree, a write runs only against a target the caller
names, function adapters get the retry/effect count and their declared exceptions
raised after the call, a call held past its timeout costs the kit's short slow-answer
timeout rather than the run's, and the room needs neither a broker nor a database."""

from __future__ import annotations

import ast
import time
from pathlib import Path
from typing import Any, ClassVar

import pytest
from pydantic import BaseModel

from tests.support.conformance import adapters
from toolsafe import read_tool, tool
from toolsafe.adapters.envelope import AnySuccess, ToolError, ToolSuccess, Verification
from toolsafe.adapters.protocol import Adapter, CallContext
from toolsafe.adapters.sending import KeyPlace
from toolsafe.conformance import TargetNotNamed, check_adapter
from toolsafe.conformance.loading import Loaded, aim
from toolsafe.conformance.proxy import Seen
from toolsafe.conformance.targets import key_missing

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
    report = check_adapter(HandWritten(), {"name": "n"}, target_from_settings=True)
    verdicts = {check.scenario: check.verdict for check in report.checks}
    assert verdicts == {
        "the sample input, no fault": "pass",
        "the operation_ref reaches the downstream as its idempotency key": "skip",
        "fault injection": "skip",
        "lookup by operation_ref": "warn",
    }
    assert report.passed
    text = report.text()
    assert "hand_written (adapter): PASSED - 1 passed, 0 failed, 1 warnings, 2 skipped" in text
    assert "target: hand_written: writing to wherever its code writes" in text
    data = report.to_json()
    assert data["passed"] is True and len(data["checks"]) == 4  # type: ignore[arg-type]
    assert str(data["target"]).startswith("hand_written: writing to")


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


CHARGE = {"customer_id": "cus_7", "amount_cents": 300}


def test_a_write_without_a_named_target_is_refused_before_anything_is_sent() -> None:
    told: list[str] = []
    with pytest.raises(TargetNotNamed) as caught:
        check_adapter(adapters.ledger_charge, CHARGE, announce=told.append)
    message = str(caught.value)
    assert "'ledger_charge' writes" in message
    assert "--base-url" in message and "--target-from-settings" in message
    assert "--dry-run" in message and told == []
    with pytest.raises(ValueError, match="one of"):
        aim(Loaded(adapters.ledger_charge), "http://127.0.0.1:1", True, False)
    with pytest.raises(ValueError, match="settings name no target"):
        aim(Loaded(adapters.ledger_charge), "http://127.0.0.1:1", False, False)


def test_the_target_is_announced_before_the_first_write() -> None:
    told: list[str] = []

    def announce(line: str) -> None:
        told.append(line)
        assert not adapters.ledger_charge.count_effects("conformance/first/baseline")

    report = check_adapter(
        adapters.ledger_charge, CHARGE, target_from_settings=True, run_id="first",
        announce=announce,
    )  # fmt: skip
    assert told == [report.target] and "ledger_charge: writing to" in told[0]


def test_a_function_adapter_gets_the_retry_and_a_fresh_key_each_call_is_caught() -> None:
    sound = check_adapter(adapters.ledger_charge, CHARGE, target_from_settings=True)
    assert sound.passed, sound.text()
    rows = {check.scenario: check for check in sound.checks}
    retry = rows["retry under the same operation_ref after a delivered write"]
    assert retry.verdict == "pass" and retry.got.endswith("1 effect(s)")
    broken = check_adapter(adapters.fresh_key_charge, CHARGE, target_from_settings=True)
    row = {check.scenario: check for check in broken.failures}[
        "retry under the same operation_ref after a delivered write"
    ]
    assert "2 effect(s) — the retry wrote a second record" in row.got
    assert "idempotency_place=" in row.got


def test_each_declared_exception_is_raised_after_the_call() -> None:
    report = check_adapter(adapters.ledger_charge, CHARGE, target_from_settings=True)
    rows = {check.scenario: check for check in report.checks}
    after = rows["RateLimited raised after the call reached the downstream"]
    assert after.verdict == "pass" and "mark it after_send()" in after.expected
    assert (
        rows["verify after: RateLimited raised after the call reached the downstream"].verdict
        == "pass"
    )
    refused = rows["ConnectionRefusedError raised after the call reached the downstream"]
    assert refused.verdict == "pass"


def test_a_queued_job_returned_by_a_function_is_not_a_success() -> None:
    report = check_adapter(adapters.ledger_charge, CHARGE, dry_run=True)
    assert report.passed, report.text()
    row = {check.scenario: check for check in report.checks}[
        'the call returns {"status": "queued", "id": "job_1"} (nothing stored)'
    ]
    assert row.got.startswith("OUTCOME_UNKNOWN · unknown · verify_operation")
    assert report.target.endswith("dry run against an in-process double; nothing leaves")


def _seen(headers: tuple[tuple[str, str], ...] = (), body: bytes = b"", path: str = "/x") -> Seen:
    return Seen("POST", path, "pass", headers=headers, body=body)


def test_the_key_check_names_what_arrived_instead() -> None:
    header = KeyPlace("header", "Idempotency-Key")
    assert key_missing([_seen((("Idempotency-Key", "r1"),))], header, "r1") is None
    missing = key_missing([_seen((("X-Request-Id", "r1"), ("Accept", "*/*")))], header, "r1")
    assert (
        missing == "no Idempotency-Key header in the request (headers sent: Accept, X-Request-Id)"
    )
    other = key_missing([_seen((("idempotency-key", "r2"),))], header, "r1")
    assert other == "the Idempotency-Key header carries 'r2', not the operation_ref"
    field = KeyPlace("body", "meta.request_id")
    assert key_missing([_seen(body=b'{"meta": {"request_id": "r1"}}')], field, "r1") is None
    assert "fields sent: amount" in str(key_missing([_seen(body=b'{"amount": 1}')], field, "r1"))
    query = KeyPlace("query", "key")
    assert key_missing([_seen(path="/x?key=r1")], query, "r1") is None
    assert "no query parameter 'key'" in str(key_missing([_seen(path="/x?k=r1")], query, "r1"))


def test_free_text_without_a_result_model_is_warned() -> None:
    notes: dict[str, str] = {}

    @tool(lookup=lambda ref: [{"id": notes[ref]}] if ref in notes else [], timeout=0.5)
    def order(item: str, operation_ref: str) -> dict[str, str]:
        """Order an item."""
        notes.setdefault(operation_ref, f"ord_{len(notes) + 1}")
        return {"id": notes[operation_ref], "note": "Thanks for your order, it ships today"}

    report = check_adapter(order, {"item": "pen"}, target_from_settings=True)
    row = {check.scenario: check for check in report.checks}[
        "a success's free text has a result_model"
    ]
    assert row.verdict == "warn" and "free text in note and no result_model" in row.got
    assert report.passed, report.text()


def test_a_call_held_past_its_timeout_returns_once_the_adapter_gave_up() -> None:
    done: dict[str, str] = {}
    timeout = 30.0

    @tool(lookup=lambda ref: [{"id": done[ref]}] if ref in done else [], timeout=timeout)
    def patient_charge(customer_id: str, operation_ref: str) -> dict[str, str]:
        """Charge once per operation_ref, with a long timeout."""
        done.setdefault(operation_ref, f"ch_{len(done) + 1}")
        return {"id": done[operation_ref]}

    started = time.monotonic()
    report = check_adapter(patient_charge, {"customer_id": "c"}, target_from_settings=True,
                           timeout=timeout)  # fmt: skip
    elapsed = time.monotonic() - started
    assert report.passed, report.text()
    verdicts = {check.scenario: check.verdict for check in report.checks}
    assert verdicts["the call runs past the adapter's timeout"] == "pass"
    assert verdicts["verify after: the call runs past the adapter's timeout"] == "pass"
    assert verdicts["lookup runs past the adapter's timeout"] == "pass"
    # Held for its 30 s timeout, the two calls would take a minute.
    assert elapsed < timeout
