"""PlainStream.recv: the socket stays registered between reads, a silent peer times out, and the socket is no
longer watched once it reached EOF or was detached (the selector must not keep a descriptor that gets closed)."""

from __future__ import annotations

import asyncio
import socket

import pytest

from mover.server.stream import PlainStream


def _watched(loop: asyncio.AbstractEventLoop, sock: socket.socket) -> bool:
    try:
        loop._selector.get_key(sock.fileno())  # type: ignore[attr-defined]
    except KeyError:
        return False
    return True


def test_reads_timeouts_and_detach() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        a, b = socket.socketpair()
        a.setblocking(False)
        stream = PlainStream(a)
        # A read that has to wait, then one that finds bytes at once: registered once, still after the answer.
        loop.call_later(0.01, b.send, b"one")
        assert await stream.recv(5) == b"one"
        assert _watched(loop, a)
        b.send(b"two")
        assert await stream.recv(5) == b"two"
        # Silence for longer than `idle`: TimeoutError, and nothing left watching the socket or timing it.
        with pytest.raises(TimeoutError):
            await stream.recv(0.05)
        assert not _watched(loop, a) and stream._timer is None
        # Bytes after a timeout are read as before; a wait shorter than idle does not time out.
        loop.call_later(0.02, b.send, b"three")
        assert await stream.recv(0.5) == b"three"
        # A reader cancelled while it waits leaves nothing registered.
        task = asyncio.ensure_future(stream.recv(5))
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert not _watched(loop, a)
        # EOF: b"" and unregistered.
        b.close()
        assert await stream.recv(5) == b""
        assert not _watched(loop, a)
        stream.detach()
        a.close()

    asyncio.run(main())
