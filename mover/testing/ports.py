"""Free loopback ports for servers started by tests."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A port nothing listens on now. The kernel picks it; a small race remains until the server binds it."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def free_ports(n: int) -> list[int]:
    """`n` distinct free ports. Each socket stays bound until all are chosen: one `free_port()` after another can hand
    out the same port twice (the kernel reuses a port as soon as its socket closes)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()
