"""The example downstream service over real HTTP: idempotency proven by counting
effects (concurrent duplicates too), naive mode, every fault through the control API,
and the command line."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from email.utils import parsedate_to_datetime
from typing import Any

import httpx
import pytest

from tests.support.adapters.downstream_support import make_visible, wait_in_flight, wait_stored
from tests.support.machine import Machine
from toolsafe.adapters.examples.downstream import DownstreamService

INVOICE = {"customer_id": "C-17", "amount_cents": 1200, "currency": "EUR"}
EMAIL = {"recipient_email": "ann@mail.toolsafe.dev", "subject": "Invoice", "body": "hi"}


@pytest.fixture
def http() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=httpx.Timeout(2.0, read=0.5), trust_env=False) as client:
        yield client


def post(http: httpx.Client, url: str, ref: str | None, body: Any = INVOICE, **headers: str):  # type: ignore[no-untyped-def]
    sent = {"Idempotency-Key": ref} if ref else {}
    sent.update(headers)
    return http.post(f"{url}/invoices", json=body, headers=sent)


def fault(http: httpx.Client, url: str, **spec: Any) -> dict[str, Any]:
    answer = http.post(f"{url}/_control/faults", json=spec)
    assert answer.status_code == 201, answer.text
    created: dict[str, Any] = answer.json()
    return created


def effects(http: httpx.Client, url: str, resource: str | None = None) -> dict[str, int]:
    query = {"resource": resource} if resource else {}
    counts: dict[str, int] = http.get(f"{url}/_control/effects", params=query).json()
    return counts


# --- idempotency ----------------------------------------------------------------------


def test_same_key_creates_one_invoice(downstream: DownstreamService, http: httpx.Client) -> None:
    first = post(http, downstream.url, "r/1")
    again = post(http, downstream.url, "r/1")
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.headers["Idempotent-Replayed"] == "true"
    assert first.json()["record"]["id"] == again.json()["record"]["id"]
    assert effects(http, downstream.url) == {"r/1": 1}
    assert downstream.effects("invoices") == {"r/1": 1}
    # The second request was answered from the key: counted as deduplicated.
    assert http.get(f"{downstream.url}/_control/deduplicated").json() == {"r/1": 1}
    assert downstream.deduplicated() == {"r/1": 1}


def test_same_key_other_payload_is_refused(
    downstream: DownstreamService, http: httpx.Client
) -> None:
    post(http, downstream.url, "r/1")
    refused = post(http, downstream.url, "r/1", {**INVOICE, "amount_cents": 9999})
    assert refused.status_code == 422
    assert refused.json() == {"error": {"code": "IDEMPOTENCY_KEY_REUSED"}}
    assert effects(http, downstream.url) == {"r/1": 1}


def test_a_rejected_request_leaves_the_key_free(
    downstream: DownstreamService, http: httpx.Client
) -> None:
    bad = {**EMAIL, "recipient_email": "ann@mail.example.invalid"}
    rejected = http.post(f"{downstream.url}/emails", json=bad, headers={"Idempotency-Key": "e/1"})
    assert rejected.status_code == 422
    assert rejected.json() == {
        "error": {"code": "INVALID_RECIPIENT_ADDRESS", "field": "recipient_email"}
    }
    fixed = http.post(f"{downstream.url}/emails", json=EMAIL, headers={"Idempotency-Key": "e/1"})
    assert fixed.status_code == 201
    assert effects(http, downstream.url, "emails") == {"e/1": 1}
    assert effects(http, downstream.url, "invoices") == {}


def _hammer(url: str, ref: str, count: int) -> list[httpx.Response]:
    barrier = threading.Barrier(count)
    answers: list[httpx.Response] = []
    lock = threading.Lock()

    # One client (thread-safe, one connection per thread): building an SSL context per
    # thread would cost more than the requests.
    limits = httpx.Limits(max_connections=count)
    with httpx.Client(timeout=5, trust_env=False, limits=limits) as client:

        def one() -> None:
            barrier.wait()
            answer = post(client, url, ref)
            with lock:
                answers.append(answer)

        threads = [threading.Thread(target=one) for _ in range(count)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=10)
    return answers


def test_concurrent_duplicates_create_exactly_one(
    downstream: DownstreamService, http: httpx.Client
) -> None:
    answers = _hammer(downstream.url, "r/concurrent", 24)
    assert len(answers) == 24
    assert sorted({a.status_code for a in answers}) == [200, 201]
    assert [a.status_code for a in answers].count(201) == 1
    assert len({a.json()["record"]["id"] for a in answers}) == 1
    assert effects(http, downstream.url) == {"r/concurrent": 1}


def test_naive_mode_creates_one_per_request_and_still_looks_up(
    naive_downstream: DownstreamService, http: httpx.Client
) -> None:
    answers = _hammer(naive_downstream.url, "r/naive", 8)
    assert [a.status_code for a in answers] == [201] * 8
    assert effects(http, naive_downstream.url) == {"r/naive": 8}
    assert naive_downstream.deduplicated() == {}
    found = http.get(f"{naive_downstream.url}/invoices", params={"operation_ref": "r/naive"})
    assert found.json()["count"] == 8
    assert http.get(f"{naive_downstream.url}/_control/health").json() == {"ok": True, "naive": True}


def test_lookup(downstream: DownstreamService, http: httpx.Client) -> None:
    url = f"{downstream.url}/invoices"
    missing = http.get(url, params={"operation_ref": "r/1"})
    assert (missing.status_code, missing.json()) == (404, {"error": {"code": "NOT_FOUND"}})
    created = post(http, downstream.url, "r/1").json()["record"]
    found = http.get(url, params={"operation_ref": "r/1"}).json()
    assert found == {"record": created, "count": 1}
    assert http.get(url).status_code == 400


def test_validation_names_the_field(downstream: DownstreamService, http: httpx.Client) -> None:
    for body, code, field in [
        ({**INVOICE, "amount_cents": 0}, "INVALID_AMOUNT", "amount_cents"),
        ({**INVOICE, "currency": "euro"}, "INVALID_CURRENCY", "currency"),
        ({**INVOICE, "customer_id": ""}, "INVALID_CUSTOMER", "customer_id"),
    ]:
        answer = post(http, downstream.url, "r/v", body)
        assert answer.json() == {"error": {"code": code, "field": field}}
    assert post(http, downstream.url, "r/v", "[1]").status_code == 400
    assert effects(http, downstream.url) == {}


# --- faults ---------------------------------------------------------------------------


def test_stall_after_store(downstream: DownstreamService, http: httpx.Client) -> None:
    fault(http, downstream.url, fault="stall_after_store", operation_ref="r/1", seconds=5)
    with pytest.raises(httpx.ReadTimeout):
        post(http, downstream.url, "r/1")
    assert effects(http, downstream.url) == {"r/1": 1}
    assert post(http, downstream.url, "r/1").status_code == 200  # the fault was used up


def test_stall_before_store_holds_the_key_in_flight(
    downstream: DownstreamService, http: httpx.Client
) -> None:
    fault(http, downstream.url, fault="stall_before_store", operation_ref="r/1", seconds=1.5)
    first: list[httpx.Response] = []

    def call() -> None:
        with httpx.Client(timeout=5, trust_env=False) as client:
            first.append(post(client, downstream.url, "r/1"))

    thread = threading.Thread(target=call)
    thread.start()
    wait_in_flight(downstream, "invoices", "r/1")
    during = post(http, downstream.url, "r/1")
    assert (during.status_code, during.json()) == (
        409, {"error": {"code": "IDEMPOTENCY_KEY_IN_FLIGHT"}},
    )  # fmt: skip
    thread.join(timeout=5)
    assert first[0].status_code == 201
    assert effects(http, downstream.url) == {"r/1": 1}
    assert downstream.deduplicated() == {"r/1": 1}  # the 409 while in flight


@pytest.mark.parametrize("status", [502, 500, 504])
def test_gateway_error_after_store(
    downstream: DownstreamService, http: httpx.Client, status: int
) -> None:
    spec = {"fault": "error_after_store", "operation_ref": "r/1"}
    fault(http, downstream.url, **spec, **({} if status == 502 else {"status": status}))
    answer = post(http, downstream.url, "r/1")
    assert answer.status_code == status
    assert answer.headers["content-type"] == "text/html"
    assert effects(http, downstream.url) == {"r/1": 1}


@pytest.mark.parametrize(("name", "stored"), [("drop_after_store", 1), ("drop_before_store", 0)])
def test_dropped_connections(
    downstream: DownstreamService, http: httpx.Client, name: str, stored: int
) -> None:
    fault(http, downstream.url, fault=name, operation_ref="r/1")
    with pytest.raises(httpx.RemoteProtocolError):
        post(http, downstream.url, "r/1")
    assert effects(http, downstream.url).get("r/1", 0) == stored


def test_rate_limit_with_seconds_and_http_date(
    downstream: DownstreamService, http: httpx.Client
) -> None:
    fault(http, downstream.url, fault="rate_limit", operation_ref="r/1", retry_after=7)
    limited = post(http, downstream.url, "r/1")
    assert (limited.status_code, limited.headers["Retry-After"]) == (429, "7")
    fault(http, downstream.url, fault="rate_limit", retry_after=30, http_date=True, clock_skew=3600)
    dated = post(http, downstream.url, "r/2")
    server_now = parsedate_to_datetime(dated.headers["Date"])
    wait = parsedate_to_datetime(dated.headers["Retry-After"]) - server_now
    assert dated.status_code == 429
    assert 29 <= wait.total_seconds() <= 31
    assert effects(http, downstream.url) == {}


def test_unavailable_conflict_and_approval(
    downstream: DownstreamService, http: httpx.Client
) -> None:
    fault(http, downstream.url, fault="unavailable", operation_ref="r/1", retry_after=2)
    down = post(http, downstream.url, "r/1")
    assert (down.status_code, down.headers["Retry-After"]) == (503, "2")
    fault(http, downstream.url, fault="version_conflict", operation_ref="r/1")
    assert post(http, downstream.url, "r/1").json() == {"error": {"code": "VERSION_CONFLICT"}}
    fault(http, downstream.url, fault="require_approval", operation_ref="r/1", times=None)
    refused = post(http, downstream.url, "r/1")
    assert (refused.status_code, refused.json()) == (403, {"error": {"code": "MISSING_APPROVAL"}})
    approved = post(http, downstream.url, "r/1", **{"X-Approval-Ref": "apr_1"})
    assert approved.status_code == 201
    assert approved.json()["record"]["approval_ref"] == "apr_1"
    assert effects(http, downstream.url) == {"r/1": 1}


def test_lookup_down_and_eventual_consistency(
    downstream: DownstreamService, http: httpx.Client
) -> None:
    lookup = f"{downstream.url}/invoices"
    fault(http, downstream.url, fault="eventual_consistency", operation_ref="r/1", seconds=60)
    assert post(http, downstream.url, "r/1").status_code == 201
    assert http.get(lookup, params={"operation_ref": "r/1"}).status_code == 404
    fault(http, downstream.url, fault="lookup_down", operation_ref="r/1")
    assert http.get(lookup, params={"operation_ref": "r/1"}).status_code == 503
    make_visible(downstream, "r/1")
    assert http.get(lookup, params={"operation_ref": "r/1"}).status_code == 200


def test_fault_scope_times_and_reset(downstream: DownstreamService, http: httpx.Client) -> None:
    url = downstream.url
    fault(http, url, fault="version_conflict", times=2, resource="invoices")
    assert [post(http, url, f"r/{i}").status_code for i in range(3)] == [409, 409, 201]
    fault(http, url, fault="version_conflict", operation_ref="*", times=None, resource="emails")
    assert post(http, url, "r/9").status_code == 201
    for _ in range(3):
        answer = http.post(f"{url}/emails", json=EMAIL, headers={"Idempotency-Key": "e/1"})
        assert answer.status_code == 409
    listed = http.get(f"{url}/_control/faults").json()
    assert [(f["fault"], f["operation_ref"], f["times"]) for f in listed] == [
        ("version_conflict", "*", None)
    ]
    assert http.delete(f"{url}/_control/faults").status_code == 200
    assert http.get(f"{url}/_control/faults").json() == []
    assert http.post(f"{url}/_control/reset", json={}).status_code == 200
    assert effects(http, url) == {}
    assert http.get(f"{url}/invoices", params={"operation_ref": "r/2"}).status_code == 404


@pytest.mark.parametrize(
    "spec",
    [
        {"fault": "explode"},
        {"fault": "rate_limit", "times": 0},
        {"fault": "rate_limit", "resource": "x"},
    ],
)
def test_bad_faults_are_refused(
    downstream: DownstreamService, http: httpx.Client, spec: dict[str, Any]
) -> None:
    answer = http.post(f"{downstream.url}/_control/faults", json=spec)
    assert answer.status_code == 400
    assert answer.json()["error"]["code"] == "BAD_FAULT"


def test_respond_fault_serves_exactly_what_was_asked(
    downstream: DownstreamService, http: httpx.Client
) -> None:
    fault(
        http, downstream.url, fault="respond", operation_ref="r/1", status=200,
        body='{"ok": false, "error": {"code": "LEGACY"}}', headers={"X-Legacy": "1"},
    )  # fmt: skip
    answer = post(http, downstream.url, "r/1")
    assert (answer.status_code, answer.headers["X-Legacy"]) == (200, "1")
    assert answer.json() == {"ok": False, "error": {"code": "LEGACY"}}
    assert effects(http, downstream.url) == {"r/1": 1}


def test_stop_ends_a_stall_promptly(machine: Machine) -> None:
    service = DownstreamService().start()
    outcome: list[BaseException] = []

    def call() -> None:
        with httpx.Client(timeout=5, trust_env=False) as client:
            try:
                post(client, service.url, "r/1")
            except httpx.HTTPError as error:
                outcome.append(error)

    with httpx.Client(timeout=5, trust_env=False) as client:
        fault(client, service.url, fault="stall_after_store", seconds=30)
    thread = threading.Thread(target=call)
    thread.start()
    wait_stored(service, "r/1")  # stored, and now stalling before its answer
    started = time.monotonic()
    service.stop()
    thread.join(timeout=5)
    # Stopping cuts the 30 s stall short.
    took = time.monotonic() - started
    assert took < machine.seconds(3), (took, machine.explain(3))
    assert [type(error) for error in outcome] == [httpx.RemoteProtocolError]


# --- the command line -----------------------------------------------------------------
