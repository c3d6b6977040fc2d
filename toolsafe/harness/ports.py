"""Free TCP ports on the loopback interface, for servers that need theirs up front.

A port is drawn at random below the kernel's ephemeral range
(``net.ipv4.ip_local_port_range``) and checked free by binding it. A port the kernel
hands out for port 0 lies inside that range, where the next outgoing ``connect()`` of any
process may take it between the check and the server's own bind (a test's gateway once
failed to start with "address already in use" that way); a port below the range is
never given to an outgoing connection. Parallel test sessions draw among some 20,000
such ports, so two of them rarely draw the same one.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path
from typing import Final

EPHEMERAL_RANGE: Final = Path("/proc/sys/net/ipv4/ip_local_port_range")
_DEFAULT_EPHEMERAL_LOW: Final = 32768  # Linux's default when the range cannot be read
_SPAN: Final = 20_000  # ports drawn from, just below the ephemeral range
_LOWEST: Final = 1024  # never a privileged port
_DRAWS: Final = 50

_rng = random.SystemRandom()


def ephemeral_low(path: Path = EPHEMERAL_RANGE) -> int:
    """The first port of the kernel's ephemeral range (Linux's default if unknown)."""
    try:
        return int(path.read_text(encoding="ascii").split()[0])
    except (OSError, ValueError, IndexError):
        return _DEFAULT_EPHEMERAL_LOW


def draw_range(low: int) -> range:
    """The ports drawn from below an ephemeral range starting at ``low`` (empty when
    too few lie between the privileged ports and the range)."""
    first = max(_LOWEST, low - _SPAN)
    return range(first, low) if low - first >= 1000 else range(0)


def free_port() -> int:
    """A port free on 127.0.0.1 now, outside the ephemeral range when it can be (bind it
    soon); the kernel's choice when no drawn port is free."""
    ports = draw_range(ephemeral_low())
    if ports:
        for _ in range(_DRAWS):
            port = _rng.choice(ports)
            if _bindable(port):
                return port
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        chosen: int = probe.getsockname()[1]
        return chosen


def _bindable(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True
