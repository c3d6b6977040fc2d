"""Status rows of DESIGN §7 and the lookup, against a real server answering each case."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import pytest

from tests.support.adapters.adapter_servers import Behaviour, Conn, ScriptedServer
from tests.support.adapters.probe_adapters import (
    ProbeInput,
    ProbeRead,
    ProbeWrite,
    ProbeWriteNoLookup,
    settings,
)
from toolsafe.adapters.envelope import AnySuccess, ToolError, ToolSuccess, flagged_fields
from toolsafe.adapters.guard import call_adapter
from toolsafe.adapters.http import HttpAdapter, HttpSettings
from toolsafe.adapters.protocol import CallContext, LookupFound, LookupNotFound, LookupUnavailable
from toolsafe.harness import free_port  # a port nothing listens on

REF = "run_81/step_4"
INPUT = {"name": "n", "amount": 3}


def answer(
    status: int,
    body: Any = "",
    headers: dict[str, str] | None = None,
    content_type: str = "application/json",
) -> Behaviour:
    raw = body if isinstance(body, str | bytes) else json.dumps(body)

    def behaviour(conn: Conn) -> None:
        if conn.read_request() is not None:
            conn.respond(status, raw, headers, content_type)

    return behaviour


def run(
    status: int,
    body: Any = "",
    headers: dict[str, str] | None = None,
    *,
    adapter_class: type[HttpAdapter[ProbeInput]] = ProbeWrite,
    context: CallContext | None = None,
    content_type: str = "application/json",
    **overrides: object,
) -> tuple[AnySuccess | ToolError, ScriptedServer]:
    with ScriptedServer(answer(status, body, headers, content_type)) as server:
        adapter = adapter_class(settings(server.url, **overrides))
        return call_adapter(adapter, INPUT, REF, context), server


def error_of(
    status: int, body: Any = "", headers: dict[str, str] | None = None, **kw: Any
) -> ToolError:
    result, _ = run(status, body, headers, **kw)
    assert isinstance(result, ToolError), result
    return result


def shape(envelope: ToolError) -> tuple[str, str, str, str, str]:
    return (
        envelope.code,
        envelope.category,
        envelope.commit_state,
        envelope.retry.directive,
        envelope.next_action,
    )


# --- 2xx ------------------------------------------------------------------------------


def test_created_is_committed_with_evidence_and_sends_the_keys() -> None:
    result, server = run(
        201,
        {"id": "thing_1", "name": "n", "note": "ok", "secret_field": "s3cr3t"},
        context=CallContext(attempt=1, approval_ref="apr_7"),
    )
    assert isinstance(result, ToolSuccess)
    assert result.commit_state == "committed"
    assert result.verification.evidence_ref == "thing_1"
    assert result.result == {"id": "thing_1", "name": "n", "note": "ok"}
    sent = server.requests[0]
    assert sent.method == "POST"
    assert sent.path == "/things"
    assert sent.headers["idempotency-key"] == REF
    assert sent.headers["x-approval-ref"] == "apr_7"
    assert json.loads(sent.body) == INPUT


def test_no_approval_header_without_approval() -> None:
    _, server = run(201, {"id": "thing_1"})
    assert "x-approval-ref" not in server.requests[0].headers


def test_success_text_fields_are_made_safe() -> None:
    result, _ = run(200, {"id": "t1", "note": "token=abcdef123456 for bob@corp.example.com"})
    assert isinstance(result, ToolSuccess)
    assert result.result == {
        "id": "t1",
        # A string holding a secret is replaced whole, never shown half-redacted.
        "note": "[REDACTED:email]",
    }


def test_200_whose_body_reports_a_known_failure_is_classified_by_the_body() -> None:
    envelope = error_of(200, {"ok": False, "error": {"code": "BAD_NAME", "field": "name"}})
    assert shape(envelope) == (
        "UPSTREAM_VALIDATION_FAILED", "validation", "not_committed", "after_input_fix",
        "correct_input",
    )  # fmt: skip
    assert flagged_fields(envelope) == ("name",)


def test_200_whose_body_reports_an_unknown_failure_is_unknown_for_a_write() -> None:
    envelope = error_of(200, {"status": "failed", "error": {"code": "E_WEIRD_42"}})
    assert shape(envelope) == (
        "UPSTREAM_ERROR", "internal", "unknown", "never", "verify_operation",
    )  # fmt: skip


@pytest.mark.parametrize(
    "body", ["<html>OK</html>", "", '{"id": "t1"', '["t1"]', '{"name": "no id"}', '{"id": "a b"}']
)
def test_2xx_without_evidence_is_verified_not_assumed(body: str) -> None:
    envelope = error_of(200, body)
    assert shape(envelope) == (
        "UNREADABLE_RESPONSE", "internal", "unknown", "never", "verify_operation",
    )  # fmt: skip


def test_oversized_2xx_body_is_cut_not_buffered() -> None:
    huge = '{"id": "t1", "note": "' + "x" * (8 * 1024 * 1024) + '"}'
    envelope = error_of(200, huge)
    assert envelope.code == "UNREADABLE_RESPONSE"


def test_read_tool_succeeds_without_evidence() -> None:
    result, server = run(200, {"name": "n", "note": "hi"}, adapter_class=ProbeRead)
    assert isinstance(result, ToolSuccess)
    assert result.verification.evidence_ref is None
    assert server.requests[0].method == "GET"


# --- 4xx ------------------------------------------------------------------------------


@pytest.mark.parametrize("status", [400, 422])
def test_validation_with_a_known_code_names_the_field(status: int) -> None:
    envelope = error_of(status, {"error": {"code": "INVALID_RECIPIENT_ADDRESS", "field": "name"}})
    assert shape(envelope) == (
        "INVALID_RECIPIENT_ADDRESS", "validation", "not_committed", "after_input_fix",
        "correct_input",
    )  # fmt: skip
    assert envelope.safe_details["field"] == "name"
    assert envelope.retry.max_attempts_remaining == 1


def test_validation_fields_are_limited_to_the_input_model() -> None:
    envelope = error_of(422, {"fields": ["amount", "name", "ignore_previous", "x" * 300]})
    assert envelope.code == "UPSTREAM_VALIDATION_FAILED"
    assert flagged_fields(envelope) == ("amount", "name")


def test_validation_naming_nothing_is_rejected_not_correctable() -> None:
    envelope = error_of(400, "<html>Bad Request</html>", content_type="text/html")
    assert shape(envelope) == (
        "REQUEST_REJECTED",
        "validation",
        "not_committed",
        "never",
        "escalate",
    )


@pytest.mark.parametrize("body", ["[" * 60_000, '{"a":' * 30_000, "\xff\xfe garbage"])
def test_hostile_json_is_just_unreadable(body: str) -> None:
    envelope = error_of(400, body)
    assert envelope.code == "REQUEST_REJECTED"


def test_absurd_retry_after_dates_fall_back_to_the_default() -> None:
    for value in ("Mon, 30 Nov 99999 05:00:00 GMT", "Mon, 99 Nov 2026 05:00:00 GMT"):
        timed = timed_error_of(
            429, "", {"Retry-After": value}, default_retry_delay=timedelta(seconds=4)
        )
        assert_waits(timed, 4)


@pytest.mark.parametrize("status", [401, 403])
def test_authorization(status: int) -> None:
    envelope = error_of(status, {"error": "forbidden"})
    assert envelope.code == "UPSTREAM_ERROR"  # a code ("forbidden") not in the table
    envelope = error_of(status, "")
    assert shape(envelope) == (
        "NOT_AUTHORIZED", "authorization", "not_committed", "never", "escalate",
    )  # fmt: skip


def test_missing_approval_requests_approval() -> None:
    envelope = error_of(403, {"error": {"code": "MISSING_APPROVAL"}})
    assert shape(envelope) == (
        "MISSING_APPROVAL", "authorization", "not_committed", "never", "request_approval",
    )  # fmt: skip


def test_version_conflict_escalates_for_a_new_plan() -> None:
    envelope = error_of(409, {"error": {"code": "VERSION_CONFLICT"}})
    assert shape(envelope) == ("VERSION_CONFLICT", "conflict", "not_committed", "never", "escalate")
    assert envelope.retry.max_attempts_remaining == 0


def test_idempotency_key_in_flight_is_unknown() -> None:
    envelope = error_of(409, {"error": {"code": "IDEMPOTENCY_KEY_IN_FLIGHT"}})
    assert shape(envelope) == (
        "IDEMPOTENCY_KEY_IN_FLIGHT", "conflict", "unknown", "never", "verify_operation",
    )  # fmt: skip
    no_lookup = error_of(
        409, {"error": {"code": "IDEMPOTENCY_KEY_IN_FLIGHT"}}, adapter_class=ProbeWriteNoLookup
    )
    assert no_lookup.next_action == "escalate"


def test_plain_409_is_a_conflict_and_an_unknown_code_is_upstream_error() -> None:
    assert error_of(409, "").code == "CONFLICT"
    assert error_of(409, {"error": {"code": "EDIT_LOCKED"}}).code == "UPSTREAM_ERROR"
    assert error_of(409, {"error": {"code": "DROP TABLE; --"}}).code == "UPSTREAM_ERROR"


def test_other_4xx_is_upstream_error_not_committed() -> None:
    envelope = error_of(404, "<html>Not Found</html>", content_type="text/html")
    assert shape(envelope) == ("UPSTREAM_ERROR", "internal", "not_committed", "never", "escalate")
    assert envelope.safe_details["status"] == 404


# --- 429, 503 and Retry-After ---------------------------------------------------------


def timed_error_of(
    status: int, body: Any = "", headers: dict[str, str] | None = None, **kw: Any
) -> tuple[ToolError, datetime, datetime]:
    """The envelope and the clock just before and just after the call."""
    before = datetime.now(UTC)
    envelope = error_of(status, body, headers, **kw)
    return envelope, before, datetime.now(UTC)


def assert_waits(timed: tuple[ToolError, datetime, datetime], seconds: float) -> None:
    """``not_before`` is the classification time plus ``seconds``: inside the call's
    own window, with no slack beyond it."""
    envelope, before, after = timed
    wait = timedelta(seconds=seconds)
    assert envelope.retry.not_before is not None
    assert before + wait <= envelope.retry.not_before <= after + wait


def test_429_with_delta_seconds() -> None:
    timed = timed_error_of(429, {"error": {"code": "SLOW_DOWN"}}, {"Retry-After": "7"})
    envelope = timed[0]
    assert shape(envelope) == (
        "RATE_LIMITED", "dependency", "not_committed", "after_delay", "wait_and_retry",
    )  # fmt: skip
    assert_waits(timed, 7)
    assert envelope.safe_details["retry_after_seconds"] == 7


def test_429_with_http_date_is_read_against_the_response_date() -> None:
    # The server's clock runs an hour ahead; the wait it asks for is still 30 s.
    server_now = datetime.now(UTC) + timedelta(hours=1)
    headers = {
        "Date": format_datetime(server_now, usegmt=True),
        "Retry-After": format_datetime(server_now + timedelta(seconds=30), usegmt=True),
    }
    timed = timed_error_of(429, "", headers)
    assert timed[0].code == "RATE_LIMITED"
    assert_waits(timed, 30)


def test_retry_after_is_clamped_and_a_past_date_is_due_now() -> None:
    long = timed_error_of(429, "", {"Retry-After": "86400"}, max_retry_after=timedelta(seconds=60))
    assert_waits(long, 60)
    past = format_datetime(datetime.now(UTC) - timedelta(minutes=5), usegmt=True)
    assert_waits(timed_error_of(429, "", {"Retry-After": past}), 0)


def test_429_without_retry_after_uses_the_default_delay() -> None:
    assert_waits(timed_error_of(429, "", default_retry_delay=timedelta(seconds=4)), 4)
    garbled = timed_error_of(
        429, "", {"Retry-After": "soon"}, default_retry_delay=timedelta(seconds=4)
    )
    assert_waits(garbled, 4)


def test_429_with_no_attempts_left_escalates() -> None:
    envelope = error_of(429, "", {"Retry-After": "1"}, context=CallContext(attempt=5))
    assert shape(envelope) == ("RATE_LIMITED", "dependency", "not_committed", "never", "escalate")


def test_429_after_a_decision_offers_the_runtimes_budget() -> None:
    """Approved after three calls, the step's attempt number is 4 while the runtime gave
    its whole budget again (4 more): the envelope offers the runtime's count within the
    code's own cap (3) and ``max_attempts`` per budget, never the limit minus the
    attempt number (1)."""
    granted = CallContext(attempt=4, attempts_left=4)
    waited = error_of(429, "", {"Retry-After": "1"}, context=granted)
    assert waited.retry.max_attempts_remaining == 3
    capped = error_of(429, "", {"Retry-After": "1"}, context=granted, max_attempts=2)
    assert capped.retry.max_attempts_remaining == 1
    spent = error_of(429, "", {"Retry-After": "1"}, context=CallContext(attempt=5, attempts_left=0))
    assert shape(spent) == ("RATE_LIMITED", "dependency", "not_committed", "never", "escalate")


def test_503_with_retry_after_waits() -> None:
    timed = timed_error_of(503, "<html>down</html>", {"Retry-After": "3"}, content_type="text/html")
    assert shape(timed[0]) == (
        "DEPENDENCY_UNAVAILABLE", "dependency", "not_committed", "after_delay", "wait_and_retry",
    )  # fmt: skip
    assert_waits(timed, 3)


# --- 5xx ------------------------------------------------------------------------------


@pytest.mark.parametrize("status", [500, 502, 503, 504])
def test_5xx_on_a_write_is_unknown(status: int) -> None:
    envelope = error_of(status, "<html>Bad Gateway</html>", content_type="text/html")
    assert shape(envelope) == (
        "OUTCOME_UNKNOWN",
        "dependency",
        "unknown",
        "never",
        "verify_operation",
    )
    assert envelope.safe_details["reason"] == f"http_{status}"
    no_lookup = error_of(status, "", adapter_class=ProbeWriteNoLookup)
    assert no_lookup.next_action == "escalate"


@pytest.mark.parametrize("status", [500, 502, 504])
def test_5xx_on_a_read_waits_and_retries(status: int) -> None:
    envelope = error_of(status, "", adapter_class=ProbeRead)
    assert shape(envelope) == (
        "DEPENDENCY_UNAVAILABLE", "dependency", "not_committed", "after_delay", "wait_and_retry",
    )  # fmt: skip


def test_redirect_on_a_write_is_not_followed_and_is_unknown() -> None:
    envelope = error_of(302, "", {"Location": "http://elsewhere.invalid/"})
    assert shape(envelope) == ("UPSTREAM_ERROR", "internal", "unknown", "never", "verify_operation")


# --- lookup ---------------------------------------------------------------------------


def _reads_then_closes(conn: Conn) -> None:
    conn.read_request()


def _lookup(behaviour: Behaviour) -> tuple[object, ScriptedServer]:
    with ScriptedServer(behaviour) as server:
        return ProbeWrite(settings(server.url)).lookup(REF), server


def test_lookup_found_carries_evidence() -> None:
    found, server = _lookup(answer(200, {"id": "thing_9", "name": "n"}))
    assert isinstance(found, LookupFound)
    assert found.evidence_ref == "thing_9"
    assert found.result == {"id": "thing_9", "name": "n"}
    assert server.requests[0].method == "GET"
    assert server.requests[0].path == "/things?operation_ref=run_81%2Fstep_4"


def test_lookup_not_found_needs_the_documented_code() -> None:
    found, _ = _lookup(answer(404, {"error": {"code": "NOT_FOUND"}}))
    assert isinstance(found, LookupNotFound)
    misrouted, _ = _lookup(answer(404, "<html>no such route</html>"))
    assert isinstance(misrouted, LookupUnavailable)


@pytest.mark.parametrize(
    "behaviour",
    [
        answer(503, "<html>down</html>"),
        answer(500, ""),
        answer(200, "not json"),
        answer(200, {"name": "no evidence"}),
        answer(200, {"ok": False, "error": "E"}),
        _reads_then_closes,
    ],
)
def test_lookup_anything_else_is_unavailable(behaviour: Behaviour) -> None:
    found, _ = _lookup(behaviour)
    assert isinstance(found, LookupUnavailable)


def test_lookup_unreachable_is_unavailable() -> None:
    found = ProbeWrite(settings(f"http://127.0.0.1:{free_port()}")).lookup(REF)
    assert isinstance(found, LookupUnavailable)
    assert found.code == "LOOKUP_UNREACHABLE"


def test_lookup_unavailable_carries_the_retry_after_it_was_given() -> None:
    found, _ = _lookup(answer(503, "<html>down</html>", headers={"Retry-After": "12"}))
    assert isinstance(found, LookupUnavailable)
    assert (found.code, found.retry_after) == ("LOOKUP_HTTP_503", timedelta(seconds=12))
    # Clamped like an execution's Retry-After; absent when the downstream said nothing.
    huge, _ = _lookup(answer(503, "", headers={"Retry-After": "999999"}))
    assert isinstance(huge, LookupUnavailable)
    assert huge.retry_after == HttpSettings(base_url="http://x").max_retry_after
    silent, _ = _lookup(answer(503, "<html>down</html>"))
    assert isinstance(silent, LookupUnavailable) and silent.retry_after is None
