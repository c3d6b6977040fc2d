"""A PostgreSQL cluster of a test's own: initdb and pg_ctl on a free loopback port in a
temporary folder, so that a test that restarts its database server disturbs no one else
on the machine (the shared server on 5432 is never restarted by a test).

As root, the server runs as the ``postgres`` system user (PostgreSQL refuses root).
"""

from __future__ import annotations

import contextlib
import glob
import os
import shlex
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path


def _bindir() -> Path:
    found = shutil.which("pg_ctl")
    if found:
        return Path(found).parent
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    if not candidates:
        raise RuntimeError("no PostgreSQL server binaries (pg_ctl, initdb) on this machine")
    return Path(candidates[-1]).parent


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@dataclass(frozen=True)
class PrivateCluster:
    """A running cluster: its admin URL and the shell commands that restart and stop it."""

    port: int
    data: Path
    as_user: tuple[str, ...]
    bindir: Path

    @property
    def admin_url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def url(self, database: str) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def _pg_ctl(self, action: str) -> list[str]:
        options = f"-p {self.port} -k {self.data.parent} -c listen_addresses=127.0.0.1"
        return [
            *self.as_user,
            str(self.bindir / "pg_ctl"),
            "-D", str(self.data),
            "-l", str(self.data.parent / "server.log"),
            "-o", options,
            "-w", "-t", "60",
            action,
        ]  # fmt: skip

    @property
    def restart_command(self) -> str:
        """A shell command that restarts the server (what the chaos run runs)."""
        return shlex.join(self._pg_ctl("restart"))

    def run(self, action: str) -> None:
        subprocess.run(self._pg_ctl(action), check=True, capture_output=True, timeout=90)

    def kill(self) -> None:
        """Stop the server at once (``pg_ctl stop -m immediate``: every connection dropped,
        no shutdown checkpoint, as a crash); ``run("start")`` brings it back."""
        stop = self._pg_ctl("stop")
        subprocess.run(
            [*stop[:-1], "-m", "immediate", "stop"], check=True, capture_output=True, timeout=90
        )

    def create_database(self, name: str) -> str:
        import psycopg

        with psycopg.connect(self.admin_url, autocommit=True, connect_timeout=10) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)


@contextlib.contextmanager
def private_postgres() -> Iterator[PrivateCluster]:
    """Start a fresh cluster in a new temporary folder; stop and remove it at the end.

    The folder is made under the system's temporary directory, not pytest's, which is
    private to root and so out of reach of the ``postgres`` user."""
    bindir = _bindir()
    folder = Path(tempfile.mkdtemp(prefix="toolsafe-pg-"))
    data = folder / "data"
    as_user: tuple[str, ...] = ()
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        runuser = shutil.which("runuser")
        if runuser is None:
            raise RuntimeError("running as root needs runuser to start PostgreSQL as postgres")
        as_user = (runuser, "-u", "postgres", "--")
        shutil.chown(folder, "postgres")
        folder.chmod(0o700)
    subprocess.run(
        [*as_user, str(bindir / "initdb"), "-D", str(data), "-U", "postgres",
         "--auth=trust", "--no-sync", "-E", "UTF8"],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    # Only as durable as a test needs: fast restarts, no fsync (a killed server's WAL
    # stays in the OS's cache). Commits are synchronous: a test that kills the server
    # asserts that every acknowledged commit survives, as in production.
    with (data / "postgresql.conf").open("a", encoding="utf-8") as conf:
        conf.write("\nfsync = off\nfull_page_writes = off\n")
        conf.write("max_connections = 200\n")
    cluster = PrivateCluster(_free_port(), data, as_user, bindir)
    try:
        cluster.run("start")
        yield cluster
    finally:
        with contextlib.suppress(subprocess.SubprocessError):
            subprocess.run(
                [*cluster._pg_ctl("stop")[:-1], "-m", "immediate", "stop"],
                check=False, capture_output=True, timeout=60,
            )  # fmt: skip
        shutil.rmtree(folder, ignore_errors=True)
