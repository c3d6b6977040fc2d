"""The HTTP toolkit's lookup shapes against the real example downstream: a JSON list
filtered by a query parameter (``[]`` is absent), an object by path, 404 as absent; and
the hooks for a 200 that reports failure and the bounded body reader."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, ClassVar

import httpx
import pytest
from pydantic import BaseModel

from tests.support.adapters.adapter_servers import Conn, ScriptedServer
from toolsafe.adapters import codes
from toolsafe.adapters.envelope import ToolError, ToolSuccess
from toolsafe.adapters.examples.downstream import DownstreamService
from toolsafe.adapters.guard import call_adapter, call_lookup
from toolsafe.adapters.http import HttpSettings, HttpWriteAdapter, LookupShape, read_bounded
from toolsafe.adapters.protocol import LookupFound, LookupNotFound, LookupUnavailable


class InvoiceIn(BaseModel):
    customer_id: str
    amount_cents: int
    currency: str = "EUR"


class ListLookupInvoice(HttpWriteAdapter[InvoiceIn]):
    """The adapter of the issue's plain invoice service: no override of lookup()."""

    tool: ClassVar[str] = "list_invoice"
    input_model: ClassVar[type[BaseModel]] = InvoiceIn
    path: ClassVar[str] = "/invoices"
    has_lookup: ClassVar[bool] = True
    lookup_path: ClassVar[str | None] = "/search/invoices"
    lookup_returns: ClassVar[LookupShape] = "list"
    record_key: ClassVar[str | None] = "record"
    result_fields: ClassVar[tuple[str, ...]] = ("id", "amount_cents")


class PathLookupInvoice(ListLookupInvoice):
    tool: ClassVar[str] = "path_invoice"
    lookup_path: ClassVar[str | None] = "/invoices/by-ref/{operation_ref}"
    lookup_param: ClassVar[str | None] = None
    lookup_returns: ClassVar[LookupShape] = "object"
    lookup_not_found_codes: ClassVar[frozenset[str] | None] = frozenset({"NOT_FOUND"})
    lookup_count_field: ClassVar[str | None] = "count"


GOOD = {"customer_id": "cus_1", "amount_cents": 700}


@pytest.fixture
def service() -> Iterator[DownstreamService]:
    with DownstreamService() as running:
        yield running


@pytest.mark.parametrize("adapter_class", [ListLookupInvoice, PathLookupInvoice])
def test_found_absent_and_down(
    service: DownstreamService, adapter_class: type[ListLookupInvoice]
) -> None:
    adapter = adapter_class(HttpSettings(base_url=service.url, read_timeout=1.0))
    try:
        assert isinstance(call_adapter(adapter, GOOD, "run_1/step_1"), ToolSuccess)
        found = call_lookup(adapter, "run_1/step_1")
        assert isinstance(found, LookupFound)
        assert found.evidence_ref == "inv_000001"
        assert isinstance(call_lookup(adapter, "run_1/never"), LookupNotFound)
        assert adapter.count_effects("run_1/step_1") == 1
        assert adapter.count_effects("run_1/never") == 0
        service.state.add_fault({"fault": "lookup_down", "times": None})
        down = call_lookup(adapter, "run_1/step_1")
        assert isinstance(down, LookupUnavailable) and down.code == "LOOKUP_HTTP_503"
        assert isinstance(call_lookup(adapter, "run_1/never"), LookupUnavailable)
        assert adapter.count_effects("run_1/step_1") is None
    finally:
        adapter.close()


def test_the_list_lookup_counts_duplicates_of_a_naive_downstream() -> None:
    with DownstreamService(naive=True) as naive:
        adapter = ListLookupInvoice(HttpSettings(base_url=naive.url))
        try:
            for _ in range(2):
                assert isinstance(call_adapter(adapter, GOOD, "run_2/step_1"), ToolSuccess)
            assert adapter.count_effects("run_2/step_1") == 2
        finally:
            adapter.close()


