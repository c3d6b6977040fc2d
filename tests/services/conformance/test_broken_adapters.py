"""The kit against the real example service (in-process, real HTTP through its proxy):
one broken adapter per class of mistake, each failing with the message that names it and
its fix; the shipped examples pass without a warning; a downstream that ignores the key
is reported as such; and the kit never sends a request to a target nobody named."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.adapters.adapter_servers import Conn, ScriptedServer
from toolsafe.adapters.examples.downstream import DownstreamService
from toolsafe.conformance import Check, Report, TargetNotNamed, check_adapter, load_adapter

INVOICE = {"customer_id": "cus_42", "amount_cents": 1250, "currency": "EUR"}
EMAIL = {"recipient_email": "ana@example.com", "subject": "Your invoice", "body": "Thanks."}
CHARGE = {"customer_id": "cus_42", "amount_cents": 1250}
SUPPORT = "tests.support.conformance.adapters"


@pytest.fixture
def service() -> Iterator[DownstreamService]:
    with DownstreamService() as running:
        yield running


def failures(report: Report) -> dict[str, Check]:
    return {check.scenario: check for check in report.failures}


@pytest.mark.parametrize(
    ("spec", "sample"),
    [("toolsafe.adapters.examples:create_invoice", INVOICE),
     ("toolsafe.adapters.examples:send_email", EMAIL)],
)  # fmt: skip
def test_the_shipped_examples_pass_without_a_warning(
    service: DownstreamService, spec: str, sample: dict[str, object]
) -> None:
    report = check_adapter(load_adapter(spec), sample, base_url=service.url)
    assert report.passed, report.text()
    assert report.counts()["warn"] == 0 and report.counts()["skip"] == 0, report.text()
    assert max(service.effects().values()) == 1


def test_a_a_queued_answer_taken_as_success(service: DownstreamService) -> None:
    report = check_adapter(load_adapter(f"{SUPPORT}:queued_is_success"), INVOICE,
                           base_url=service.url)  # fmt: skip
    row = failures(report)['202 Accepted {"status": "queued", "id": "job_1"} (nothing stored)']
    assert row.got.startswith("success (evidence accepted:conformance/")
    assert "names no stored record" in row.expected
    assert "a success needs evidence of a stored record" in row.got
    assert "treat 202 and queued answers as OUTCOME_UNKNOWN" in row.got
    assert set(failures(report)) == {row.scenario}


def test_b_any_404_taken_as_absent(service: DownstreamService) -> None:
    report = check_adapter(load_adapter(f"{SUPPORT}:any_404_absent"), INVOICE,
                           base_url=service.url)  # fmt: skip
    caught = failures(report)
    assert set(caught) == {
        "lookup: 404 from a proxy (no body)",
        "lookup: 404 from a missing route (an HTML page)",
        'lookup: 404 from a missing route ({"error": "not_found"})',
        'lookup: 404 from a missing route ({"detail": "Not Found"})',
    }
    for row in caught.values():
        assert row.got.startswith("not found — a 404 from a missing route or a proxy read as")
        assert "declare the service's own 404 shape (lookup_not_found_codes" in row.got


def test_c_the_key_that_never_reaches_the_downstream_is_named(
    service: DownstreamService,
) -> None:
    report = check_adapter(load_adapter(f"{SUPPORT}:key_never_sent"), INVOICE,
                           base_url=service.url)  # fmt: skip
    caught = failures(report)
    row = caught["the operation_ref reaches the downstream as its idempotency key"]
    assert row.expected == "the operation_ref in the Idempotency-Key header"
    assert "no Idempotency-Key header in the request (headers sent:" in row.got
    assert "X-Request-Id" in row.got and "Fix: send the operation_ref in" in row.got
    retry = caught["retry under the same operation_ref after a delivered write"]
    assert retry.got.startswith("not counted: the operation_ref never reached the downstream")
    assert "0 effect" not in report.text()
    # The service did hold the writes: under no key at all.
    assert service.effects().get("-", 0) >= 1


def test_d_a_read_timeout_made_into_a_retryable_answer(service: DownstreamService) -> None:
    report = check_adapter(load_adapter(f"{SUPPORT}:slow_answer_retried"), INVOICE,
                           base_url=service.url)  # fmt: skip
    caught = failures(report)
    assert set(caught) == {"request delivered, answer slower than the read timeout"}
    row = caught["request delivered, answer slower than the read timeout"]
    assert row.got.startswith("DEPENDENCY_UNAVAILABLE · not_committed · wait_and_retry")
    assert "a timeout or a lost connection after the request was sent must be unknown" in row.got


def test_d_an_sdk_error_after_sending_called_nothing_written(
    service: DownstreamService,
) -> None:
    spec = "tests.support.conformance.ledger_sdk:sdk_charge_retried"
    report = check_adapter(load_adapter(spec), CHARGE, base_url=service.url)
    assert report.kind == "function"
    caught = failures(report)
    row = caught["wire: request delivered, connection dropped before the answer"]
    assert row.got.startswith("DEPENDENCY_UNAVAILABLE · not_committed")
    assert "a timeout or a lost connection after the request was sent must be unknown" in row.got
    assert "leave the exception out of errors=" in row.got
    assert "wire: request delivered, answer slower than the read timeout" in caught


def test_d_the_sound_sdk_adapter_passes_pointed_at_a_named_service(
    service: DownstreamService,
) -> None:
    report = check_adapter(load_adapter("tests.support.conformance.ledger_sdk:sdk_charge"),
                           CHARGE, base_url=service.url)  # fmt: skip
    assert report.passed, report.text()
    verdicts = {check.scenario: check.verdict for check in report.checks}
    assert verdicts["the operation_ref reaches the downstream as its idempotency key"] == "pass"
    assert verdicts["retry under the same operation_ref after a delivered write"] == "pass"
    assert verdicts["wire: request delivered, then 502 Bad Gateway"] == "pass"
    assert max(service.effects().values()) == 1


def test_f_a_downstream_that_ignores_the_key_is_reported_not_failed() -> None:
    with DownstreamService(naive=True) as naive:
        loaded = load_adapter("toolsafe.adapters.examples:create_invoice")
        report = check_adapter(loaded, INVOICE, base_url=naive.url)
    assert report.passed, report.text()
    rows = {check.scenario: check for check in report.checks}
    row = rows["retry under the same operation_ref after a delivered write"]
    assert row.verdict == "warn"
    assert "2 effect(s) — the downstream ignores the key" in row.got
    assert "Not an adapter failure" in row.got
    assert "What toolsafe still guarantees" in row.got and "What the adapter could add" in row.got
    assert rows["effects per operation_ref over the whole run"].verdict == "pass"


def test_f_a_declared_deduplication_that_the_downstream_ignores_fails() -> None:
    with DownstreamService(naive=True) as naive:
        loaded = load_adapter("toolsafe.adapters.examples:create_invoice")
        loaded.adapter.deduplicates_by_key = True  # type: ignore[misc]
        report = check_adapter(loaded, INVOICE, base_url=naive.url)
    assert not report.passed
    row = failures(report)["retry under the same operation_ref after a delivered write"]
    assert "2 effect(s) — the adapter declares deduplicates_by_key" in row.got
    assert "drop deduplicates_by_key" in row.got


def test_f_a_declared_deduplication_that_the_downstream_keeps_passes(
    service: DownstreamService,
) -> None:
    loaded = load_adapter("toolsafe.adapters.examples:create_invoice")
    loaded.adapter.deduplicates_by_key = True  # type: ignore[misc]
    report = check_adapter(loaded, INVOICE, base_url=service.url)
    assert report.passed, report.text()
    rows = {check.scenario: check for check in report.checks}
    assert rows["retry under the same operation_ref after a delivered write"].verdict == "pass"


def _counting(seen: list[str]) -> ScriptedServer:
    def answer(conn: Conn) -> None:
        seen.append("connection")
        if conn.read_request() is not None:
            conn.respond(500, b'{"error": "this is production"}')

    return ScriptedServer(answer)


def test_the_kit_never_writes_to_a_target_nobody_named(service: DownstreamService) -> None:
    seen: list[str] = []
    with _counting(seen) as production:
        environ = {"TOOLSAFE_EXAMPLE_DOWNSTREAM_URL": production.url}
        loaded = load_adapter("toolsafe.adapters.examples:create_invoice", environ)
        told: list[str] = []
        with pytest.raises(TargetNotNamed) as caught:
            check_adapter(loaded, INVOICE, announce=told.append)
        message = str(caught.value)
        assert f"it would write to {production.url}" in message
        assert "TOOLSAFE_EXAMPLE_DOWNSTREAM_URL" in message and told == []
        named = check_adapter(loaded, INVOICE, base_url=service.url, announce=told.append)
        dry = check_adapter(loaded, INVOICE, dry_run=True)
        assert named.passed and dry.passed, named.text() + dry.text()
        assert told == [f"create_invoice: writing to {service.url} (named by --base-url)"]
    assert seen == []  # not one connection reached the configured downstream
    assert service.effects()


def test_the_settings_are_read_as_a_worker_reads_them(service: DownstreamService) -> None:
    environ = {"TOOLSAFE_EXAMPLE_DOWNSTREAM_URL": service.url}
    loaded = load_adapter("toolsafe.adapters.examples:create_invoice", environ)
    report = check_adapter(loaded, INVOICE, target_from_settings=True)
    assert report.passed, report.text()
    assert report.target == (
        f"create_invoice: writing to {service.url} (from TOOLSAFE_EXAMPLE_DOWNSTREAM_URL or "
        "its default, --target-from-settings)"
    )
    assert service.effects()
    function = load_adapter("tests.support.conformance.ledger_sdk:sdk_charge",
                            {"TOOLSAFE_LEDGER_BASE_URL": service.url})  # fmt: skip
    before = sum(service.effects("invoices").values())
    assert check_adapter(function, CHARGE, target_from_settings=True).passed
    assert sum(service.effects("invoices").values()) > before


def test_a_dry_run_sends_nothing_to_the_configured_downstream() -> None:
    seen: list[str] = []
    with _counting(seen) as production:
        environ = {"TOOLSAFE_LEDGER_BASE_URL": production.url}
        function = load_adapter("tests.support.conformance.ledger_sdk:sdk_charge", environ)
        report = check_adapter(function, CHARGE, dry_run=True)
        http = load_adapter(f"{SUPPORT}:queued_is_success")
        broken = check_adapter(http, INVOICE, dry_run=True)
    assert report.passed, report.text()
    assert seen == []
    # A dry run still catches what the adapter's own classification gets wrong.
    assert '202 Accepted {"status": "queued", "id": "job_1"} (nothing stored)' in failures(broken)
