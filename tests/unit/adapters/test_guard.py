"""The guard: whatever an adapter returns or raises becomes a valid, honest envelope."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any, ClassVar

import pytest
from pydantic import BaseModel, JsonValue

from toolsafe.adapters import codes
from toolsafe.adapters.envelope import (
    AnySuccess,
    ToolError,
    ToolSuccess,
    Verification,
    flagged_fields,
)
from toolsafe.adapters.guard import call_adapter, call_lookup
from toolsafe.adapters.protocol import (
    Adapter,
    CallContext,
    FieldError,
    LookupFound,
    LookupResult,
    LookupUnavailable,
)

REF = "run_81/step_4"


class Amount(BaseModel):
    amount: int


class Scripted(Adapter[Amount]):
    tool: ClassVar[str] = "scripted"
    writes: ClassVar[bool] = True
    input_model: ClassVar[type[BaseModel]] = Amount
    has_lookup: ClassVar[bool] = True

    def __init__(
        self,
        returns: object = None,
        raises: Exception | None = None,
        problems: list[FieldError] | None = None,
        check_raises: bool = False,
        lookup_returns: object = None,
    ) -> None:
        self.returns, self.raises, self.problems = returns, raises, problems or []
        self.check_raises, self.lookup_returns = check_raises, lookup_returns
        self.executed = 0

    def check(self, parsed: Amount) -> list[FieldError]:
        if self.check_raises:
            raise RuntimeError("check blew up")
        return self.problems

    def execute(
        self, data: Amount, operation_ref: str, context: CallContext
    ) -> AnySuccess | ToolError:
        self.executed += 1
        if self.raises is not None:
            raise self.raises
        return self.returns  # type: ignore[return-value]

    def lookup(self, operation_ref: str) -> LookupResult:
        if isinstance(self.lookup_returns, Exception):
            raise self.lookup_returns
        return self.lookup_returns  # type: ignore[return-value]


class ScriptedNoLookup(Scripted):
    has_lookup: ClassVar[bool] = False


class ScriptedRead(Scripted):
    writes: ClassVar[bool] = False


def success(ref: str = REF) -> AnySuccess:
    return ToolSuccess[JsonValue](
        operation_ref=ref,
        result={"id": 1},
        verification=Verification(checked_at=datetime.now(UTC), evidence_ref="inv_1"),
    )


def error(result: object) -> ToolError:
    assert isinstance(result, ToolError), result
    return result


def test_a_valid_success_passes_through() -> None:
    done = success()
    assert call_adapter(Scripted(returns=done), {"amount": 1}, REF) == done


def test_a_model_error_is_invalid_input_and_nothing_runs() -> None:
    adapter = Scripted(returns=success())
    envelope = error(call_adapter(adapter, {"amount": "lots", "extra": 1}, REF))
    assert envelope.code == "INVALID_INPUT"
    assert (envelope.retry.directive, envelope.next_action) == ("after_input_fix", "correct_input")
    assert "amount" in flagged_fields(envelope)
    assert adapter.executed == 0


def test_a_catalogued_field_code_is_kept() -> None:
    problems = [FieldError("recipient_email", codes.INVALID_RECIPIENT_ADDRESS)]
    envelope = error(call_adapter(Scripted(problems=problems), {"amount": 1}, REF))
    assert envelope.code == "INVALID_RECIPIENT_ADDRESS"
    assert envelope.safe_details["field"] == "recipient_email"
    assert envelope.retry.max_attempts_remaining == 1
    assert envelope.agent_message == codes.render(
        codes.spec_for("INVALID_RECIPIENT_ADDRESS").agent_template, envelope.safe_details
    )


@pytest.mark.parametrize(
    "problems",
    [
        [FieldError("a", "INVALID_RECIPIENT_ADDRESS"), FieldError("b", "TOO_LONG")],
        [FieldError("a", "NOT_IN_THE_CATALOGUE")],
        [FieldError("a", codes.VERSION_CONFLICT)],  # catalogued, but not a validation code
    ],
)
def test_other_problems_are_invalid_input(problems: list[FieldError]) -> None:
    envelope = error(call_adapter(Scripted(problems=problems), {"amount": 1}, REF))
    assert envelope.code == "INVALID_INPUT"
    assert set(flagged_fields(envelope)) == {p.field for p in problems}


def test_a_raising_check_is_internal_and_not_committed(caplog: pytest.LogCaptureFixture) -> None:
    envelope = error(call_adapter(Scripted(check_raises=True), {"amount": 1}, REF))
    assert "blew up" not in caplog.text  # exception text may hold input data
    assert (envelope.code, envelope.commit_state, envelope.next_action) == (
        "ADAPTER_EXCEPTION", "not_committed", "escalate",
    )  # fmt: skip


@pytest.mark.parametrize(
    ("adapter_class", "state", "action"),
    [
        (Scripted, "unknown", "verify_operation"),
        (ScriptedNoLookup, "unknown", "escalate"),
        (ScriptedRead, "not_committed", "escalate"),
    ],
)
def test_a_raising_execute_is_unknown_for_a_write(
    adapter_class: type[Scripted], state: str, action: str, caplog: pytest.LogCaptureFixture
) -> None:
    adapter = adapter_class(raises=RuntimeError("password=hunter2 for bob@corp.example"))
    envelope = error(call_adapter(adapter, {"amount": 1}, REF))
    assert (envelope.code, envelope.category) == ("ADAPTER_EXCEPTION", "internal")
    assert (envelope.commit_state, envelope.next_action) == (state, action)
    assert envelope.retry.directive == "never"
    assert "hunter2" not in caplog.text
    assert "hunter2" not in envelope.agent_message


@pytest.mark.parametrize(
    "returned",
    [None, {"ok": True}, "ok", success(ref="other/ref")],
    ids=["none", "dict", "string", "other-ref"],
)
def test_contract_violations(returned: Any) -> None:
    envelope = error(call_adapter(Scripted(returns=returned), {"amount": 1}, REF))
    assert (envelope.code, envelope.commit_state, envelope.next_action) == (
        "ADAPTER_CONTRACT_VIOLATION", "unknown", "verify_operation",
    )  # fmt: skip


def test_a_read_claiming_an_unknown_outcome_is_a_contract_violation() -> None:
    unknown = codes.build_error(codes.OUTCOME_UNKNOWN, REF)
    envelope = error(call_adapter(ScriptedRead(returns=unknown), {"amount": 1}, REF))
    assert (envelope.code, envelope.commit_state) == ("ADAPTER_CONTRACT_VIOLATION", "not_committed")


def test_lookup_guard() -> None:
    now = datetime.now(UTC)
    found = LookupFound(checked_at=now, result={"id": 1}, evidence_ref="inv_1")
    assert call_lookup(Scripted(lookup_returns=found), REF) == found
    assert call_lookup(ScriptedNoLookup(), REF).code == "LOOKUP_NOT_PROVIDED"  # type: ignore[union-attr]
    raised = call_lookup(Scripted(lookup_returns=RuntimeError("x")), REF)
    assert isinstance(raised, LookupUnavailable) and raised.code == "LOOKUP_EXCEPTION"
    wrong = call_lookup(Scripted(lookup_returns={"found": True}), REF)
    assert isinstance(wrong, LookupUnavailable) and wrong.code == "LOOKUP_CONTRACT_VIOLATION"


def test_guard_logs_carry_no_exception_text(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    call_lookup(Scripted(lookup_returns=RuntimeError("sk_live_abcdefghijklmnop")), REF)
    assert "sk_live" not in caplog.text
    assert "RuntimeError" in caplog.text
