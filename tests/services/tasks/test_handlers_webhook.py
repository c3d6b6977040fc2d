"""Escalation handlers over HTTP: the webhook posts the notice, and handlers from the
settings run in order and survive failures."""

from __future__ import annotations

import logging

import pytest

from tests.support.pipeline.harness import Webhook
from tests.unit.tasks.test_handlers import KEY, RECEIVED, _events, _step
from toolsafe.settings import Settings
from toolsafe.tasks.escalation import (
    EscalationNotice,
    WebhookHandler,
    load_handlers,
    notify,
)


def test_webhook_posts_the_notice() -> None:
    server = Webhook()
    handler = WebhookHandler(server.url, timeout=5)
    notice = EscalationNotice.from_step(_step(), _events(), KEY)
    try:
        handler(notice)
        handler(notice)  # a notice sent again (its handler failed once): the same client
    finally:
        handler.close()
        server.stop()
    assert [body["operation_ref"] for body in server.received] == ["run_1/step_1"] * 2
    # The dedup key travels in the body and as the Idempotency-Key.
    assert server.received[0]["dedup_key"] == KEY and server.keys == [KEY, KEY]


def test_handlers_from_settings_run_in_order_and_survive_failures(
    caplog: pytest.LogCaptureFixture,
) -> None:
    settings = Settings.from_env(
        {
            "TOOLSAFE_ESCALATION_WEBHOOK_URL": "http://127.0.0.1:1/hook",
            "TOOLSAFE_ESCALATION_WEBHOOK_TIMEOUT": "0.5",
            "TOOLSAFE_ESCALATION_HANDLERS": (
                "tests.unit.tasks.test_handlers:explode, tests.unit.tasks.test_handlers:remember"
            ),
        }
    )
    handlers = load_handlers(settings)
    assert [name for name, _ in handlers] == [
        "log",
        "webhook",
        "tests.unit.tasks.test_handlers:explode",
        "tests.unit.tasks.test_handlers:remember",
    ]
    RECEIVED.clear()
    with caplog.at_level(logging.WARNING, logger="toolsafe.escalation"):
        failed = notify(handlers, EscalationNotice.from_step(_step(), _events(), KEY))
    assert failed == ["webhook", "tests.unit.tasks.test_handlers:explode"]
    assert len(RECEIVED) == 1
    events = [getattr(record, "event", None) for record in caplog.records]
    assert events.count("escalation_handler_failed") == 2 and "step_escalated" in events
