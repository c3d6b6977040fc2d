"""The guard of send_email against the example downstream: a malformed recipient is refused
and nothing is sent."""

from __future__ import annotations

from tests.support.adapters.adapter_servers import Conn, ScriptedServer
from tests.unit.adapters.test_guard import REF, error
from toolsafe.adapters.envelope import (
    flagged_fields,
)
from toolsafe.adapters.examples.email import SendEmail
from toolsafe.adapters.guard import call_adapter
from toolsafe.adapters.http import HttpSettings


def test_send_email_rejects_a_malformed_recipient_without_sending() -> None:
    def answer(conn: Conn) -> None:
        if conn.read_request():
            conn.respond(201, '{"record": {"id": "ema_1"}}')

    with ScriptedServer(answer) as server:
        adapter = SendEmail(HttpSettings(base_url=server.url, read_timeout=1))
        raw = {"recipient_email": "bob@@example..com", "subject": "hi"}
        envelope = error(call_adapter(adapter, raw, REF))
    assert envelope.code == "INVALID_RECIPIENT_ADDRESS"
    assert flagged_fields(envelope) == ("recipient_email",)
    assert server.requests == []
