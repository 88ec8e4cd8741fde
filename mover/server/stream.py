"""Byte streams a connection reads and writes: the plain socket, or TLS over it, and how an answer's chunks (bytes
and file regions) leave by each (`push` onto the plain socket, `send_through_stream` through TLS).

asyncio's sock_* calls refuse SSLSocket, and the transport/protocol layer would hide the socket the plaintext path
sends files from, so TLS is done here with `ssl.SSLObject` over two memory BIOs: bytes from the socket go into the
incoming BIO, records the TLS engine produces come out of the outgoing one. All of it runs on the loop thread; the
SSL calls never block, and one lock keeps the reader's and the writer's socket writes from interleaving. How an
answer's file regions leave is the transport's too: the plain socket sends them with sendfile (the record bytes never
enter Python), TLS must read them and encrypt them in user space.
"""

from __future__ import annotations

import asyncio
import errno
import os
import socket
import ssl
from collections.abc import Callable
from typing import Any

from mover.wire import Chunk, FileRegion

# Bytes asked of each recv. 64 KiB is the usual socket buffer and what asyncio's own streams read at a time.
RECV_SIZE = 64 * 1024

# Requests a connection may have answered in one readiness callback (PlainStream.on_data) before the loop runs its
# other callbacks: a client answered as fast as it asks must not keep the loop from other connections.
ON_DATA_MAX_READS = 16

# Plaintext handed to the TLS engine per record batch: a TLS record carries at most 16 KiB, so this is four
# records per socket write, and the outgoing BIO never holds more than that.
TLS_WRITE_SIZE = 64 * 1024

# File data read into memory per step when a file slice cannot go out with sendfile (TLS encrypts in user space).
FILE_CHUNK = 1 << 20


class PlainStream:
    """The socket as is; file slices go out with sendfile.

    `recv` keeps the socket registered with the loop's selector between calls and bounds a wait with one timer per
    stream, re-armed only when it fires: asyncio's `sock_recv` adds and removes the reader around every wait (two
    epoll_ctl calls and their bookkeeping), and a timeout context per wait pushes and cancels a timer. For a client
    that sends one request and waits for its answer, that was about a tenth of moverd's time per request (py-spy,
    docs/data-path.md). `detach()` unregisters it before the socket is closed."""

    sends_files = True

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        # Set by the connection: called from the readiness callback with bytes read there while `recv` waits; True
        # when it dealt with them in that same loop turn (`recv` keeps waiting), False to have `recv` return them.
        self.on_data: Callable[[bytes], bool] | None = None
        self._loop = asyncio.get_running_loop()
        self._fd = sock.fileno()
        self._registered = False
        self._waiter: asyncio.Future[bytes | None] | None = None
        self._wait_started = 0.0
        self._idle = 0.0
        self._timer: asyncio.TimerHandle | None = None

    async def recv(self, idle: float | None = None) -> bytes:
        """The next bytes (b"" at EOF). TimeoutError if a wait for them lasted `idle` seconds."""
        sock = self.sock
        try:
            return sock.recv(RECV_SIZE)
        except (BlockingIOError, InterruptedError):
            pass
        except BaseException:
            self.detach()
            raise
        while True:
            fut = self._waiter = self._loop.create_future()
            if not self._registered:
                self._loop.add_reader(self._fd, self._readable)
                self._registered = True
            if idle is not None:
                self._idle = idle
                self._wait_started = self._loop.time()
                if self._timer is None:
                    self._timer = self._loop.call_at(self._wait_started + idle, self._check_idle)
            try:
                data = await fut
                if data is None:
                    data = sock.recv(RECV_SIZE)
            except (BlockingIOError, InterruptedError):
                continue  # woken without data (spurious readiness)
            except BaseException:
                self.detach()  # EOF follows, an error, a timeout or a cancel: nobody reads this socket on
                raise
            finally:
                self._waiter = None
            if not data:
                self.detach()
            return data

    def _readable(self) -> None:
        waiter = self._waiter
        if waiter is None:
            # Readable while nobody waits (the reader is busy with earlier bytes): level-triggered epoll would call
            # this at every loop turn until then, so step out; the next recv reads at once or registers again.
            self._loop.remove_reader(self._fd)
            self._registered = False
        elif not waiter.done():
            if self.on_data is None:
                waiter.set_result(None)  # the waiting recv reads
                return
            # Read here and offer the bytes to the connection, which may answer them in this loop turn: the
            # reader task is not woken (no second turn, no task step) for a request answered on the spot. After an
            # answer, read again at once: a client that sends one request at a time is often woken on this CPU by
            # the answer and has its next request in before this thread runs again (a recv then, not a loop turn).
            sock = self.sock
            on_data = self.on_data
            answered = 0
            while answered < ON_DATA_MAX_READS:  # at the limit more may wait: epoll calls again after other work
                try:
                    data = sock.recv(RECV_SIZE)
                except (BlockingIOError, InterruptedError):
                    break  # nothing (more) now: keep waiting
                except Exception as e:
                    waiter.set_exception(e)
                    return
                if not data or not on_data(data):
                    waiter.set_result(data)
                    return
                answered += 1
            if answered:
                self._wait_started = self._loop.time()  # the peer was not idle: the idle wait starts again now

    def _check_idle(self) -> None:
        self._timer = None
        waiter = self._waiter
        if waiter is None or waiter.done():
            return  # not waiting now: the next wait arms the timer again
        deadline = self._wait_started + self._idle
        if self._loop.time() >= deadline:
            waiter.set_exception(TimeoutError())
        else:
            self._timer = self._loop.call_at(deadline, self._check_idle)

    def detach(self) -> None:
        """Stop watching the socket (before it is closed: the selector must not keep a closed descriptor)."""
        if self._registered:
            self._registered = False
            try:
                self._loop.remove_reader(self._fd)
            except (OSError, ValueError):
                pass
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    async def sendall(self, data: bytes | bytearray | memoryview) -> None:
        await self._loop.sock_sendall(self.sock, data)

    def peer_certificate(self) -> dict[str, Any] | None:
        return None


