"""Free TCP ports on the loopback interface, for servers that need theirs up front."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A port the OS reports free on 127.0.0.1 (free now; bind it soon)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port
