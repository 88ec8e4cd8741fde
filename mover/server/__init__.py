"""asyncio server framework for the Kafka protocol: a listener, per-socket connections, a handler registry.

from mover.server import Route, Server, run_blocking

async def describe_log_dirs(header, request):
    dirs = await run_blocking(log_manager.describe, request["topics"])   # storage work off the loop
    return {"results": dirs}

server = Server({35: describe_log_dirs, 1: Route(fetch, concurrent=True)}, host="0.0.0.0", port=9092)
await server.start(); ...; await server.close()
"""

from __future__ import annotations

from mover.server.connection import DEFAULT_IDLE_TIMEOUT_S
from mover.server.response_queue import MAX_IN_FLIGHT
from mover.server.routes import (
    NOT_NOW,
    Builder,
    CloseConnection,
    FastHandler,
    Handler,
    Recogniser,
    Route,
    is_async_handler,
)
from mover.server.server import DEFAULT_IO_THREADS, Server, run_blocking

__all__ = [
    "DEFAULT_IDLE_TIMEOUT_S",
    "DEFAULT_IO_THREADS",
    "MAX_IN_FLIGHT",
    "NOT_NOW",
    "Builder",
    "CloseConnection",
    "FastHandler",
    "Handler",
    "Recogniser",
    "Route",
    "Server",
    "is_async_handler",
    "run_blocking",
]
