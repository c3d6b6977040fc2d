"""A real ``toolsafe serve`` process on a free loopback port, its keys, and helpers to
call it over real HTTP."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import httpx

from toolsafe.gateway.cli import free_port
from toolsafe.harness import preload
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
    process: subprocess.Popen[bytes] | preload.Preloaded | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> GatewayServer:
        command = [sys.executable, "-m", "toolsafe", "serve", "--port", str(self.port)]
        command += self.extra_args
        env = {**os.environ, **self.env}
        if preload.eligible(command, env):
            directory = self.log.parent
            self.process = preload.Preloaded(command, env=env, cwd=directory, log_path=self.log)
        else:
            with self.log.open("ab") as out:
                self.process = subprocess.Popen(
                    command,
                    cwd=self.log.parent,
                    env=env,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                break
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    return self
            time.sleep(0.05)
        raise AssertionError(f"the gateway did not start:\n{self.text()[-3000:]}")

    def text(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def wait_exit(self, timeout: float = 15.0) -> int:
        assert self.process is not None
        return self.process.wait(timeout)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(10)


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
