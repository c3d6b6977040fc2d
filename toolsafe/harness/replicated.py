"""A PostgreSQL primary and a streaming standby of the harness's own, failed over for
real: the primary stopped at once (``pg_ctl stop -m immediate``, what a crash leaves),
the standby promoted, and the dead primary's folder cloned again from the new primary
(``pg_basebackup -R``) to become the next standby.

Replication is synchronous (``synchronous_standby_names`` naming the standby,
``synchronous_commit = on``): a commit is acknowledged only once the standby has the
WAL, so a failover loses no acknowledged commit. Between a promotion and the next
standby the new primary runs alone (its ``synchronous_standby_names`` cleared), or
every commit would wait for a standby that does not exist yet.

Clients reach it through one multi-host URL listing both servers with
``target_session_attrs=read-write``: whichever is primary takes the connections. Both
servers run on free loopback ports in a temporary folder; as root they run as the
``postgres`` system user (PostgreSQL refuses root).
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from toolsafe.harness.errors import HarnessError
from toolsafe.harness.ports import free_port

READY_TIMEOUT: Final = 60.0
CONFIG: Final = """
listen_addresses = '127.0.0.1'
wal_level = replica
max_wal_senders = 10
wal_keep_size = '256MB'
hot_standby = on
synchronous_commit = on
max_connections = 200
fsync = off
full_page_writes = off
"""
"""``fsync = off`` is safe here: ``pg_ctl stop -m immediate`` kills the server, not the
machine, so the written WAL survives in the OS's cache. Production keeps ``fsync``."""
STREAMING: Final = (
    "SELECT count(*) FROM pg_stat_replication WHERE application_name = %s"
    " AND state = 'streaming' AND sync_state = 'sync'"
)


def bindir() -> Path:
    """The folder of the server's programs (``pg_ctl`` found on the PATH may be a link
    to them: the link is followed, as ``pg_basebackup`` may not be linked beside it)."""
    found = shutil.which("pg_ctl")
    if found:
        return Path(found).resolve().parent
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    if not candidates:
        raise HarnessError("no PostgreSQL server binaries (pg_ctl, initdb) on this machine")
    return Path(candidates[-1]).parent


def _as_postgres() -> tuple[str, ...]:
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        runuser = shutil.which("runuser")
        if runuser is None:
            raise HarnessError("running as root needs runuser to start PostgreSQL as postgres")
        return (runuser, "-u", "postgres", "--")
    return ()


@dataclass(frozen=True)
class Node:
    """One server of the pair: its name (its ``application_name`` as a standby), port and
    data folder. Which one is primary changes with each failover."""

    name: str
    port: int
    data: Path

    def conninfo(self, database: str = "postgres") -> str:
        return f"host=127.0.0.1 port={self.port} user=postgres dbname={database}"


