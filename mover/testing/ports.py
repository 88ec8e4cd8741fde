"""Free loopback ports for servers started by tests."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A port nothing listens on now. The kernel picks it; a small race remains until the server binds it."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
