"""The harness against real services: a free port binds, and flushing a broker keeps only
the kept keys."""

from __future__ import annotations

import pytest

from toolsafe.harness import (
    SESSION_LOCK_KEY,
    flush_broker,
    free_port,
)


def test_free_port_can_be_bound() -> None:
    import socket

    port = free_port()
    with socket.socket() as server:
        server.bind(("127.0.0.1", port))
        assert server.getsockname()[1] == port


def test_free_port_lies_below_the_ephemeral_range() -> None:
    # Where no outgoing connection can take it between the choice and the bind.
    from toolsafe.harness.ports import draw_range, ephemeral_low

    assert all(free_port() in draw_range(ephemeral_low()) for _ in range(20))


@pytest.mark.redis
def test_flush_broker_deletes_every_key_but_the_kept_ones(redis_url: str) -> None:
    import redis

    client = redis.Redis.from_url(redis_url)
    try:
        lock = client.get(SESSION_LOCK_KEY)
        assert lock is not None  # conftest holds the db
        flush_broker(redis_url)  # what earlier tests of the session left behind
        assert list(client.scan_iter()) == [SESSION_LOCK_KEY.encode()]
        client.rpush("toolsafe.execute", *[f"hint{n}" for n in range(1200)])
        client.hset("unacked", "tag", "message")
        client.set("kept-too", "1")
        assert flush_broker(redis_url, keep=(SESSION_LOCK_KEY, "kept-too")) == 2
        assert sorted(client.scan_iter()) == sorted([SESSION_LOCK_KEY.encode(), b"kept-too"])
        assert flush_broker(redis_url) == 1  # by default only the session's lock stays
        assert client.get(SESSION_LOCK_KEY) == lock
    finally:
        client.close()


class _Greeter:
    """A TCP server on a free loopback port that answers each connection with its name."""

    def __init__(self, name: bytes) -> None:
        import socket
        import threading

        self.name = name
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            with conn:
                conn.sendall(self.name)


def _greeting(port: int, timeout: float) -> bytes:
    import socket

    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as conn:
        try:
            return conn.recv(64)
        except TimeoutError:
            return b""


def test_a_partition_cuts_and_heals_every_server_of_a_multi_host_url() -> None:
    """One proxy per server of a multi-host database URL, in the URL's order, so a worker
    behind the partition follows a failover to the other server; ``cut`` black-holes them
    all and the broker's, ``heal`` lets them talk again."""
    from toolsafe.harness import Partition
    from toolsafe.harness.proxy import database_addresses

    first, second, broker = _Greeter(b"first"), _Greeter(b"second"), _Greeter(b"broker")
    url = (
        f"postgresql://postgres@127.0.0.1:{first.port},127.0.0.1:{second.port}/chaos"
        "?target_session_attrs=read-write"
    )
    partition = Partition(url, f"redis://127.0.0.1:{broker.port}/3")
    try:
        env = partition.env()
        proxied = database_addresses(env["TOOLSAFE_DATABASE_URL"])
        assert [port for _, port in proxied] == [p.port for p in partition.databases]
        assert env["TOOLSAFE_DATABASE_URL"].endswith("/chaos?target_session_attrs=read-write")
        assert env["TOOLSAFE_BROKER_URL"] == f"redis://127.0.0.1:{partition.broker.port}/3"
        ports = [port for _, port in proxied] + [partition.broker.port]
        assert [_greeting(port, 5.0) for port in ports] == [b"first", b"second", b"broker"]
        partition.cut()
        assert partition.blackholed
        assert [_greeting(port, 0.3) for port in ports] == [b"", b"", b""]
        partition.heal()
        assert not partition.blackholed
        assert [_greeting(port, 5.0) for port in ports] == [b"first", b"second", b"broker"]
    finally:
        partition.close()
        for server in (first, second, broker):
            server.server.close()
