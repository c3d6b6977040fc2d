"""Escalation handlers, the ETA bound of the publisher and the JSON log format."""

from __future__ import annotations

import json
import logging
import random
from datetime import UTC, datetime, timedelta

import pytest

from toolsafe.recovery.states import StepState
from toolsafe.recovery.store import EventRecord, StepRecord
from toolsafe.settings import Settings, SettingsError
from toolsafe.tasks.app import Publisher
from toolsafe.tasks.escalation import (
    EscalationNotice,
    import_handler,
    log_handler,
)
from toolsafe.tasks.logs import JsonFormatter

NOW = datetime(2026, 1, 1, tzinfo=UTC)
RECEIVED: list[EscalationNotice] = []


def remember(notice: EscalationNotice) -> None:
    """A user handler, imported by path in a test."""
    RECEIVED.append(notice)


def explode(notice: EscalationNotice) -> None:
    raise RuntimeError("handler bug")


def _step() -> StepRecord:
    return StepRecord(
        id=1, operation_ref="run_1/step_1", tool="create_invoice", input={"a": 1},
        input_hash="sha256:x", state=StepState.ESCALATED, commit_state="unknown", attempts=1,
        max_attempts=5, verification_attempts=3, lookups_unavailable=3, due_at=None,
        lease_owner=None, lease_expires_at=None, last_sent_at=NOW,
        last_envelope={"ok": False, "code": "OUTCOME_UNKNOWN", "raw": "Bearer abc"},
        fingerprint=None, fingerprint_repeats=0, flagged_fields=(), approval_input_hash=None,
        reason="LOOKUP_UNAVAILABLE", published_at=None, version=4, created_at=NOW,
        updated_at=NOW,
    )  # fmt: skip


def _events() -> list[EventRecord]:
    return [
        EventRecord(
            id=1, operation_ref="run_1/step_1", at=NOW, kind="looked_up",
            from_state=StepState.VERIFYING, to_state=StepState.ESCALATED, label="lookup down",
            detail={"code": "LOOKUP_UNSPECIFIED", "raw_response": "<html>secret</html>"},
        )
    ]  # fmt: skip


KEY = "escalation:run_1/step_1:v7"


def test_notice_is_redacted_and_json_ready() -> None:
    notice = EscalationNotice.from_step(_step(), _events(), KEY)
    data = json.loads(json.dumps(notice.as_dict()))
    assert data["reason"] == "LOOKUP_UNAVAILABLE"
    assert data["envelope"] == {"ok": False, "code": "OUTCOME_UNKNOWN"}
    assert data["history"][0]["detail"] == {"code": "LOOKUP_UNSPECIFIED"}
    assert "secret" not in json.dumps(data) and "Bearer" not in json.dumps(data)
    assert "input" not in data


def test_bad_handler_paths_are_settings_errors() -> None:
    with pytest.raises(SettingsError, match="cannot import"):
        import_handler("no_such_module_xyz:handler")
    with pytest.raises(SettingsError, match="not a callable"):
        import_handler("tests.unit.tasks.test_handlers:NOW")
    assert import_handler("toolsafe.tasks.escalation:log_handler") is log_handler


@pytest.mark.parametrize(
    ("due_in", "publish", "has_eta"),
    [(None, True, False), (-5.0, True, False), (0.0, True, False), (3.0, True, True),
     (10.0, True, True), (10.5, False, False), (3600.0, False, False)],
)  # fmt: skip
def test_eta_only_below_the_bound(due_in: float | None, publish: bool, has_eta: bool) -> None:
    settings = Settings().replace(broker={"max_eta": 10, "eta_jitter": 0.5})
    publisher = Publisher(app=None, settings=settings)
    publisher._rng = random.Random(7)
    due_at = None if due_in is None else NOW + timedelta(seconds=due_in)
    sent, eta = publisher.eta_for(due_at, NOW)
    assert (sent, eta is not None) == (publish, has_eta)
    if eta is not None and due_at is not None:
        # Never earlier than due, never beyond the bound the broker can hold safely.
        assert due_at <= eta <= NOW + timedelta(seconds=settings.broker.max_eta)


def test_json_log_lines_carry_the_event() -> None:
    record = logging.LogRecord("toolsafe.pipeline", logging.INFO, __file__, 1, "x %s", ("y",), None)
    record.event = "execute_claimed"
    record.operation_ref = "run_1/step_1"
    line = json.loads(JsonFormatter().format(record))
    assert line["event"] == "execute_claimed"
    assert line["operation_ref"] == "run_1/step_1"
    assert line["message"] == "x y"
    try:
        raise ValueError("customer data 4111 1111 1111 1111")
    except ValueError:
        import sys

        failing = logging.LogRecord("t", logging.ERROR, __file__, 1, "boom", (), sys.exc_info())
    formatted = JsonFormatter().format(failing)
    assert json.loads(formatted)["exception"] == "ValueError" and "4111" not in formatted
