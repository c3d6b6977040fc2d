"""``toolsafe demo``: the article's failure cases on your laptop, on real workers, with
nothing installed but the project (SQLite and Celery's file-system broker by default)."""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the real imports wait until the demo runs: the CLI stays quick
    from toolsafe.demo.env import DemoEnv

HELP = "run the article's scenarios on real workers and print what happened"


def add_parser(commands: Any) -> None:
    """Register the ``demo`` subcommand (heavy imports wait until it runs)."""
    demo = commands.add_parser("demo", help=HELP, description=HELP)
    demo.add_argument(
        "--broker", metavar="URL", help="a broker instead of the file-system one, e.g. redis://…"
    )
    demo.add_argument(
        "--database", metavar="URL", help="a database instead of SQLite, e.g. postgresql://…"
    )
    demo.add_argument(
        "--workers", type=int, default=2, help="worker processes for the scenarios (default 2)"
    )
    demo.add_argument(
        "--keep", action="store_true", help="keep the temporary folder (logs, SQLite file)"
    )
    demo.add_argument(
        "--report",
        metavar="FILE",
        help="also write what happened to each scenario's step as JSON (path, final state, "
        "downstream effects), read from the store and the downstream, not from the checks",
    )
    demo.set_defaults(handler=run)


class Progress:
    """Progress lines with the time since the start; safe from several threads."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self._lock = threading.Lock()

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def __call__(self, message: str) -> None:
        with self._lock:
            sys.stdout.write(f"[{self.elapsed():6.2f}s] {message}\n")
            sys.stdout.flush()


class Watcher(threading.Thread):
    """Prints every state change of the demo's steps as the workers make it."""

    def __init__(self, env: DemoEnv, say: Progress) -> None:
        super().__init__(name="demo-watcher", daemon=True)
        self.env = env
        self.say = say
        self.refs: dict[str, str] = {}
        self.seen: dict[str, int] = {}
        self.stopped = threading.Event()

    def follow(self, ref: str, name: str) -> None:
        self.refs[ref] = name

    def run(self) -> None:
        from sqlalchemy.exc import SQLAlchemyError

        store = self.env.client.runtime.store
        while not self.stopped.wait(0.1):
            for ref, name in list(self.refs.items()):
                try:
                    events = store.events(ref)
                except SQLAlchemyError:  # a busy database: try again on the next tick
                    continue
                for event in events[self.seen.get(ref, 0) :]:
                    if event.to_state and event.from_state != event.to_state:
                        code = (event.detail.get("envelope") or {}).get("code")
                        why = f" ({code})" if code else ""
                        source = event.from_state or "submitted"
                        self.say(f"{name}: {source} → {event.to_state}{why}")
                self.seen[ref] = len(events)


def run(args: argparse.Namespace) -> int:
    from toolsafe.demo.env import make_folder, open_env, remove_folder
    from toolsafe.harness import HarnessError

    if args.workers < 1:
        sys.stderr.write("toolsafe demo: --workers must be at least 1\n")
        return 2
    say = Progress()
    say("toolsafe demo: the article's failure cases, on real Celery workers")
    folder = make_folder()
    say(f"folder    {folder}")
    ok = False
    try:
        env = open_env(folder, args.broker, args.database, say)
        try:
            ok = _play_all(env, args.workers, say, args.report)
        except HarnessError as error:  # the demo's machinery, not a scenario, failed
            say(f"the demo could not run: {error}")
        finally:
            env.close()
    finally:
        if ok and not args.keep:
            remove_folder(folder)
        else:
            sys.stdout.write(f"logs and store kept in {folder}\n")
    return 0 if ok else 1


def _play_all(env: DemoEnv, workers: int, say: Progress, report: str | None = None) -> bool:
    from toolsafe.demo.report import Played, as_json, render
    from toolsafe.demo.scenarios import ARTICLE, CRASH, play
    from toolsafe.harness import stop_all

    prefix = f"demo-{uuid.uuid4().hex[:6]}"
    started = env.start_workers(workers, beat=True)
    say(
        f"started {len(started)} celery worker processes ("
        + ", ".join(f"{w.name} pid {w.pid}" for w in started)
        + f") and beat: the sweeper runs every {env.settings.sweep.interval:g}s"
    )
    watcher = Watcher(env, say)
    watcher.start()
    try:
        say(f"phase 1: {len(ARTICLE)} scenarios at once")
        with ThreadPoolExecutor(max_workers=len(ARTICLE)) as pool:
            futures = []
            for name, title, scenario in ARTICLE:
                ref = f"{prefix}/{name}"
                watcher.follow(ref, name)
                futures.append(pool.submit(play, env, name, title, scenario, ref, say))
            results = [future.result() for future in futures]
        # The crash scenario kills the worker that holds the write; it runs alone, on
        # one worker, so that the worker that verifies is visibly a new one.
        stop_all(env.live_workers()[1:])
        say("phase 2: crash recovery with one worker")
        name, title, scenario = CRASH
        ref = f"{prefix}/{name}"
        watcher.follow(ref, name)
        results.append(play(env, name, title, scenario, ref, say))
        time.sleep(0.3)  # let the watcher print the last changes
    finally:
        watcher.stopped.set()
        watcher.join(5)
    store = env.client.runtime.store
    effects = env.downstream.effects()
    played = []
    for result in results:
        try:
            step = store.get(result.operation_ref)
        except LookupError:
            step = None
        events = store.events(result.operation_ref) if step else []
        played.append(Played(result, step, events, effects.get(result.operation_ref, 0)))
    names = {worker.pid: worker.name for worker in env.workers}
    sys.stdout.write(render(played, names, say.elapsed()) + "\n")
    ok = all(item.result.ok for item in played)
    if report is not None:
        Path(report).write_text(json.dumps(as_json(played, ok), indent=2) + "\n", "utf-8")
    return ok
