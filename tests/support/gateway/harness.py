"""A real ``toolsafe serve`` process on a free loopback port, its keys, and helpers to
call it over real HTTP."""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import httpx

from toolsafe.harness import Process, free_port
from toolsafe.recovery.db import make_engine
from toolsafe.recovery.store.sql.keys import KeyStore
from toolsafe.tasks.runtime import utcnow

ROOT = Path(__file__).resolve().parents[3]


@dataclass
class GatewayServer:
    env: dict[str, str]
    log: Path
    port: int
    extra_args: tuple[str, ...] = ()
    process: Process | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> GatewayServer:
        command = [sys.executable, "-m", "toolsafe", "serve", "--port", str(self.port)]
        command += self.extra_args
        env = {**os.environ, **self.env}
        # The harness's child: a process group of its own, preloaded when it can be.
        self.process = Process(
            self.log.stem, command, env=env, log_path=self.log, cwd=self.log.parent
        )
        deadline = time.monotonic() + timeout
        # One client for the whole wait: each new httpx client builds a TLS context
        # (tens of milliseconds of CPU), which polling would pay every 50 ms.
        with httpx.Client(base_url=self.url, timeout=1) as http:
            while time.monotonic() < deadline:
                if not self.process.alive():
                    break
                with contextlib.suppress(httpx.HTTPError):
                    if http.get("/healthz").status_code == 200:
                        return self
                time.sleep(0.05)
        raise AssertionError(f"the gateway did not start:\n{self.text()[-3000:]}")

    def text(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")

    def alive(self) -> bool:
        return self.process is not None and self.process.alive()

    def wait_exit(self, timeout: float = 15.0) -> int:
        assert self.process is not None
        return self.process.popen.wait(timeout)

    def stop(self) -> None:
        if self.process is not None and self.process.alive():
            self.process.kill()


@contextlib.contextmanager
def gateway_for(
    env: Mapping[str, str], directory: Path, *extra_args: str, name: str = "gateway"
) -> Iterator[GatewayServer]:
    server = GatewayServer(dict(env), directory / f"{name}.log", free_port(), extra_args)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def make_key(database_url: str, name: str, scope: str, namespace: str | None = None) -> str:
    engine = make_engine(database_url)
    try:
        return KeyStore(engine).create(name, scope, namespace, now=utcnow()).token
    finally:
        engine.dispose()


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}
