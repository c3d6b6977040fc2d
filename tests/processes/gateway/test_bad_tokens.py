"""Issue 28's acceptance test: 1,000 bad tokens carrying existing key ids, from
concurrent clients, while a good agent makes calls; the agent's p50 latency under the
flood stays within 2x of its quiet p50 measured in the same test.

A real ``toolsafe serve`` on the embedded default (SQLite; no worker: the agent reads
``GET /v1/tools``), keys made in its store. The flood runs in a process of its own
(``tests/support/gateway/flood.py``), paced at 100 requests a second over 10 clients —
without the limit that is 5 s of scrypt a second, far more than the machine has — in ten
one-second phases with a second of quiet after each; the agent calls throughout, and each
of its calls counts as quiet or loaded by when it was made, so both are measured in turn
under the same background load of the machine. The 2x is the bound on an idle machine of
the reference's speed; on a slower or busier one it is 2x times the session's machine
factor (tests/support/machine.py): there even the cheap 429s of 100 requests a second
take the gateway's event loop a share of cores the rest of a parallel run is using.
Takes ~30 s."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Final

import httpx
import pytest

from tests.support.gateway.harness import ROOT, bearer, gateway_for, make_key
from tests.support.machine import Machine

pytestmark = [pytest.mark.slow]

BAD_TOKENS: Final = 1000
PHASES: Final = 10
CLIENTS: Final = 10
RATE: Final = 100.0  # bad tokens per second, in all
PAUSE: Final = 1.0  # quiet seconds after each phase (short phases: both see the same machine)
MARGIN: Final = 0.2  # seconds at a phase's edges counted as neither quiet nor loaded
MIN_SAMPLES: Final = 50
FLOOD_TIMEOUT: Final = 45.0  # the flood takes ~18 s when bad tokens cost nothing


def _bare_env() -> dict[str, str]:
    return {key: value for key, value in os.environ.items() if not key.startswith("TOOLSAFE_")}


def _bad(token: str) -> str:
    """The token's key id with a wrong secret."""
    return token[: len("tsk_") + 16] + "_" + "x" * 43


