"""Worker log lines an operator reads: Celery's runtimes, task ids and broker addresses
pass the log guard readable; credentials in them do not."""

from __future__ import annotations

import logging
import random

import pytest

from toolsafe.adapters.redaction import RedactingFilter, redact

READABLE = [
    "Task toolsafe.execute[5c1e7a3b-1234-4f0e-9d21-0123456789ab] succeeded in 0.0123456789s: None",
    "Task toolsafe.execute[12345678-1234-1234-1234-123456789012] succeeded in "
    "0.004056789012345671s: None",
    "Task toolsafe.verify[87654321-4321-4321-4321-210987654321] received",
    "consumer: Cannot connect to redis://127.0.0.1:6379/0: Error 111 connecting to "
    "127.0.0.1:6379. Connection refused.",
    "Connected to redis://:**@127.0.0.1:6379/0",
    "consumer: Cannot connect to amqp://guest:**@127.0.0.1:5672//: [Errno 111] Connection refused.",
    "celery@worker-1 ready.",
    "Scaling down 1 processes.",
]


def _logged(text: str) -> str:
    record = logging.LogRecord("celery.app.trace", logging.INFO, __file__, 1, "%s", (text,), None)
    RedactingFilter().filter(record)
    return record.getMessage()


@pytest.mark.parametrize("line", READABLE)
def test_celery_lines_stay_readable(line: str) -> None:
    assert _logged(line) == line


def test_no_runtime_celery_prints_is_a_card() -> None:
    rng = random.Random(23)
    lines = [f"Task t[abc] succeeded in {rng.random()!r}s: None" for _ in range(2_000)]
    lines += [f"Task t[abc] succeeded in {rng.uniform(1, 100)!r}s: None" for _ in range(500)]
    assert [line for line in lines if redact(line) != line] == []


def test_a_broker_url_loses_its_password_only() -> None:
    line = "Cannot connect to redis://worker:s3cretPw@cache.internal:6380/2: timeout"
    assert _logged(line) == (
        "Cannot connect to redis://[REDACTED:url_credentials]@cache.internal:6380/2: timeout"
    )


@pytest.mark.parametrize(
    "line",
    [
        "charged card 4111 1111 1111 1111 for 0.5s",
        "card=4242424242424242 declined",
        "card 5500-0000-0000-0004 12/28",
    ],
)
def test_a_card_number_standing_alone_is_still_hidden(line: str) -> None:
    assert "[REDACTED:card_number]" in _logged(line)
