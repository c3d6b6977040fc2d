"""The hostile corpus served through real HTTP responses in every position an adapter
reads: nothing of it may reach agent_message, user_message, safe_details or the logs."""

from __future__ import annotations

import json
import logging
import unicodedata
from collections.abc import Iterator
from typing import Any, Final

import pytest

from tests.support.adapters.adapter_servers import Conn, ScriptedServer
from tests.support.adapters.hostile_corpus import CORPUS, Sample
from tests.support.adapters.probe_adapters import ProbeWrite, settings
from toolsafe.adapters.envelope import ToolError, ToolSuccess
from toolsafe.adapters.guard import call_adapter
from toolsafe.adapters.results import MARK_INSTRUCTIONS, MAX_RESULT_TEXT
from toolsafe.adapters.untrusted import Neutralised, normalise

HIDDEN: Final = frozenset({"Cc", "Cf", "Co", "Cs", "Cn"})

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


def leaks(sample: Sample, *texts: str, needles: tuple[str, ...] | None = None) -> list[str]:
    wanted = sample.all_needles() if needles is None else needles
    return [needle for needle in wanted for text in texts if needle in text]


# A success result may show upstream text (a note), once cleaned: markup, look-alike
# letters and harmless words are text to a model. Secrets, instructions and hidden
# characters never are. A trace whose customer data has no shape a scanner can know
# (a name, a path) is shown cleaned too; the error path drops it whole.
SHOWN_CLEANED: Final = frozenset({"html", "lookalike", "control"})
NO_SECRET_SHAPE: Final = frozenset({"go_panic"})
# Of those kinds, samples that hold a secret or instructions all the same: a session
# cookie in a smuggled header, instructions in mathematical bold (NFKC folds them).
MARKED_ANYWAY: Final = frozenset({"crlf_header", "math_bold"})
MARKERS: Final = ("[REDACTED:", MARK_INSTRUCTIONS)


def check_success(sample: Sample, position: str, result: ToolSuccess[Any]) -> None:
    """What a success built from ``sample`` may show, for every kind of sample."""
    shown = json.dumps(result.result, ensure_ascii=False)
    assert not any(unicodedata.category(char) in HIDDEN for char in shown), position
    if position == "reason_phrase":
        # The reason phrase is transport: nothing of it is ever part of a result.
        assert result.result == {"id": "t2"} and not leaks(sample, shown), position
        return
    assert isinstance(result.result, dict), position
    note = result.result["note"]
    assert isinstance(note, str) and len(note) <= MAX_RESULT_TEXT, position
    # Cleaned as every result string is: escapes and invisible letters out, NFKC, and
    # markup that fetches or hides something neutralised (no host is declared here).
    cleaned = Neutralised(normalise(sample.text, MAX_RESULT_TEXT), frozenset()).text
    shown_cleaned = sample.kind in SHOWN_CLEANED or sample.name in NO_SECRET_SHAPE
    if shown_cleaned and sample.name not in MARKED_ANYWAY:
        # Shown, but only as the cleaned text: folded, hidden characters gone, capped.
        assert note == cleaned, (position, note)
        assert "evil.example" not in note and "phish.example" not in note, (position, note)
        if sample.kind == "control":
            assert not leaks(sample, shown, needles=hidden_needles(sample)), position
        return
    # Secrets, instructions, traces with customer data, oversized bodies: a marker only.
    assert note.startswith(MARKERS), (position, note)
    assert not leaks(sample, shown), (position, note)


def hidden_needles(sample: Sample) -> tuple[str, ...]:
    """A control sample's parts that must go: the characters, and a smuggled header."""
    found = tuple(n for n in sample.all_needles() if not n.isprintable() or "stolen" in n)
    assert found, sample.name
    return found


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
            check_success(sample, position, result)
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
