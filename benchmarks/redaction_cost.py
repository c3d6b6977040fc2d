"""Cost of redaction per message: run ``python benchmarks/redaction_cost.py``.

Prints microseconds per call for the checks every text leaving the boundary goes
through, on message sizes toolsafe actually meets (docs/redaction.md quotes the result).
"""

from __future__ import annotations

import itertools
import logging
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from toolsafe.adapters import codes
from toolsafe.adapters.examples.invoice import InvoiceResult
from toolsafe.adapters.redaction import (
    RedactingFilter,
    clean_text,
    looks_like_instructions,
    redact,
    safe_text,
)
from toolsafe.adapters.results import clean_result

SHORT = "downstream rejected recipient_email for run_81/step_4 (HTTP 422), retry later"
LOG_LINE = "calling https://billing.internal/v1/x?api_key=AbCdEf1234567890 as bob@corp.example"
TRACE = (
    'Traceback (most recent call last):\n  File "/srv/app/billing.py", line 42, in charge\n'
    '    customer = Customer(name="Alice", email="alice@example.com", card="4242424242424242")\n'
    "ValueError: card declined\n"
) * 8
# What a worker logs for every step: Celery's line and toolsafe's, each with an id or a
# ref of its own, so that no cache of scrubbed fields answers for them.
CELERY_LINE = (
    "Task toolsafe.execute[{}] succeeded in 0.0034s: "
    "{{'state': 'succeeded', 'operation_ref': 'bench-abc/{}'}}"
)
BODY_64K = ("<html><body>" + "Lorem ipsum dolor sit amet, consectetur. " * 1600)[:65_536]


def per_call(function: Callable[[], object], budget: float = 0.4) -> float:
    """Median microseconds per call over five rounds sized to ``budget`` seconds."""
    calls = 1
    while True:
        started = time.perf_counter()
        for _ in range(calls):
            function()
        spent = time.perf_counter() - started
        if spent > budget / 5 or calls > 1_000_000:
            break
        calls *= 2
    rounds = []
    for _ in range(5):
        started = time.perf_counter()
        for _ in range(calls):
            function()
        rounds.append((time.perf_counter() - started) / calls * 1e6)
    return statistics.median(rounds)


INVOICE_RESULT = {
    "id": "inv_000123",
    "customer_id": "cus_1",
    "amount_cents": 4200,
    "currency": "EUR",
    "created_at": "2026-12-01T10:20:30.123456+00:00",
}


def main() -> None:
    log_filter = RedactingFilter()

    def filtered() -> None:
        record = logging.LogRecord("b", logging.INFO, __file__, 1, "%s", (LOG_LINE,), None)
        log_filter.filter(record)

    steps = itertools.count()

    def step_record() -> None:
        ref = f"bench-abc/{next(steps)}"
        record = logging.LogRecord(
            "toolsafe.pipeline", logging.INFO, __file__, 1, "%s %s %s",
            ("execute_claimed", ref, "tool=bench_write attempt=1"), None,
        )  # fmt: skip
        record.event, record.operation_ref, record.tool = "execute_claimed", ref, "bench_write"
        log_filter.filter(record)

    def celery_line() -> str:
        n = next(steps)
        return redact(CELERY_LINE.format(uuid.UUID(int=n), n))

    cases: list[tuple[str, Callable[[], object]]] = [
        ("clean_text, 80 chars", lambda: clean_text(SHORT)),
        ("redact, 80 chars", lambda: redact(SHORT)),
        ("looks_like_instructions, 80 chars", lambda: looks_like_instructions(SHORT)),
        ("safe_text, 80 chars", lambda: safe_text(SHORT)),
        ("log filter, one record with a secret", filtered),
        ("log filter, a step's record (a ref of its own)", step_record),
        ("redact, Celery's line for a step", celery_line),
        ("safe_text, 1.6 KB stack trace", lambda: safe_text(TRACE)),
        ("safe_text, 64 KiB HTML body", lambda: safe_text(BODY_64K)),
        (
            "clean_result, an invoice success (5 fields)",
            lambda: clean_result(INVOICE_RESULT, InvoiceResult),
        ),
        (
            "build_error (template + details check)",
            lambda: codes.build_error(
                codes.INVALID_RECIPIENT_ADDRESS, "run_81/step_4", {"field": "recipient_email"}
            ),
        ),
    ]
    print(f"python {sys.version.split()[0]}")
    print(f"{'case':45} {'µs/call':>10}")
    for name, function in cases:
        print(f"{name:45} {per_call(function):10.1f}")


if __name__ == "__main__":
    main()
