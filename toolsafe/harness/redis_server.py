"""A Redis server of the chaos run's (or a test's) own, on a free port, that can be
restarted for real: SIGKILL and start again on the same port, with nothing persisted."""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import IO

from toolsafe.harness.errors import HarnessError
from toolsafe.harness.ports import free_port


class RedisServer:
    """``redis-server`` as a child process with no RDB and no AOF: a restart loses its
    queues, the unacked hash and held ETA messages, as a real crash without persistence
    does."""

    def __init__(self, workdir: Path, port: int | None = None, binary: str | None = None) -> None:
        found = binary or shutil.which("redis-server")
        if found is None:
            raise HarnessError("redis-server is not on PATH (needed for --redis-restarts)")
        self.binary = found
        self.workdir = workdir
        self.port = port or free_port()
        self.popen: subprocess.Popen[bytes] | None = None
        self.restarts = 0
        self._log: IO[bytes] | None = None

    def url(self, db: int = 1) -> str:
        return f"redis://127.0.0.1:{self.port}/{db}"

    def start(self, timeout: float = 20.0) -> None:
        if self._log is None:
            self._log = open(self.workdir / "redis.log", "ab")  # noqa: SIM115 - closed in stop()
        argv = [
            self.binary,
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--save", "",
            "--appendonly", "no",
            "--dir", str(self.workdir),
        ]  # fmt: skip
        self.popen = subprocess.Popen(
            argv,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        self._wait_ready(timeout)

    def _wait_ready(self, timeout: float) -> None:
        import redis

        deadline = time.monotonic() + timeout
        probe = redis.Redis(host="127.0.0.1", port=self.port, socket_connect_timeout=1)
        try:
            while True:
                if self.popen is not None and self.popen.poll() is not None:
                    raise HarnessError(
                        f"redis-server on port {self.port} exited with {self.popen.returncode} "
                        f"(see {self.workdir / 'redis.log'})"
                    )
                try:
                    if probe.ping():
                        return
                except redis.RedisError:
                    pass
                if time.monotonic() > deadline:
                    raise HarnessError(f"redis-server on port {self.port} did not answer")
                time.sleep(0.05)
        finally:
            probe.close()

    def kill(self) -> None:
        """SIGKILL, and wait until it is gone (its port is free again)."""
        if self.popen is not None and self.popen.poll() is None:
            self.popen.send_signal(signal.SIGKILL)
            self.popen.wait(timeout=10)

    def restart(self, down: float = 0.5) -> float:
        """Kill -9, stay down ``down`` seconds, start again on the same port; returns the
        seconds it was away."""
        started = time.monotonic()
        self.kill()
        time.sleep(down)  # the broker is really gone for a while, not a blip
        # The port may linger for a moment after the kill; try again until it binds.
        deadline = time.monotonic() + 20
        while True:
            try:
                self.start()
                break
            except HarnessError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        self.restarts += 1
        return time.monotonic() - started

    def stop(self) -> None:
        if self.popen is not None and self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(timeout=10)
        if self._log is not None:
            self._log.close()
            self._log = None
