"""Connection limits and the memory budget for requests being read (Kafka's ConnectionQuotas and MemoryPool).

- `max.connections`: the listeners stop accepting while this many connections are open; the kernel queues the
  rest (Kafka's acceptor blocks the same way) and they are served when a slot frees.
- `max.connections.per.ip` (+ `max.connections.per.ip.overrides`): a connection over its address's limit is closed
  right after accept, as Kafka does (TooManyConnectionsException, logged).
- `queued.max.request.bytes`: bytes of request bodies being read, over all connections. A connection reads a
  frame's body only once the budget admits its whole size; until then it stops reading (TCP pushes back on the
  client). A frame larger than the whole budget can never be admitted and closes its connection.
All of this runs on the listeners' one event loop: no locks.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Mapping


class ConnectionLimits:
    def __init__(
        self,
        max_connections: int | None = None,
        max_per_ip: int | None = None,
        per_ip_overrides: Mapping[str, int] | None = None,
    ) -> None:
        self.max_connections = max_connections
        self.max_per_ip = max_per_ip
        self.overrides = dict(per_ip_overrides or {})
        self.total = 0
        self.by_ip: collections.Counter[str] = collections.Counter()
        self._freed: asyncio.Event | None = None

    def limit_for(self, host: str) -> int | None:
        return self.overrides.get(host, self.max_per_ip)

    async def wait_for_slot(self) -> None:
        """Return when one more connection is allowed overall."""
        while self.max_connections is not None and self.total >= self.max_connections:
            if self._freed is None:
                self._freed = asyncio.Event()
            self._freed.clear()
            await self._freed.wait()

    def admit(self, host: str) -> str | None:
        """Count a new connection from `host`; a reason string (and nothing counted) when it is over a limit."""
        limit = self.limit_for(host)
        if limit is not None and self.by_ip[host] >= limit:
            return f"too many connections from {host} (max.connections.per.ip {limit})"
        self.total += 1
        self.by_ip[host] += 1
        return None

    def release(self, host: str) -> None:
        self.total -= 1
        self.by_ip[host] -= 1
        if self.by_ip[host] <= 0:
            del self.by_ip[host]
        if self._freed is not None:
            self._freed.set()


class ByteBudget:
    """A counting budget of bytes, granted in FIFO order so a large frame is not starved by small ones."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.used = 0
        self._waiters: collections.deque[tuple[int, asyncio.Future[None]]] = collections.deque()

    async def acquire(self, n: int) -> None:
        if n > self.capacity:
            raise ValueError(f"a request of {n} bytes exceeds queued.max.request.bytes ({self.capacity})")
        if not self._waiters and self.used + n <= self.capacity:
            self.used += n
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append((n, fut))
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self.release(n)  # granted just as we were cancelled: hand it back
            else:
                self._waiters = collections.deque(w for w in self._waiters if w[1] is not fut)
                self._grant()
            raise

    def release(self, n: int) -> None:
        self.used -= n
        self._grant()

    def _grant(self) -> None:
        while self._waiters:
            n, fut = self._waiters[0]
            if fut.done():
                self._waiters.popleft()
                continue
            if self.used + n > self.capacity:
                return
            self._waiters.popleft()
            self.used += n
            fut.set_result(None)
