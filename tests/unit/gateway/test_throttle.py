"""Issue 28 (part 4): bad tokens are limited per key id and source address before any
verification, and verifications are bounded in all; no I/O: an injected clock, a key
store in memory."""

from __future__ import annotations

import asyncio
import threading
import time
from datetime import UTC, datetime

import pytest

from toolsafe.gateway.auth import Authenticator, source_of
from toolsafe.gateway.problems import ApiProblem
from toolsafe.gateway.throttle import WAITING_PER_VERIFIER, FailureWindow, Throttled, Verifiers
from toolsafe.recovery.store.keys import ApiKey, CreatedKey

KEY_ID = "0123456789abcdef"
GOOD = f"tsk_{KEY_ID}_{'g' * 43}"
BAD = f"tsk_{KEY_ID}_{'b' * 43}"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class MemoryKeys:
    """One key; ``verify`` counts its calls (each one a scrypt in the real store)."""

    def __init__(self) -> None:
        self.key = ApiKey(KEY_ID, "agent", "agent", "agent", datetime.now(UTC), None)
        self.verified = 0

    def create(self, name: str, scope: str, namespace: str | None, *, now: datetime) -> CreatedKey:
        raise NotImplementedError

    def list(self) -> list[ApiKey]:
        return [self.key]

    def revoke(self, name: str, *, now: datetime) -> ApiKey:
        raise NotImplementedError

    def verify(self, token: str) -> ApiKey | None:
        self.verified += 1
        return self.key if token == GOOD else None

    def active(self, key_id: str) -> bool:
        return key_id == KEY_ID


def _fail(window: FailureWindow, key_id: str = KEY_ID, source: str = "10.0.0.1") -> None:
    stamp = window.begin(key_id, source)
    window.end(key_id, source, stamp, ok=False)


def test_after_the_limit_a_pair_is_refused_until_its_oldest_failure_leaves_the_window() -> None:
    clock = Clock()
    window = FailureWindow(3, 60.0, clock=clock)
    for _ in range(3):
        _fail(window)
        clock.now += 10
    with pytest.raises(Throttled) as refused:
        window.begin(KEY_ID, "10.0.0.1")
    assert refused.value.code == "TOO_MANY_BAD_KEYS"
    assert refused.value.retry_after == 30  # the first failure (at 0) leaves at 60; now 30
    # Other sources and other key ids have their own counts.
    window.begin(KEY_ID, "10.0.0.2")
    window.begin("fedcba9876543210", "10.0.0.1")
    clock.now += 29.5
    with pytest.raises(Throttled) as refused:
        window.begin(KEY_ID, "10.0.0.1")
    assert refused.value.retry_after == 1  # never 0: rounded up
    clock.now += 0.5  # the first failure is 60 s old: one check is allowed again
    _fail(window)
    with pytest.raises(Throttled):
        window.begin(KEY_ID, "10.0.0.1")


def test_a_check_counts_from_its_start_a_success_forgets_and_one_never_run_uncounts() -> None:
    clock = Clock()
    window = FailureWindow(2, 60.0, clock=clock)
    first = window.begin(KEY_ID, "s")
    window.begin(KEY_ID, "s")  # both still running: a third may not start
    with pytest.raises(Throttled):
        window.begin(KEY_ID, "s")
    window.end(KEY_ID, "s", first, ok=None)  # it never verified (refused, store down)
    _fail(window, source="s")
    with pytest.raises(Throttled):
        window.begin(KEY_ID, "s")
    clock.now += 61
    stamp = window.begin(KEY_ID, "s")
    _fail(window, source="s")
    window.end(KEY_ID, "s", stamp, ok=True)  # the key verified: its failures are gone
    assert len(window) == 0
    _fail(window, source="s")
    window.begin(KEY_ID, "s")


def test_memory_stays_bounded_idle_pairs_going_first() -> None:
    clock = Clock()
    window = FailureWindow(2, 60.0, max_buckets=100, clock=clock)
    for index in range(1000):
        _fail(window, key_id=f"{index:016x}")
        assert len(window) <= 100
    clock.now += 61  # every pair's failures are out of the window
    _fail(window, key_id="feedfeedfeedfeed")
    assert len(window) == 1
    # A pair that fails again is the newest: a flood of others evicts older ones first.
    _fail(window, key_id="feedfeedfeedfeed")
    for index in range(50):
        _fail(window, key_id=f"{index:016x}")
    with pytest.raises(Throttled):
        window.begin("feedfeedfeedfeed", "10.0.0.1")


def test_verifiers_run_a_few_at_once_and_refuse_beyond_their_queue() -> None:
    verifiers = Verifiers(2)
    running = 0
    most = 0
    lock = threading.Lock()

    def verify() -> int:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
        time.sleep(0.01)
        with lock:
            running -= 1
        return 1

    async def flood() -> list[int | BaseException]:
        calls = [verifiers.run(verify) for _ in range(2 * (1 + WAITING_PER_VERIFIER) + 5)]
        return await asyncio.gather(*calls, return_exceptions=True)

    results = asyncio.run(flood())
    refused = [r for r in results if isinstance(r, Throttled)]
    assert most == 2
    assert results.count(1) == 2 * (1 + WAITING_PER_VERIFIER)
    assert len(refused) == 5 and {r.code for r in refused} == {"TOO_MANY_KEY_CHECKS"}
    assert refused[0].retry_after == 1 and verifiers.pending == 0


async def _status(auth: Authenticator, token: str, source: str) -> int:
    try:
        await auth.authenticate("Bearer", token, source)
    except ApiProblem as problem:
        return problem.status
    return 200


def test_bad_tokens_cost_no_verification_past_the_limit_and_good_ones_still_pass() -> None:
    keys = MemoryKeys()
    clock = Clock()
    auth = Authenticator(keys, failures=3, window=60.0, clock=clock)

    async def scenario() -> None:
        statuses = [await _status(auth, BAD, "10.0.0.9") for _ in range(10)]
        assert statuses == [401] * 3 + [429] * 7
        assert keys.verified == 3  # the 7 refused ran nothing
        try:
            await auth.authenticate("Bearer", BAD, "10.0.0.9")
        except ApiProblem as problem:
            assert problem.code == "TOO_MANY_BAD_KEYS"
            assert problem.headers["Retry-After"] == "60"
        # The good token of the same key id, from another address, verifies.
        assert await _status(auth, GOOD, "10.0.0.1") == 200
        assert keys.verified == 4
        # Cached: even from the attacked address it is answered with no verification.
        assert await _status(auth, GOOD, "10.0.0.9") == 200
        assert keys.verified == 4
        # Not a token's form: 401 with nothing looked up or counted.
        assert await _status(auth, "nonsense", "10.0.0.9") == 401
        assert keys.verified == 4
        clock.now += 60
        assert await _status(auth, BAD, "10.0.0.9") == 401  # the limit has lifted

    asyncio.run(scenario())


def test_one_burst_of_the_same_token_is_one_verification() -> None:
    keys = MemoryKeys()
    auth = Authenticator(keys, failures=3, window=60.0)

    async def burst() -> list[int]:
        return list(await asyncio.gather(*(_status(auth, GOOD, "s") for _ in range(20))))

    assert asyncio.run(burst()) == [200] * 20
    assert keys.verified == 1


def test_the_source_is_the_client_address() -> None:
    class Address:
        host = "192.0.2.7"

    assert source_of(Address()) == "192.0.2.7"
    assert source_of(("198.51.100.1", 443)) == "198.51.100.1"
    assert source_of(None) == ""