def _lists(body: str) -> Any:
    def behaviour(conn: Conn) -> None:
        if conn.read_request() is not None:
            conn.respond(200, body)

    return behaviour


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("[]", LookupNotFound),
        ('[{"id": "inv_1", "operation_ref": "r/1"}]', LookupFound),
        # The service ignored the filter: other people's records are not "absent".
        ('[{"id": "inv_9", "operation_ref": "someone/else"}]', LookupUnavailable),
        ('{"items": []}', LookupUnavailable),
        ("<html>oops</html>", LookupUnavailable),
        ('[{"operation_ref": "r/1"}]', LookupUnavailable),
        ("[1, 2]", LookupUnavailable),
    ],
)
def test_a_list_lookup_reads_only_what_it_can_trust(body: str, expected: type[object]) -> None:
    with ScriptedServer(_lists(body)) as server:
        adapter = ListLookupInvoice(HttpSettings(base_url=server.url, read_timeout=1.0))
        try:
            assert isinstance(call_lookup(adapter, "r/1"), expected)
        finally:
            adapter.close()
        assert server.requests[0].path == "/search/invoices?operation_ref=r%2F1"


class KeyedList(ListLookupInvoice):
    lookup_list_key: ClassVar[str | None] = "data"


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ('{"data": []}', LookupNotFound),
        ('{"data": [{"id": "x_1"}]}', LookupFound),
        ('{"ok": false, "data": []}', LookupUnavailable),
        ("[]", LookupUnavailable),
    ],
)
def test_a_list_under_a_key(body: str, expected: type[object]) -> None:
    with ScriptedServer(_lists(body)) as server:
        adapter = KeyedList(HttpSettings(base_url=server.url, read_timeout=1.0))
        try:
            assert isinstance(call_lookup(adapter, "r/1"), expected)
        finally:
            adapter.close()


class LegacyInvoice(ListLookupInvoice):
    """A downstream that answers 200 {"result": "DECLINED", "reason_code": ...}."""

    tool: ClassVar[str] = "legacy_invoice"
    upstream_codes: ClassVar[Mapping[str, str]] = {"NO_CREDIT": codes.VERSION_CONFLICT}

    def body_reports_failure(self, body: Mapping[str, Any]) -> bool:
        return body.get("result") == "DECLINED" or super().body_reports_failure(body)

    def upstream_error(self, body: Mapping[str, Any]) -> tuple[str | None, list[str]]:
        code = body.get("reason_code")
        return (code if isinstance(code, str) else None), []


@pytest.mark.parametrize(
    ("body", "code", "commit_state"),
    [
        ('{"result": "DECLINED", "reason_code": "NO_CREDIT"}', "VERSION_CONFLICT", "not_committed"),
        ('{"result": "DECLINED", "reason_code": "WHO_KNOWS"}', "UPSTREAM_ERROR", "unknown"),
        ('{"result": "DECLINED"}', "UPSTREAM_ERROR", "unknown"),
    ],
)
def test_the_failure_hooks_parse_a_200_that_reports_failure(
    body: str, code: str, commit_state: str
) -> None:
    with ScriptedServer(_lists(body)) as server:
        adapter = LegacyInvoice(HttpSettings(base_url=server.url, read_timeout=1.0))
        try:
            result = call_adapter(adapter, GOOD, "r/2")
        finally:
            adapter.close()
    assert isinstance(result, ToolError)
    assert (result.code, result.commit_state) == (code, commit_state)


def test_the_bounded_reader_stops_at_the_limit() -> None:
    big = "x" * 200_000

    def behaviour(conn: Conn) -> None:
        if conn.read_request() is not None:
            conn.respond(200, big)

    with ScriptedServer(behaviour) as server, httpx.Client() as client:
        response = client.send(client.build_request("GET", server.url), stream=True)
        body = read_bounded(response, 1000)
        assert body == b"x" * 1000
        assert response.is_closed


def test_rebased_copies_talk_to_another_url(service: DownstreamService) -> None:
    original = ListLookupInvoice(HttpSettings(base_url="http://127.0.0.1:9", read_timeout=3.0))
    moved = original.rebased(service.url, read_timeout=0.5)
    try:
        assert moved.settings.read_timeout == 0.5 and original.settings.read_timeout == 3.0
        assert isinstance(call_adapter(moved, GOOD, "run_3/step_1"), ToolSuccess)
    finally:
        moved.close()
        original.close()