def test_a_flood_of_bad_tokens_does_not_slow_a_good_agent(tmp_path: Path, machine: Machine) -> None:
    with gateway_for(_bare_env(), tmp_path) as server:
        database = f"sqlite:///{tmp_path / 'toolsafe.db'}"  # migrated by serve at start
        good = make_key(database, "agent", "agent")
        other = make_key(database, "oncall", "operator")
        plan = {
            "tokens": [_bad(good), _bad(other)],
            "phases": PHASES,
            "per_phase": BAD_TOKENS // PHASES,
            "clients": CLIENTS,
            "rate": RATE,
            "pause": PAUSE,
        }
        samples: list[tuple[float, float]] = []  # (when sent, seconds to the answer)
        failures: list[str] = []
        done = threading.Event()

        def agent() -> None:
            with httpx.Client(base_url=server.url, headers=bearer(good), timeout=30) as http:
                while not done.is_set():
                    sent = time.monotonic()
                    answer = http.get("/v1/tools")
                    samples.append((sent, time.monotonic() - sent))
                    if answer.status_code != 200:
                        failures.append(f"{answer.status_code} {answer.text[:200]}")
                    time.sleep(0.01)

        with httpx.Client(base_url=server.url, headers=bearer(good), timeout=30) as http:
            assert http.get("/v1/tools").status_code == 200  # verified once, as at work
        flood = subprocess.Popen(
            [sys.executable, str(ROOT / "tests/support/gateway/flood.py"), server.url,
             json.dumps(plan)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=tmp_path,
        )  # fmt: skip
        caller = threading.Thread(target=agent)
        caller.start()
        try:
            time.sleep(PAUSE)  # quiet first
            go = time.monotonic()
            assert flood.stdin is not None
            flood.stdin.write("go\n")
            flood.stdin.flush()
            try:
                out, _ = flood.communicate(timeout=FLOOD_TIMEOUT)
            except subprocess.TimeoutExpired:
                flood.kill()
                out, _ = flood.communicate()
                before = statistics.median([took for sent, took in samples if sent < go])
                after = statistics.median([took for sent, took in samples if sent >= go])
                pytest.fail(
                    f"{BAD_TOKENS} bad tokens at {RATE:g}/s were not all answered within "
                    f"{FLOOD_TIMEOUT:g}s (phases done: {out.strip() or 'none'}); the agent's "
                    f"p50 {before * 1000:.2f} ms before the flood, {after * 1000:.2f} ms since"
                )
            time.sleep(0.2)
        finally:
            done.set()
            caller.join(30)
            if flood.poll() is None:
                flood.kill()
        phases = [json.loads(line) for line in out.splitlines() if line.strip()]
        assert server.alive(), server.text()[-2000:]

    assert len(phases) == PHASES, out
    quiet: list[float] = []
    loaded: list[float] = []
    for sent, took in samples:
        if any(p["start"] + MARGIN <= sent <= p["end"] - MARGIN for p in phases):
            loaded.append(took)
        elif all(not p["start"] - MARGIN <= sent <= p["end"] + MARGIN for p in phases):
            quiet.append(took)
    quiet_p50, loaded_p50 = statistics.median(quiet), statistics.median(loaded)
    # For the message: each phase against the quiet seconds around it (the pauses before
    # and after it), which tells the flood's effect from the machine's bursts of load.
    ratios = [_phase_ratio(samples, phases, index) for index in range(len(phases))]
    each = [
        (round(p["end"] - p["start"], 2), p["statuses"], _p50_ms(samples, p), ratio)
        for p, ratio in zip(phases, ratios, strict=True)
    ]
    figures = (
        f"quiet p50 {quiet_p50 * 1000:.2f} ms over {len(quiet)} calls, loaded p50 "
        f"{loaded_p50 * 1000:.2f} ms over {len(loaded)} calls "
        f"({loaded_p50 / quiet_p50:.2f}x); flood phases (seconds, answers, agent's p50 ms, "
        f"its p50 over the quiet p50 around it) {each}"
    )
    print(figures)
    assert not failures, f"the good agent was refused: {failures[:3]}; {figures}"
    assert len(quiet) >= MIN_SAMPLES and len(loaded) >= MIN_SAMPLES, figures
    bound = 2 * machine.factor
    assert loaded_p50 <= bound * quiet_p50, (
        f"{figures}; bound {bound:.2f}x = 2x times the machine factor {machine.factor:.2f} "
        f"(the known workload took {machine.wall:.2f} s for {machine.cpu:.2f} s of CPU at "
        "session start; tests/support/machine.py)"
    )
    statuses: dict[str, int] = {}
    for phase in phases:
        for status, count in phase["statuses"].items():
            statuses[status] = statuses.get(status, 0) + count
    # Every bad token answered: 401 while each key id's failures are counted (requests
    # with the same token share a verification under way, so on a loaded machine the
    # last counted ones may still be answering in the next phase), then 429 without
    # scrypt: once a phase is refused whole, the window holds for the rest of the run.
    assert sum(statuses.values()) == BAD_TOKENS, figures
    assert set(statuses) <= {"401", "429"}, figures
    refused = [set(phase["statuses"]) == {"429"} for phase in phases]
    assert True in refused, f"no phase was refused whole: {figures}"
    assert all(refused[refused.index(True) :]), figures


def _p50_ms(samples: list[tuple[float, float]], phase: dict[str, float]) -> float:
    inside = [took for sent, took in samples if phase["start"] <= sent <= phase["end"]]
    return round(statistics.median(inside) * 1000, 2) if inside else float("nan")


def _phase_ratio(
    samples: list[tuple[float, float]], phases: list[dict[str, float]], index: int
) -> float | None:
    """The agent's p50 inside phase ``index`` over its p50 in the quiet seconds just
    before and after it (between the neighbouring phases, ``MARGIN`` from every edge);
    ``None`` when either side has fewer than three calls."""
    phase = phases[index]
    since = phases[index - 1]["end"] if index > 0 else float("-inf")
    until = phases[index + 1]["start"] if index + 1 < len(phases) else float("inf")
    inside = [t for s, t in samples if phase["start"] + MARGIN <= s <= phase["end"] - MARGIN]
    around = [
        took
        for sent, took in samples
        if since + MARGIN <= sent <= phase["start"] - MARGIN
        or phase["end"] + MARGIN <= sent <= until - MARGIN
    ]
    if len(inside) < 3 or len(around) < 3:
        return None
    return round(statistics.median(inside) / statistics.median(around), 2)
