"""Free loopback ports for servers started by tests.

A port the kernel hands out for `bind(("127.0.0.1", 0))` comes from the ephemeral range
(/proc/sys/net/ipv4/ip_local_port_range, 32768-60999 by default), the same range every outgoing connection takes its
local port from. Between choosing a port and a server binding it (seconds for a JVM: a Kafka node, ZooKeeper) any
client connection of the machine may take it, and the server fails with "Address already in use" (seen with two test
workers, one starting a Kafka cluster while the other's clients connected). So ports are chosen below the ephemeral
range, where no connection lands unless a program binds there on purpose, at random and, under pytest-xdist, in a
slice of their own per worker, so two workers never choose the same port.
"""

from __future__ import annotations

import os
import random
import re
import socket
import threading
from collections import deque

# Below this nothing of ours is chosen: the well-known and registered ports that daemons of the machine may use.
_LOWEST = 10000
_DEFAULT_EPHEMERAL_LOW = 32768
# Slices of the range below the ephemeral ports, one per xdist worker (gw0, gw1, ...); more workers share them.
_SLICES = 8
# Its own generator: a test that seeds `random` must not make every process choose the same ports.
_random = random.Random()
# Ports handed out lately in this process are not handed out again at once: a server may not have bound its port yet.
_recent: deque[int] = deque(maxlen=1024)
_lock = threading.Lock()


def _ephemeral_low() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return _DEFAULT_EPHEMERAL_LOW
    return low


def _candidates() -> range:
    high = _ephemeral_low()
    if high - _LOWEST < 1000:  # the ephemeral range starts unusually low: fall back on the kernel's choice
        return range(0)
    match = re.fullmatch(r"gw(\d+)", os.environ.get("PYTEST_XDIST_WORKER", ""))
    if match is None:
        return range(_LOWEST, high)
    width = (high - _LOWEST) // _SLICES
    start = _LOWEST + (int(match.group(1)) % _SLICES) * width
    return range(start, start + width)


def free_port() -> int:
    """A port nothing listens on now (below the ephemeral range: see the module's docstring)."""
    return free_ports(1)[0]


def free_ports(n: int) -> list[int]:
    """`n` distinct free ports. Each socket stays bound until all are chosen, so none is handed out twice."""
    candidates = _candidates()
    socks: list[socket.socket] = []
    try:
        with _lock:
            recent = set(_recent)
        for port in _random.sample(candidates, min(len(candidates), max(64 * n, 256))):
            if len(socks) == n:
                break
            if port in recent:
                continue
            s = socket.socket()
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                s.close()
                continue
            socks.append(s)
        while len(socks) < n:  # no candidate range, or (hardly) every candidate taken: the kernel's choice
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        ports = [int(s.getsockname()[1]) for s in socks]
        with _lock:
            _recent.extend(ports)
        return ports
    finally:
        for s in socks:
            s.close()
