"""The envelope as RFC 9457 problem details, on the article's examples (the agent
stacks' shapes are tested in tests/unit/agents/test_mappings.py)."""

from __future__ import annotations

import json
import re

import pytest

from tests.support import fixtures
from toolsafe.adapters.envelope import ToolError, to_wire
from toolsafe.adapters.mappings import (
    PROBLEM_TYPE_PREFIX,
    from_problem_details,
    problem_instance,
    to_problem_details,
)


@pytest.mark.parametrize(
    ("name", "status"),
    [
        ("INVALID_RECIPIENT_ADDRESS", 422),
        ("DEPENDENCY_UNAVAILABLE", 503),
        ("VERSION_CONFLICT", 409),
        ("MISSING_APPROVAL", 403),
        ("OUTCOME_UNKNOWN", 502),
    ],
)
def test_problem_details(name: str, status: int) -> None:
    envelope = fixtures.ARTICLE_EXAMPLES[name]()
    problem = to_problem_details(envelope)
    assert problem["type"] == PROBLEM_TYPE_PREFIX + name
    assert problem["detail"] == envelope.agent_message
    assert problem["instance"] == "urn:toolsafe:operation:run_81/step_4"
    assert problem["operation_ref"] == "run_81/step_4"
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


def test_retry_keeps_not_before() -> None:
    envelope = fixtures.dependency_unavailable()
    assert isinstance(envelope, ToolError)
    expected = "2026-11-30T09:16:00Z"
    assert to_problem_details(envelope)["retry"]["not_before"] == expected


# Every catalogue code's problem status: the code first, then the commit state, then
# the category (docs/agents.md). A new code must be given its row here.
STATUS_BY_CODE = {
    "INVALID_INPUT": 422,
    "INVALID_RECIPIENT_ADDRESS": 422,
    "UPSTREAM_VALIDATION_FAILED": 422,
    "REQUEST_REJECTED": 422,
    "NOT_AUTHORIZED": 403,
    "MISSING_APPROVAL": 403,
    "REJECTED": 403,
    "VERSION_CONFLICT": 409,
    "CONFLICT": 409,
    "IDEMPOTENCY_KEY_REUSED": 409,
    "IDEMPOTENCY_KEY_IN_FLIGHT": 409,
    "CANCELLED": 409,
    "RATE_LIMITED": 429,
    "DEPENDENCY_UNAVAILABLE": 503,
    "OPERATION_NOT_FOUND": 503,
    "WORKER_LOST": 503,
    "OUTCOME_UNKNOWN": 502,
    "UNREADABLE_RESPONSE": 502,
    "UNVERIFIABLE_UNKNOWN": 502,
    "LOOKUP_UNAVAILABLE": 502,
    "NO_LOOKUP": 502,
    "ATTEMPTS_EXHAUSTED": 502,
    "LOOP_GUARD": 502,
    "NOT_BEFORE_TOO_FAR": 502,
    "UNKNOWN_TOOL": 404,
    "CLIENT_REQUEST_INVALID": 500,
    "UPSTREAM_ERROR": 500,
    "ADAPTER_EXCEPTION": 500,
    "ADAPTER_CONTRACT_VIOLATION": 500,
    "OPERATOR_RESOLVED": 500,
    "SECRET_KEY_MISSING": 500,
}


def test_every_code_has_a_status_of_its_own_kind() -> None:
    from toolsafe.adapters.codes import CATALOGUE, build_error

    assert set(STATUS_BY_CODE) == set(CATALOGUE)
    for code, status in STATUS_BY_CODE.items():
        envelope = build_error(code, "run_81/step_4", not_before=fixtures.NOT_BEFORE)
        assert to_problem_details(envelope)["status"] == status, code
    # The code decides before the category: a rate limit is 429, not the 503 of its
    # category; an unknown outcome of any code is 502 and carries no retry.
    unknown = build_error("UPSTREAM_ERROR", "r", commit_state="unknown")
    assert to_problem_details(unknown)["status"] == 502
    assert to_problem_details(unknown)["retry"]["directive"] == "never"


_URI_REFERENCE = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:[A-Za-z0-9\-._~!$&'()*+,;=:@/%]*$")


@pytest.mark.parametrize("ref", ["a_b:c/1", "run_81/step_4", "team-a/openai:run-1:call_x"])
def test_instance_is_a_uri_reference_that_gives_the_ref_back(ref: str) -> None:
    envelope = fixtures.outcome_unknown().model_copy(update={"operation_ref": ref})
    problem = to_problem_details(envelope)
    instance = problem["instance"]
    assert _URI_REFERENCE.fullmatch(instance), instance
    assert instance == problem_instance(ref) and instance.startswith("urn:toolsafe:operation:")
    del problem["operation_ref"]  # a client that kept only the standard members
    assert from_problem_details(problem).operation_ref == ref
    assert problem_instance("a b%") == "urn:toolsafe:operation:a%20b%25"