class TlsStream:
    """TLS on a non-blocking socket, server side. `await handshake()` first; then recv/sendall carry plaintext."""

    sends_files = False

    def __init__(self, sock: socket.socket, context: ssl.SSLContext) -> None:
        self.sock = sock
        self._loop = asyncio.get_running_loop()
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._tls = context.wrap_bio(self._incoming, self._outgoing, server_side=True)
        self._send_lock = asyncio.Lock()
        self._eof = False

    async def handshake(self) -> None:
        """Raises ssl.SSLError (bad certificate, not TLS) or ConnectionError (peer gone)."""
        while True:
            try:
                self._tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                await self._flush()
                await self._fill()
            except ssl.SSLError:
                # Send the alert the engine produced (unknown CA, bad certificate) so the client sees why.
                await self._flush_quietly()
                raise
        await self._flush()

    async def recv(self, idle: float | None = None) -> bytes:
        """The next plaintext (b"" at EOF). TimeoutError if no byte arrived for `idle` seconds."""
        if idle is None:
            return await self._recv()
        async with asyncio.timeout(idle):
            return await self._recv()

    def detach(self) -> None:
        """Nothing stays registered between calls here (asyncio's sock_recv)."""

    async def _recv(self) -> bytes:
        while True:
            try:
                return self._tls.read(RECV_SIZE)
            except ssl.SSLWantReadError:
                # TLS 1.3 may have produced something to send (a key update answer) before it needs more input.
                await self._flush()
                if self._eof:
                    return b""
                await self._fill()
            except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                return b""

    async def sendall(self, data: bytes | bytearray | memoryview) -> None:
        view = memoryview(data)
        for start in range(0, len(view), TLS_WRITE_SIZE):
            self._tls.write(view[start : start + TLS_WRITE_SIZE])
            await self._flush()

    def peer_certificate(self) -> dict[str, Any] | None:
        return self._tls.getpeercert() or None

    async def _fill(self) -> None:
        data = await self._loop.sock_recv(self.sock, RECV_SIZE)
        if not data:
            self._eof = True
            self._incoming.write_eof()
            return
        self._incoming.write(data)

    async def _flush(self) -> None:
        async with self._send_lock:
            # Taken under the lock: bytes leave in the order the engine produced them, whoever sends them.
            data = self._outgoing.read()
            if data:
                await self._loop.sock_sendall(self.sock, data)

    async def _flush_quietly(self) -> None:
        try:
            await self._flush()
        except OSError:
            pass


async def send_file_slice(stream: PlainStream | TlsStream, fd: int, offset: int, length: int) -> None:
    """Send `length` bytes of `fd` from `offset` through a stream that cannot sendfile, in bounded chunks."""
    remaining = length
    while remaining:
        data = os.pread(fd, min(FILE_CHUNK, remaining), offset)
        if not data:
            raise ConnectionError("record file shorter than its slice")
        await stream.sendall(data)
        offset += len(data)
        remaining -= len(data)


def push(sock: socket.socket, chunks: list[Chunk]) -> bool:
    """Send what the socket takes now, without waiting: True when all of `chunks` went out, else False with
    `chunks` cut down (in place) to what is left. File regions go out with sendfile (the bytes never enter
    Python) and are closed once sent; the bytes before a region are sent with MSG_MORE, so the header and the
    records leave as full segments and the client is woken once for them, not for the header alone.

    Raises:
        OSError: the socket failed, or a record file is shorter than its slice (framing would be lost).
    """
    out = sock.fileno()
    n = len(chunks)
    i = 0
    try:
        while i < n:
            c = chunks[i]
            if isinstance(c, FileRegion):
                try:
                    sent = os.sendfile(out, c.fd, c.position, c.length)
                except (BlockingIOError, InterruptedError):
                    return False
                except OSError as e:
                    if e.errno not in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
                        raise
                    # Not every file system sends from files: the slice's bytes, read on the loop instead.
                    data = os.pread(c.fd, c.length, c.position)
                    if len(data) != c.length:
                        raise ConnectionError("record file shorter than its slice") from None
                    c.close()
                    chunks[i] = data
                    continue
                if sent == 0:
                    # The file ends before the slice does: the frame length is already on the wire.
                    raise ConnectionError("record file shorter than its slice")
                if sent < c.length:
                    chunks[i] = c.rest(sent)
                    return False  # the socket buffer is full
                c.close()
                i += 1
                continue
            j = i + 1
            while j < n and not isinstance(chunks[j], FileRegion):
                j += 1
            data = c if j == i + 1 else b"".join(chunks[i:j])  # type: ignore[arg-type]
            try:
                sent = sock.send(data, socket.MSG_MORE if j < n else 0)
            except (BlockingIOError, InterruptedError):
                sent = 0
            if sent < len(data):
                chunks[i:j] = [data[sent:]]  # type: ignore[index]
                n = len(chunks)
                return False
            i = j
        return True
    finally:
        del chunks[:i]


async def send_through_stream(stream: PlainStream | TlsStream, chunks: list[Chunk]) -> None:
    """TLS encrypts in user space: bytes go through the stream, file data a chunk at a time."""
    run: list[bytes] = []
    for c in chunks:
        if isinstance(c, FileRegion):
            if run:
                await stream.sendall(b"".join(run))
                run = []
            await send_file_slice(stream, c.fd, c.position, c.length)
        else:
            run.append(c)
    if run:
        await stream.sendall(b"".join(run))
