"""What the HTTP toolkit cannot know, against the real example service: a 202 or a
queued body to a write names no stored record (``unknown``, and the lookup settles it),
and a list lookup's 404 is a missing route's, never "absent", unless declared."""

from __future__ import annotations

from typing import ClassVar

import pytest

from tests.services.adapters.test_lookup_shapes import GOOD, ListLookupInvoice
from toolsafe.adapters.examples.downstream import DownstreamService
from toolsafe.adapters.examples.invoice import CreateInvoice
from toolsafe.adapters.guard import call_adapter, call_lookup
from toolsafe.adapters.http import HttpSettings
from toolsafe.adapters.protocol import LookupFound, LookupNotFound, LookupUnavailable

INVOICE = {"customer_id": "cus_9", "amount_cents": 700, "currency": "EUR"}


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (202, '{"status": "queued", "id": "job_1"}'),
        (200, '{"status": "pending", "record": {"id": "inv_x"}}'),
        (201, '{"status": "accepted", "record": {"id": "inv_y"}}'),
    ],
)
def test_an_accepted_write_is_unknown_and_the_lookup_settles_it(
    downstream: DownstreamService, status: int, body: str
) -> None:
    ref = f"run_23/accepted_{status}"
    downstream.state.add_fault(
        {"fault": "respond", "operation_ref": ref, "status": status, "body": body}
    )
    adapter = CreateInvoice(HttpSettings(base_url=downstream.url))
    try:
        envelope = call_adapter(adapter, INVOICE, ref)
        assert not envelope.ok
        assert (envelope.code, envelope.commit_state, envelope.next_action) == (
            "OUTCOME_UNKNOWN",
            "unknown",
            "verify_operation",
        )
        assert envelope.safe_details["reason"] == "accepted_not_stored"
        assert isinstance(call_lookup(adapter, ref), LookupFound)  # the service did store it
    finally:
        adapter.close()


class MisroutedList(ListLookupInvoice):
    tool: ClassVar[str] = "misrouted_list"
    lookup_path: ClassVar[str | None] = "/no/such/route"


class DeclaredList(MisroutedList):
    tool: ClassVar[str] = "declared_list"
    lookup_not_found_codes: ClassVar[frozenset[str] | None] = frozenset({"NOT_FOUND"})


def test_a_list_lookups_404_is_unavailable_unless_declared(
    downstream: DownstreamService,
) -> None:
    settings = HttpSettings(base_url=downstream.url)
    misrouted, declared = MisroutedList(settings), DeclaredList(settings)
    try:
        assert call_adapter(misrouted, GOOD, "run_23/listed").ok
        found = call_lookup(misrouted, "run_23/listed")
        assert isinstance(found, LookupUnavailable) and found.code == "LOOKUP_UNEXPECTED_404"
        assert isinstance(call_lookup(declared, "run_23/listed"), LookupNotFound)
    finally:
        misrouted.close()
        declared.close()
