"""The hostile corpus served through real HTTP responses in every position an adapter
reads: nothing of it may reach agent_message, user_message, safe_details or the logs."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.adapters.adapter_servers import Conn, ScriptedServer
from tests.support.adapters.hostile_corpus import CORPUS, Sample
from tests.support.adapters.probe_adapters import ProbeWrite, settings
from toolsafe.adapters.envelope import ToolError, ToolSuccess
from toolsafe.adapters.guard import call_adapter

Reply = tuple[int, bytes, dict[str, str], str, str]
REPLIES: dict[str, Reply] = {}


def _serve(conn: Conn) -> None:
    request = conn.read_request()
    if request is None:
        return
    status, body, headers, content_type, reason = REPLIES[request.headers["idempotency-key"]]
    conn.respond(status, body, headers, content_type, reason)


@pytest.fixture(scope="module")
def adapter() -> Iterator[ProbeWrite]:
    with ScriptedServer(_serve, backlog=64) as server:
        probe = ProbeWrite(settings(server.url, read_timeout=5))
        yield probe
        probe.close()


def _json(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False).encode()


def positions(sample: Sample) -> dict[str, Reply]:
    text = sample.text
    raw = text.encode("utf-8", errors="surrogatepass")
    replies: dict[str, Reply] = {
        "error_message_422": (
            422,
            _json({"error": {"code": "BAD_NAME", "field": "name", "message": text}}),
            {},
            "application/json",
            "X",
        ),
        "raw_500": (500, raw, {}, "text/html", "X"),
        "raw_400": (400, raw, {}, "text/html", "X"),
        "code_and_field_409": (
            409,
            _json({"error": {"code": text, "field": text, "fields": [text]}}),
            {},
            "application/json",
            "X",
        ),
        "failure_in_200": (
            200,
            _json({"ok": False, "error": {"code": "BAD_NAME", "message": text}}),
            {},
            "application/json",
            "X",
        ),
        "success_note": (201, _json({"id": "t1", "note": text}), {}, "application/json", "X"),
    }
    header_safe = text[:500]
    if header_safe.isprintable() and header_safe.isascii():
        replies["retry_after_header"] = (
            429, b"", {"Retry-After": header_safe}, "text/plain", "X",
        )  # fmt: skip
        replies["reason_phrase"] = (201, _json({"id": "t2"}), {}, "application/json", header_safe)
    return replies


def leaks(sample: Sample, *texts: str) -> list[str]:
    return [needle for needle in sample.all_needles() for text in texts if needle in text]


@pytest.mark.parametrize("sample", CORPUS, ids=[s.name for s in CORPUS])
def test_nothing_hostile_leaves_the_boundary(
    sample: Sample, adapter: ProbeWrite, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    for position, reply in positions(sample).items():
        ref = f"corpus/{sample.name}/{position}"
        REPLIES[ref] = reply
        result = call_adapter(adapter, {"name": "n"}, ref)
        if isinstance(result, ToolSuccess):
            assert position in ("success_note", "reason_phrase")
            if sample.kind in ("secret", "injection"):
                assert not leaks(sample, json.dumps(result.result, ensure_ascii=False)), position
            continue
        assert isinstance(result, ToolError)
        shown = (
            result.agent_message,
            result.user_message,
            json.dumps(result.safe_details, ensure_ascii=False),
        )
        assert not leaks(sample, *shown), (position, result)
        assert result.code not in ("INVALID_RECIPIENT_ADDRESS", "VERSION_CONFLICT"), position
        if sample.kind == "injection" and position in ("error_message_422", "failure_in_200"):
            assert result.code == "UPSTREAM_ERROR", position
        if position == "code_and_field_409":
            assert result.code in ("UPSTREAM_ERROR", "CONFLICT")
            assert "field" not in result.safe_details
    assert not leaks(sample, caplog.text)
