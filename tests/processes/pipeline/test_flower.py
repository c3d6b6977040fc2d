"""Flower tells the story (docs/operations.md, "Reading Flower"): a real ``celery flower``
watching real workers (beat embedded, sweeping every half second). Through Flower's HTTP
API, each toolsafe task names its tool and operation_ref and its result says what became
of the step; sweeps never reach the task list. Chromium (the system's, through
Playwright) takes the screenshot the docs show."""

from __future__ import annotations

import ast
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import sync_playwright

from tests.conftest import missing
from tests.support.pipeline.harness import ROOT, WORKER_STARTUP, Cluster, cluster_for, new_ref
from toolsafe.celeryconfig import EXECUTE_TASK, SWEEP_TASK
from toolsafe.harness import Process, celery_command, free_port, spawn, wait_until
from toolsafe.recovery.states import StepState

pytestmark = [pytest.mark.postgres, pytest.mark.redis]

INVOICE = {"customer_id": "cus_1", "amount_cents": 4200, "currency": "EUR"}
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SCREENSHOTS = ROOT / "test-output" / "flower"
SWEEP_SENT = "Sending due task toolsafe-sweep"
# The columns docs/operations.md and docker-compose.yml give Flower's task list (Flower's
# default hides args, kwargs and result: the tool, the ref and what became of the step).
COLUMNS = "--tasks_columns=name,state,args,kwargs,result,received,runtime,worker"


@dataclass
class Watched:
    cluster: Cluster
    flower: Process
    url: str

    def tasks(self, **params: str) -> dict[str, dict[str, Any]]:
        answer = httpx.get(f"{self.url}/api/tasks", params=params, timeout=10)
        answer.raise_for_status()
        tasks: dict[str, dict[str, Any]] = answer.json()
        return tasks

    def sweeps_sent(self) -> int:
        return sum(worker.text().count(SWEEP_SENT) for worker in self.cluster.workers)


@pytest.fixture(scope="module")
def watched(pg_url: str, redis_url: str, pipeline_dir: Path) -> Iterator[Watched]:
    # SQLite: the same events as on PostgreSQL, without a database to create and drop.
    with cluster_for(pg_url, redis_url, pipeline_dir, suffix="flower", sqlite=True) as cluster:
        port = free_port()
        env = {**os.environ, **cluster.env, "FLOWER_UNAUTHENTICATED_API": "true"}
        argv = celery_command(
            "toolsafe", "flower", f"--port={port}", "--address=127.0.0.1", COLUMNS
        )
        flower = spawn("flower", argv, env=env, directory=pipeline_dir, cwd=ROOT)
        url = f"http://127.0.0.1:{port}"
        try:
            # Both start at once; nothing is submitted before Flower listens.
            worker = cluster.start_worker("flower", concurrency=2, beat=True, wait=False)

            def answers() -> bool:
                try:
                    return httpx.get(f"{url}/healthcheck", timeout=2).status_code == 200
                except httpx.TransportError:
                    return False

            wait_until(answers, 30, "Flower to answer", context=flower.text)
            worker.wait_ready(WORKER_STARTUP)
            yield Watched(cluster, flower, url)
        finally:
            flower.kill()


def test_the_docs_and_compose_give_flower_those_columns() -> None:
    assert COLUMNS in (ROOT / "docs" / "operations.md").read_text(encoding="utf-8")
    assert COLUMNS in (ROOT / "docker-compose.yml").read_text(encoding="utf-8")


def _results(tasks: dict[str, dict[str, Any]]) -> list[dict[str, str]]:
    """The results Flower shows, read back from their repr."""
    shown = []
    for task in tasks.values():
        if task.get("name") == EXECUTE_TASK and task.get("result"):
            shown.append(ast.literal_eval(task["result"]))
    return shown


def test_tasks_name_their_tool_and_ref_and_say_what_became_of_the_step(
    watched: Watched,
) -> None:
    cluster = watched.cluster
    done, limited = new_ref("flower/done"), new_ref("flower/limited")
    cluster.fault(fault="rate_limit", operation_ref=limited, retry_after=1)
    cluster.client.submit("create_invoice", INVOICE, operation_ref=done)
    cluster.client.submit("create_invoice", INVOICE, operation_ref=limited)
    for ref in (done, limited):
        assert cluster.client.wait(ref, timeout=30).state is StepState.SUCCEEDED, cluster.logs()

    def finished(ref: str, *states: str) -> bool:
        found = {result.get("state") for result in _results(watched.tasks(search=ref))}
        return set(states) <= found

    wait_until(lambda: finished(done, "succeeded"), 20, "Flower to see the success")
    wait_until(
        lambda: finished(limited, "waiting_retry", "succeeded"), 20, "Flower to see the retry"
    )
    # Searchable by the ref, and each task shows the tool beside it.
    for task in watched.tasks(search=limited).values():
        assert limited in task["args"] and "'tool': 'create_invoice'" in task["kwargs"], task
    waiting = next(
        r for r in _results(watched.tasks(search=limited)) if r.get("state") == "waiting_retry"
    )
    assert waiting["tool"] == "create_invoice" and waiting["operation_ref"] == limited
    assert waiting["not_before"], waiting  # when the retry is due, not the action word "run"
    # Searchable by the tool: both steps' tasks are found.
    by_tool = " ".join(task["args"] for task in watched.tasks(search="create_invoice").values())
    assert done in by_tool and limited in by_tool


def test_sweeps_do_not_reach_the_task_list(watched: Watched) -> None:
    # Beat sends a sweep every half second; Flower must see none of them.
    before = watched.sweeps_sent()
    wait_until(lambda: watched.sweeps_sent() >= before + 4, 20, "four more sweeps")
    ref = new_ref("flower/later")
    watched.cluster.client.submit("create_invoice", INVOICE, operation_ref=ref)
    # Flower has heard of a task published after those sweeps: it is listening.
    wait_until(lambda: bool(watched.tasks(search=ref)), 20, "Flower to list a later task")
    names = {task["name"] for task in watched.tasks().values()}
    assert EXECUTE_TASK in names and SWEEP_TASK not in names, names
    assert watched.tasks(search="sweep") == {}


def test_screenshot_of_the_task_list(watched: Watched) -> None:
    """The picture in docs/operations.md (copied to docs/images/flower-tasks.png)."""
    if not CHROMIUM.exists():
        # The one rule for every browser test (tests/conftest.py): fail in CI, else skip.
        missing("Chromium", f"{CHROMIUM} is missing (apt-get install chromium)")
    wait_until(lambda: len(watched.tasks()) >= 3, 20, "tasks to show")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    target = SCREENSHOTS / "flower-tasks.png"
    with sync_playwright() as driver:
        browser = driver.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1600, "height": 560})
            page.goto(f"{watched.url}/tasks", wait_until="networkidle")
            page.wait_for_selector("table tbody tr td:has-text('toolsafe.execute')", timeout=15_000)
            body = page.inner_text("table tbody")
            assert "create_invoice" in body and "flower/" in body, body
            assert "'state': 'waiting_retry'" in body and "not_before" in body, body
            assert "toolsafe.sweep" not in body
            page.screenshot(path=str(target))
        finally:
            browser.close()
    assert target.stat().st_size > 10_000
