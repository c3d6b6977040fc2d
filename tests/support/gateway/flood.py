"""A flood of bad tokens against a gateway, in a process of its own (so its clients'
CPU and GIL are not the measured agent's): ``python tests/support/gateway/flood.py URL
PLAN`` where PLAN is JSON: ``tokens`` (sent in turn), ``phases``, ``per_phase``,
``clients`` (threads, each with its own keep-alive connection), ``rate`` (requests per
second in all, paced) and ``pause`` (seconds of quiet after each phase).

It waits for a line on stdin (go), then prints one JSON line per phase: its start and end
on the system's monotonic clock (the same clock in every process) and the count of each
status answered (``"error"`` for a request that got no answer)."""

from __future__ import annotations

import json
import sys
import threading
import time
from collections import Counter

import httpx


def _client(url: str, tokens: list[str], count: int, interval: float, start: float) -> Counter[str]:
    seen: Counter[str] = Counter()
    with httpx.Client(base_url=url, timeout=30) as http:
        for index in range(count):
            delay = start + index * interval - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            token = tokens[index % len(tokens)]
            try:
                answer = http.get("/v1/tools", headers={"Authorization": f"Bearer {token}"})
                seen[str(answer.status_code)] += 1
                if answer.status_code == 429 and "retry-after" not in answer.headers:
                    seen["429 without Retry-After"] += 1
            except httpx.HTTPError:
                seen["error"] += 1
    return seen


def _phase(url: str, tokens: list[str], clients: int, count: int, interval: float) -> Counter[str]:
    """``clients`` threads sending ``count`` requests each, one every ``interval`` s."""
    totals: Counter[str] = Counter()
    lock = threading.Lock()
    start = time.monotonic()

    def run(offset: int) -> None:
        # Clients offset within the interval: the flood arrives evenly, not in bursts.
        begun = start + offset * interval / clients
        rotated = tokens[offset % len(tokens) :] + tokens[: offset % len(tokens)]
        seen = _client(url, rotated, count, interval, begun)
        with lock:
            totals.update(seen)

    threads = [threading.Thread(target=run, args=(n,)) for n in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return totals


def main() -> int:
    url, plan = sys.argv[1], json.loads(sys.argv[2])
    clients: int = plan["clients"]
    interval = clients / plan["rate"]  # each client's pace
    sys.stdin.readline()
    for _ in range(plan["phases"]):
        start = time.monotonic()
        totals = _phase(url, plan["tokens"], clients, plan["per_phase"] // clients, interval)
        print(json.dumps({"start": start, "end": time.monotonic(), "statuses": totals}))
        sys.stdout.flush()
        time.sleep(plan["pause"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
