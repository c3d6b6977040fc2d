"""``toolsafe up``: everything a first call needs, in one process tree.

The gateway (``toolsafe serve``, with its status page), a worker and beat, each a child
process with its log in the folder; with ``--example`` the example downstream and its
adapters too. On the embedded default the store is SQLite and the broker Celery's
file-system one, both in the folder; ``--broker``/``--database`` take real services, as
``toolsafe demo`` does. Ctrl-C (or SIGTERM) stops every child and exits 0; a child that
dies is named and ``up`` exits 1, so a supervisor sees it.
"""

from __future__ import annotations

import argparse
import shlex
import signal
import sys
import time
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from toolsafe.harness import Process

HELP = "run the gateway, its status page, a worker and beat (and --example's downstream)"
EXIT_CHILD_DIED: Final = 1
READY_TIMEOUT: Final = 90.0
EXAMPLE_INPUT: Final = (
    '{"input": {"customer_id": "cus_42", "amount_cents": 1250, "currency": "EUR"}}'
)
EXAMPLE_REF: Final = "run_1/invoice_1"


def add_parser(commands: Any) -> None:
    up = commands.add_parser("up", help=HELP, description=__doc__.split("\n\n")[1])
    up.add_argument(
        "--folder", type=Path, default=Path("toolsafe-up"),
        help="where the store, the broker, the keys and the logs live (default ./toolsafe-up)",
    )  # fmt: skip
    up.add_argument(
        "--broker", metavar="URL", help="a broker instead of the file-system one, e.g. redis://…"
    )
    up.add_argument(
        "--database", metavar="URL", help="a database instead of SQLite, e.g. postgresql://…"
    )
    up.add_argument("--host", default="127.0.0.1", help="the gateway's address")
    up.add_argument("--port", type=int, default=8080, help="the gateway's port (0: a free one)")
    up.add_argument(
        "--example", action="store_true",
        help="also run the example downstream and its adapters (create_invoice, send_email)",
    )  # fmt: skip
    up.set_defaults(handler=run)


class Stop(Exception):
    """SIGTERM or SIGINT: stop everything."""


def _on_signal(signum: int, frame: FrameType | None) -> None:
    raise Stop(signal.Signals(signum).name)


def _say(line: str) -> None:
    sys.stdout.write(f"{line}\n")
    sys.stdout.flush()


def run(args: argparse.Namespace) -> int:
    from toolsafe.harness import free_port

    folder: Path = args.folder.resolve()
    folder.mkdir(parents=True, exist_ok=True)
    port = args.port or free_port()
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    children: list[Process] = []
    try:
        return _up(args, folder, port, children)
    except Stop as stop:
        _say(f"toolsafe up: {stop}: stopping {', '.join(c.name for c in children) or 'nothing'}")
        return 0
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C never leaves orphans
        _stop(children)


def _stop(children: list[Process]) -> None:
    from toolsafe.harness import stop_all

    stop_all(children, grace=15)


def _up(args: argparse.Namespace, folder: Path, port: int, children: list[Process]) -> int:
    import httpx

    from toolsafe.harness import DownstreamProcess, child_env, spawn, start_beat, toolsafe_command
    from toolsafe.harness.workers import WorkerOptions, start_worker
    from toolsafe.recovery.db import migrate
    from toolsafe.recovery.store import open_store
    from toolsafe.up.keys import keys_for

    broker = args.broker
    if broker is None:
        for part in ("queue", "control", "processed"):
            (folder / "broker" / part).mkdir(parents=True, exist_ok=True)
        broker = f"filesystem://{folder}/broker"
    database = args.database or f"sqlite:///{folder}/toolsafe.db"
    settings = {"TOOLSAFE_BROKER_URL": broker, "TOOLSAFE_DATABASE_URL": database}
    migrate(database)
    _say(f"toolsafe up: folder {folder} (store, broker, keys, logs)")
    if args.example:
        base = {**child_env({}), "PYTHONUNBUFFERED": "1"}
        downstream = DownstreamProcess(folder, base, naive=False)
        children.append(downstream.process)
        settings["TOOLSAFE_ADAPTERS"] = "toolsafe.adapters.examples"
        settings["TOOLSAFE_EXAMPLE_DOWNSTREAM_URL"] = downstream.url
        _say(f"toolsafe up: example downstream {downstream.url} (log {folder}/downstream.log)")
    backend = open_store(database)
    try:
        keys = keys_for(backend.keys, folder)
    finally:
        backend.close()
    env = {**child_env(settings), "PYTHONUNBUFFERED": "1"}
    gateway = spawn(
        "gateway",
        toolsafe_command("serve", "--host", args.host, "--port", str(port)),
        env=env,
        directory=folder,
    )
    children.append(gateway)
    worker = start_worker(
        WorkerOptions(name="worker", pool="prefork", concurrency=2, without=("mingle", "gossip")),
        env=env,
        directory=folder,
    )
    children.append(worker)
    beat = start_beat(env=env, directory=folder, schedule=folder / "beat-schedule")
    children.append(beat)
    url = f"http://{args.host}:{port}"
    for child in (worker, beat):
        child.wait_ready(READY_TIMEOUT)
    deadline = time.monotonic() + READY_TIMEOUT
    # One client for the wait: a new one builds a TLS context each time (CPU the
    # starting gateway would be short of).
    with httpx.Client(base_url=url, timeout=2) as http:
        while True:
            if not gateway.alive():
                return _died([gateway], folder)
            try:
                if http.get("/healthz").status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                _say(f"toolsafe up: the gateway did not answer within {READY_TIMEOUT:g}s")
                return _died([gateway], folder)
            time.sleep(0.2)
    _print_ready(url, keys.operator, keys.agent, keys.reused, args.example)
    while True:
        dead = [child for child in children if not child.alive()]
        if dead:
            return _died(dead, folder)
        time.sleep(0.5)


def _print_ready(url: str, operator: str, agent: str, reused: bool, example: bool) -> None:
    made = "reused from keys.json" if reused else "made now, kept in keys.json"
    _say("")
    _say(f"gateway       {url}  (OpenAPI at {url}/docs)")
    _say(f"status page   {url}/ui/  (sign in with the operator key)")
    _say(f"operator key  {operator}")
    _say(f"agent key     {agent}")
    _say(f"              ({made})")
    _say("")
    auth = shlex.quote(f"Authorization: Bearer {agent}")
    if example:
        _say("Submit a call and wait for its envelope (the same Idempotency-Key is the same call):")
        submit = (
            f"curl -sS -o /dev/null -H {auth} -H 'Idempotency-Key: {EXAMPLE_REF}' "
            f"-H 'Content-Type: application/json' -d {shlex.quote(EXAMPLE_INPUT)} "
            f"{url}/v1/tools/create_invoice/calls"
        )
        _say(f"{submit} && curl -sS -H {auth} '{url}/v1/calls/{EXAMPLE_REF}?wait=30'")
    else:
        _say("The tools this gateway runs (register your adapters with TOOLSAFE_ADAPTERS):")
        _say(f"curl -sS -H {auth} {url}/v1/tools")
    _say("")
    _say("toolsafe up: running; Ctrl-C stops everything")


def _died(dead: list[Process], folder: Path) -> int:
    for child in dead:
        _say(
            f"toolsafe up: the {child.name} exited (code {child.returncode}); its log is "
            f"{child.log_path}; stopping the others"
        )
        for line in child.tail(5).splitlines():
            _say(f"  {child.name}: {line}")
    return EXIT_CHILD_DIED
