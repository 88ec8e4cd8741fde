"""A Server running on its own event-loop thread, and a raw blocking-socket Kafka client (tests only)."""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from mover.server import Route, Server
from mover.server.routes import Handler
from mover.wire import Api, decode_response, encode_request, join_chunks

# Generous: a test that waits this long has failed; it only bounds how long a broken test hangs.
SOCKET_TIMEOUT_S = 10.0


class Running:
    def __init__(self, server: Server, loop: asyncio.AbstractEventLoop) -> None:
        self.server = server
        self.loop = loop
        self.port = server.port

    def call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(SOCKET_TIMEOUT_S)

    def client(self) -> RawClient:
        return RawClient(self.port)


@contextmanager
def serve(handlers: Mapping[int, Handler | Route], **kwargs: Any) -> Iterator[Running]:
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="test-server-loop", daemon=True)
    thread.start()

    async def make() -> Server:
        server = Server(handlers, host="127.0.0.1", port=0, **kwargs)
        await server.start()
        return server

    server = asyncio.run_coroutine_threadsafe(make(), loop).result(SOCKET_TIMEOUT_S)
    running = Running(server, loop)
    try:
        yield running
    finally:
        running.call(server.close())
        loop.call_soon_threadsafe(loop.stop)
        thread.join(SOCKET_TIMEOUT_S)
        loop.close()


class RawClient:
    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=SOCKET_TIMEOUT_S)
        self._corr = 0

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def request_bytes(self, api: Api | int, version: int, body: dict[str, Any], corr: int | None = None) -> bytes:
        if corr is None:
            self._corr += 1
            corr = self._corr
        return join_chunks(encode_request(api, version, corr, body, client_id="test"))

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def recv_exact(self, n: int) -> bytes | None:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                return None
            buf += chunk
        return bytes(buf)

    def recv_frame(self) -> bytes | None:
        head = self.recv_exact(4)
        if head is None:
            return None
        (size,) = struct.unpack(">i", head)
        return self.recv_exact(size)

    def call(self, api: Api, version: int, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        self.send(self.request_bytes(api, version, body))
        frame = self.recv_frame()
        assert frame is not None, "connection closed"
        header, got = decode_response(api, version, frame)
        return header.correlation_id, got

    def is_closed_by_peer(self) -> bool:
        """True once the server has closed: recv returns EOF (or a reset)."""
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True
