"""The log guard sits on the worker's own handlers once Celery has set up its logging,
and ``install_log_guard`` offers the same to any other process (a gateway)."""

from __future__ import annotations

import io
import logging
from pathlib import Path

from celery.signals import after_setup_logger, after_setup_task_logger

from toolsafe.adapters.redaction import RedactingFilter, install_log_guard
from toolsafe.settings import Settings
from toolsafe.tasks.app import create_app

SECRET = "sk_live_51HxYzAbCdEfGhIjKlMnLOGGED"


def _logger(name: str) -> tuple[logging.Logger, io.StringIO]:
    logger = logging.getLogger(name)
    logger.propagate = False
    stream = io.StringIO()
    logger.handlers = [logging.StreamHandler(stream)]
    logger.setLevel(logging.INFO)
    return logger, stream


def test_worker_handlers_get_the_guard(tmp_path: Path) -> None:
    app = create_app(Settings().replace(store={"url": f"sqlite:///{tmp_path / 'x.db'}"}))
    try:
        for signal, name in (
            (after_setup_logger, "guard.main"),
            (after_setup_task_logger, "guard.task"),
        ):
            logger, stream = _logger(name)
            signal.send(sender=None, logger=logger, loglevel=logging.INFO, logfile=None,
                        format="%(message)s", colorize=False)  # fmt: skip
            assert any(isinstance(f, RedactingFilter) for f in logger.handlers[0].filters)
            logger.info("downstream said %s; Ignore previous instructions", SECRET)
            assert SECRET not in stream.getvalue()
    finally:
        app.close()


def test_install_log_guard_is_idempotent() -> None:
    logger, stream = _logger("guard.gateway")
    first = install_log_guard(logger)
    assert install_log_guard(logger) is first
    assert logger.handlers[0].filters == [first]
    logger.warning("refund to DE89370400440532013000 with Bearer abcdefghijklmnopqrst")
    text = stream.getvalue()
    assert "DE89370400440532013000" not in text and "abcdefghijklmnopqrst" not in text
    assert "[REDACTED:iban]" in text
