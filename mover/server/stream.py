"""Byte streams a connection reads and writes: the plain socket, or TLS over it.

asyncio's sock_* calls refuse SSLSocket, and the transport/protocol layer would hide the socket the plaintext path
sends files from, so TLS is done here with `ssl.SSLObject` over two memory BIOs: bytes from the socket go into the
incoming BIO, records the TLS engine produces come out of the outgoing one. All of it runs on the loop thread; the
SSL calls never block, and one lock keeps the reader's and the writer's socket writes from interleaving.
"""

from __future__ import annotations

import asyncio
import os
import socket
import ssl
from typing import Any

# Bytes asked of each recv. 64 KiB is the usual socket buffer and what asyncio's own streams read at a time.
RECV_SIZE = 64 * 1024

# Plaintext handed to the TLS engine per record batch: a TLS record carries at most 16 KiB, so this is four
# records per socket write, and the outgoing BIO never holds more than that.
TLS_WRITE_SIZE = 64 * 1024

# File data read into memory per step when a file slice cannot go out with sendfile (TLS encrypts in user space).
FILE_CHUNK = 1 << 20


class PlainStream:
    """The socket as is; file slices go out with sendfile."""

    sends_files = True

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._loop = asyncio.get_running_loop()

    async def recv(self) -> bytes:
        return await self._loop.sock_recv(self.sock, RECV_SIZE)

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

    async def recv(self) -> bytes:
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