class ReplicatedPostgres:
    """Two nodes on fixed ports; ``primary`` and ``standby`` swap at each ``failover``."""

    def __init__(self, folder: Path | None = None) -> None:
        self.bindir = bindir()
        self.as_user = _as_postgres()
        self.folder = Path(tempfile.mkdtemp(prefix="toolsafe-pg-pair-", dir=folder))
        if self.as_user:
            shutil.chown(self.folder, "postgres")
            self.folder.chmod(0o700)
        self.nodes = tuple(
            Node(name, free_port(), self.folder / name) for name in ("node_a", "node_b")
        )
        self.primary, self.standby = self.nodes
        self.failovers = 0

    # -------------------------------------------------------------- URLs

    def url(self, database: str, driver: str = "postgresql+psycopg") -> str:
        """The multi-host URL clients use: both nodes, whichever takes writes."""
        hosts = ",".join(f"127.0.0.1:{node.port}" for node in self.nodes)
        return f"{driver}://postgres@{hosts}/{database}?target_session_attrs=read-write"

    def create_database(self, name: str) -> str:
        """A new database on the primary (replicated like everything); its URL."""
        self.sql(self.primary, f'CREATE DATABASE "{name}"')
        return self.url(name)

    # -------------------------------------------------------------- the pair

    def start(self) -> None:
        """initdb the primary, start it, clone and start the standby, wait until the
        standby streams synchronously."""
        self._run(
            "initdb", "-D", str(self.primary.data), "-U", "postgres", "--auth=trust",
            "--no-sync", "-E", "UTF8",
        )  # fmt: skip
        with (self.primary.data / "postgresql.conf").open("a", encoding="utf-8") as conf:
            conf.write(CONFIG)
        self._pg_ctl(self.primary, "start")
        self.attach_standby()

    def attach_standby(self) -> None:
        """(Re)build ``standby`` from the primary with ``pg_basebackup -R``, start it, and
        make the primary's commits wait for it."""
        node = self.standby
        if node.data.exists():
            self._run("rm", "-rf", str(node.data))
        self._run(
            "pg_basebackup", "-d", self.primary.conninfo(), "-D", str(node.data),
            "-R", "-X", "stream", "-c", "fast", "--no-sync",
        )  # fmt: skip
        # -R wrote standby.signal and primary_conninfo; the name says which standby it is.
        auto = node.data / "postgresql.auto.conf"
        conninfo = f"{self.primary.conninfo()} application_name={node.name}"
        with auto.open("a", encoding="utf-8") as conf:
            conf.write(f"primary_conninfo = '{conninfo}'\nsynchronous_standby_names = ''\n")
        self._pg_ctl(node, "start")
        self.sql(self.primary, f"ALTER SYSTEM SET synchronous_standby_names = '{node.name}'")
        self.sql(self.primary, "SELECT pg_reload_conf()")
        self.wait_streaming()

    def wait_streaming(self, timeout: float = READY_TIMEOUT) -> None:
        """Until the primary reports the standby streaming as its synchronous standby."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.sql(self.primary, STREAMING, (self.standby.name,)) == "1":
                return
            time.sleep(0.1)
        raise HarnessError(f"standby {self.standby.name} never streamed synchronously")

    def kill_primary(self) -> None:
        """The primary stops at once, as in a crash: no checkpoint, connections cut."""
        self._pg_ctl(self.primary, "stop", "-m", "immediate")

    def promote(self) -> None:
        """The standby becomes the primary and runs alone until ``attach_standby``."""
        self._pg_ctl(self.standby, "promote")
        self.primary, self.standby = self.standby, self.primary
        self.sql(self.primary, "ALTER SYSTEM SET synchronous_standby_names = ''")
        self.sql(self.primary, "SELECT pg_reload_conf()")
        self.failovers += 1

    def failover(self, rebuild: bool = True, down: float = 0.0) -> float:
        """Kill the primary, wait ``down`` seconds without one, promote the standby, and
        (``rebuild``) clone a new standby from it into the dead primary's place; returns
        the seconds writes were refused (the kill to the promotion)."""
        started = time.monotonic()
        self.kill_primary()
        time.sleep(down)
        self.promote()
        away = time.monotonic() - started
        if rebuild:
            self.attach_standby()
        return away

    def stop(self) -> None:
        for node in self.nodes:
            if (node.data / "postmaster.pid").exists():
                with contextlib.suppress(HarnessError):
                    self._pg_ctl(node, "stop", "-m", "immediate")
        shutil.rmtree(self.folder, ignore_errors=True)

    # -------------------------------------------------------------- commands

    def sql(self, node: Node, statement: str, params: tuple[str, ...] = ()) -> str:
        """One statement on ``node`` in autocommit; the first column of its first row."""
        import psycopg

        with psycopg.connect(node.conninfo(), autocommit=True, connect_timeout=10) as conn:
            cursor = conn.execute(statement.encode(), params or None)
            row = cursor.fetchone() if cursor.description else None
        return "" if row is None else str(row[0])

    def _pg_ctl(self, node: Node, action: str, *extra: str) -> None:
        options = f"-p {node.port} -k {self.folder}"
        self._run(
            "pg_ctl", "-D", str(node.data), "-l", str(self.folder / f"{node.name}.log"),
            "-o", options, "-w", "-t", str(int(READY_TIMEOUT)), *extra, action,
        )  # fmt: skip

    def _run(self, program: str, *args: str) -> None:
        path = program if program == "rm" else str(self.bindir / program)
        try:
            subprocess.run(
                [*self.as_user, path, *args], check=True, capture_output=True, timeout=120
            )
        except subprocess.CalledProcessError as error:
            said = (error.stderr or b"").decode(errors="replace").strip()[-500:]
            raise HarnessError(f"{program} {args[-1]} failed: {said}") from error


@contextlib.contextmanager
def replicated_postgres(folder: Path | None = None) -> Iterator[ReplicatedPostgres]:
    """A started primary + synchronous standby; both stopped and removed at the end."""
    pair = ReplicatedPostgres(folder)
    try:
        pair.start()
        yield pair
    finally:
        pair.stop()
