"""One connection's answers in request order, and the writer that sends them: Kafka's response queue and the
Processor's send side, per connection.

Handlers finish in any order, but Kafka answers each connection's requests in order and clients rely on it, so every
answer (a handler's, ApiVersions', a SASL step's, the close) is queued here, as a future, in the order the reader
admitted its request; the writer task awaits the first, sends it together with any already finished behind it, and
gives each request's in-flight slot back as its answer leaves. The one shortcut, `send_now`, writes an answer at once
only when the writer would have sent it next and is idle, so the order holds there too. Kept apart from the reader
because the two run as different tasks and share only this queue, the slots and the transport: the reader decides
which request runs when, this only what leaves when.
"""

from __future__ import annotations

import asyncio
import collections
import socket
from typing import Any, NamedTuple

from mover.server.stream import PlainStream, TlsStream, push, send_through_stream
from mover.wire import Chunk, frame_length

# Requests read from one connection but not yet answered. Kafka's broker stops reading a connection while one
# request is in flight (SocketServer mutes the channel); clients pipeline up to 5 by default
# (max.in.flight.requests.per.connection). We allow more overlap for read-only tools that pipeline deeply, and stop
# reading at this many so one client cannot queue unbounded work (each may be up to socket.request.max.bytes).
MAX_IN_FLIGHT = 64

# Answers already finished are sent together up to this many bytes: one syscall for a burst of small pipelined
# responses, without holding a large answer back behind a small one for long. 1 MiB is Kafka's default
# fetch.max.bytes-sized chunk of a response.
WRITE_COALESCE_BYTES = 1 << 20


class _Close:
    """Writer instruction: send nothing more, close the connection."""


CLOSE: Any = _Close()


# What `ResponseQueue.send_now` did with an answer.
ALL_SENT, QUEUED, NOT_SENT = object(), object(), object()


class InFlightSlots:
    """Requests admitted but not yet answered, at most `limit` (MAX_IN_FLIGHT). Only the reader takes slots (one
    taker, so one waiter at most); anyone gives them back. Unlike asyncio.Semaphore it can be taken without a
    coroutine, from the socket's readiness callback (`Connection._on_data`)."""

    __slots__ = ("free", "_waiter")

    def __init__(self, limit: int) -> None:
        self.free = limit
        self._waiter: asyncio.Future[None] | None = None

    def take_now(self) -> bool:
        if self.free <= 0:
            return False
        self.free -= 1
        return True

    async def acquire(self) -> None:
        while self.free <= 0:
            fut = self._waiter = asyncio.get_running_loop().create_future()
            try:
                await fut
            finally:
                self._waiter = None
        self.free -= 1

    def release(self) -> None:
        self.free += 1
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


class RunAnswers(NamedTuple):
    """The answers of a run of requests (Route.fast_many), queued as one: `count` requests' slots are released when
    the writer takes it."""

    chunks: list[Chunk]
    count: int


class ResponseQueue:
    """The answers of one connection, queued in request order (futures of chunks, None for no answer, CLOSE), and
    the writer that sends them (`write_loop`), giving back an in-flight slot per answer taken."""

    def __init__(self, sock: socket.socket, stream: PlainStream | TlsStream, slots: InFlightSlots,
                 loop: asyncio.AbstractEventLoop) -> None:
        self.sock = sock
        # What the answers go through: the connection replaces it once a TLS handshake is done, before any answer.
        self.stream = stream
        self.slots = slots
        self.pending: collections.deque[asyncio.Future[Any]] = collections.deque()
        self._queued = asyncio.Event()
        self.idle = False  # the writer waits for an answer to be queued: no write is in progress
        self._loop = loop

    def queue(self, fut: asyncio.Future[Any]) -> None:
        self.pending.append(fut)
        self._queued.set()

    def queue_done(self, result: Any) -> None:
        fut = self._loop.create_future()
        fut.set_result(result)
        self.queue(fut)

    def queue_later(self, delay: float, result: Any) -> None:
        """Queue an answer that is sent `delay` seconds from now, without holding up the loop."""
        fut = self._loop.create_future()
        self._loop.call_later(delay, lambda: fut.done() or fut.set_result(result))
        self.queue(fut)

    def send_now(self, chunks: list[Chunk]) -> object:
        """Write a finished answer straight to the socket when nothing is queued before it and the writer is idle (so
        no write is in progress): saves the writer's wake-up, a loop turn per request. The connection asks only for
        the last request of what was read, so answers to a burst of pipelined requests still go out together through
        the writer. ALL_SENT; QUEUED (part went out, or a socket error the writer then meets: the rest is queued
        first in line and takes the request's slot); or NOT_SENT (nothing tried: TLS, a write in progress)."""
        if self.pending or not self.idle or not self.stream.sends_files:
            return NOT_SENT
        try:
            if push(self.sock, chunks):
                return ALL_SENT
        except OSError:
            pass  # a dead socket: the writer meets the error with what is left
        self.queue_done(chunks)
        return QUEUED

    async def write_loop(self) -> None:
        """The writer: sends the answers in order until a CLOSE (returns) or a socket error (raises)."""
        pending = self.pending
        while True:
            if not pending:
                self._queued.clear()
                self.idle = True
                try:
                    await self._queued.wait()
                finally:
                    self.idle = False
                continue
            result = await pending[0]
            pending.popleft()
            self.slots.release()
            if result is CLOSE:
                return
            if result is None:
                continue
            if type(result) is RunAnswers:
                result = self._release_run(result)
            batch: list[Chunk] = list(result)
            size = _size(batch)
            # Answers that are already finished go out with this one: pipelined small responses, one syscall.
            while pending and pending[0].done() and size < WRITE_COALESCE_BYTES:
                nxt = pending[0].result()
                if nxt is CLOSE:
                    break
                pending.popleft()
                self.slots.release()
                if nxt is not None:
                    if type(nxt) is RunAnswers:
                        nxt = self._release_run(nxt)
                    batch.extend(nxt)
                    size += _size(nxt)
            await self._send(batch)

    def _release_run(self, run: RunAnswers) -> list[Chunk]:
        for _ in range(run.count - 1):  # the first was released with the entry, as for any answer
            self.slots.release()
        return run.chunks

    async def _send(self, chunks: list[Chunk]) -> None:
        if not self.stream.sends_files:
            await send_through_stream(self.stream, chunks)
            return
        while not push(self.sock, chunks):
            await self._writable()

    async def _writable(self) -> None:
        fut: asyncio.Future[None] = self._loop.create_future()
        fd = self.sock.fileno()

        def ready() -> None:
            if not fut.done():
                fut.set_result(None)

        self._loop.add_writer(fd, ready)
        try:
            await fut
        finally:
            self._loop.remove_writer(fd)


def _size(chunks: list[Chunk]) -> int:
    return frame_length(chunks)
