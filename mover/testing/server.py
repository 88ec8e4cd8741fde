"""A mover.server Server with chosen handlers, running on its own event-loop thread: a broker in-process for tests
of the transport and for fakes of other brokers (mover/testing/fake_kafka/growing_copy.py growing_copy_broker)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from mover.server import Route, Server
from mover.server.routes import Handler
from mover.testing.raw import SOCKET_TIMEOUT_S, RawClient


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
