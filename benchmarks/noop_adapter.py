"""``bench_write``: a write adapter that calls nothing and succeeds, for the benchmarks;
``bench_retry``: one that is rate limited once, then succeeds.

``TOOLSAFE_ADAPTERS=benchmarks.noop_adapter`` loads both. ``bench_write``'s "call" only
sleeps ``call_ms``, the same stand-in for a downstream that the hand-rolled baseline task
uses. ``bench_retry``'s first attempt answers ``RATE_LIMITED`` with a ``not_before``
``delay_s`` ahead (the step waits to retry until then); its second attempt succeeds.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import ClassVar, Final

from pydantic import BaseModel, ConfigDict, Field

from toolsafe.adapters.codes import RATE_LIMITED, build_error
from toolsafe.adapters.envelope import AnySuccess, ToolError, ToolSuccess, Verification
from toolsafe.adapters.protocol import Adapter, CallContext, LookupNotFound, LookupResult
from toolsafe.adapters.registry import Registry

TOOL: Final = "bench_write"
RETRY_TOOL: Final = "bench_retry"


class BenchInput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    n: int = Field(ge=0)
    # Long calls let the recovery benchmark kill a worker while the call runs.
    call_ms: float = Field(default=1.0, ge=0, le=60_000)


class BenchWrite(Adapter[BenchInput]):
    """Succeeds after ``call_ms``; writes nothing anywhere, so a lookup finds nothing."""

    tool: ClassVar[str] = TOOL
    description: ClassVar[str] = "A benchmark write that succeeds after call_ms and does nothing."
    writes: ClassVar[bool] = True
    input_model: ClassVar[type[BaseModel]] = BenchInput
    has_lookup: ClassVar[bool] = True

    def execute(
        self, data: BenchInput, operation_ref: str, context: CallContext
    ) -> AnySuccess | ToolError:
        if data.call_ms:
            time.sleep(data.call_ms / 1000)
        now = datetime.now(UTC)
        return ToolSuccess(
            operation_ref=operation_ref,
            result={"n": data.n},
            verification=Verification(checked_at=now, evidence_ref=f"bench:{data.n}"),
        )

    def lookup(self, operation_ref: str) -> LookupResult:
        # Nothing is ever written, so nothing can be found: a lost call is run again
        # (under the same operation_ref) once verification has said so.
        return LookupNotFound(checked_at=datetime.now(UTC))


class RetryInput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    n: int = Field(ge=0)
    delay_s: float = Field(gt=0, le=3600)


class BenchRetry(Adapter[RetryInput]):
    """Rate limited on the first attempt (retry ``delay_s`` later), succeeds on the next."""

    tool: ClassVar[str] = RETRY_TOOL
    description: ClassVar[str] = "A benchmark write rate limited once, then successful."
    writes: ClassVar[bool] = True
    input_model: ClassVar[type[BaseModel]] = RetryInput
    has_lookup: ClassVar[bool] = True

    def execute(
        self, data: RetryInput, operation_ref: str, context: CallContext
    ) -> AnySuccess | ToolError:
        now = datetime.now(UTC)
        if context.attempt == 1:
            return build_error(
                RATE_LIMITED,
                operation_ref,
                {"retry_after_seconds": data.delay_s, "tool": RETRY_TOOL},
                not_before=now + timedelta(seconds=data.delay_s),
            )
        return ToolSuccess(
            operation_ref=operation_ref,
            result={"n": data.n},
            verification=Verification(checked_at=now, evidence_ref=f"bench-retry:{data.n}"),
        )

    def lookup(self, operation_ref: str) -> LookupResult:
        return LookupNotFound(checked_at=datetime.now(UTC))


def register(registry: Registry) -> None:
    registry.register(BenchWrite())
    registry.register(BenchRetry())
