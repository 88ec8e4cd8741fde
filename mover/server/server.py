"""The asyncio TCP listener: accepts connections, owns the handler registry and the thread pool for blocking work."""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
import re
import socket
from collections.abc import Callable, Mapping
from concurrent.futures import Executor, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, TypeVar

from mover.server.connection import DEFAULT_IDLE_TIMEOUT_S, Connection
from mover.server.gate import sasl_rules
from mover.server.response_queue import MAX_IN_FLIGHT
from mover.server.routes import Handler, Route, resolve_routes
from mover.wire import DEFAULT_MAX_FRAME_SIZE, Chunk, ErrorCode, encode_response
from mover.wire.messages import API_VERSIONS, SASL_AUTHENTICATE, SASL_HANDSHAKE

if TYPE_CHECKING:
    from mover.security.listener import ListenerContext

log = logging.getLogger("mover.server")

T = TypeVar("T")

# Told of every routed request once answered: (the API's name in the route table, seconds from reading the frame to
# the encoded answer). Runs on the event loop: it must be cheap and never block (metrics).
RequestObserver = Callable[[str, float], None]

# Threads for blocking handler work (storage reads and writes, fsync). Kafka's broker runs request handlers on
# num.io.threads, default 8.
DEFAULT_IO_THREADS = 8

# Back-off after a failed accept (out of file descriptors): asyncio's own servers wait 1 s
# (asyncio.constants.ACCEPT_RETRY_DELAY) so a full fd table does not become a busy loop; there is no event to wait
# for, as the fd may be freed by any part of the process.
ACCEPT_RETRY_DELAY_S = 1.0

# Pending connections the kernel queues before accept. Kafka leaves it to the JVM default (50); we use the common
# Linux somaxconn default so a burst of clients (a restart of many consumers) is not refused.
LISTEN_BACKLOG = 4096


class Server:
    """Serves the Kafka protocol on one listener, dispatching to `{api_key: handler}`.

        server = Server({35: describe_log_dirs, 34: Route(alter_dirs)}, host="127.0.0.1", port=0)
        await server.start()
        server.port          # the bound port (useful with port=0)
        ...
        await server.close()

    Handlers are `async def handle(header, request) -> response` (dicts as in mover.wire) or plain functions,
    which run in the server's thread pool. Inside a handler, `await run_blocking(fn, *args)` runs blocking work in
    that pool. ApiVersions is answered by the server itself from the registry. `request_observer` (RequestObserver)
    hears of every routed request when its answer is ready.
    """

    def __init__(
        self,
        handlers: Mapping[int, Handler | Route],
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        max_request_size: int = DEFAULT_MAX_FRAME_SIZE,
        executor: Executor | None = None,
        io_threads: int = DEFAULT_IO_THREADS,
        max_in_flight: int = MAX_IN_FLIGHT,
        idle_timeout: float = DEFAULT_IDLE_TIMEOUT_S,
        security: ListenerContext | None = None,
        request_observer: RequestObserver | None = None,
    ) -> None:
        self.routes = resolve_routes(handlers)
        self.host = host
        self._requested_port = port
        self.max_request_size = max_request_size
        self.max_in_flight = max_in_flight
        self.idle_timeout = idle_timeout
        # TLS, SASL and connection limits of this listener (mover/security); None = PLAINTEXT without limits.
        self.security = security
        self.listener_name = security.name if security is not None else "PLAINTEXT"
        # What every connection's gate enforces (mover/server/gate.py); None: no SASL on this listener.
        self.sasl_rules = sasl_rules(security)
        self.request_observer = request_observer
        self._own_executor = executor is None
        self.executor: Executor = executor or ThreadPoolExecutor(io_threads, thread_name_prefix="mover-io")
        self._sock: socket.socket | None = None
        self._accept_task: asyncio.Task[None] | None = None
        # Called (on the loop) when accept fails, e.g. out of descriptors: the daemon frees idle file descriptors.
        self.on_accept_failure: Callable[[OSError], object] | None = None
        self._connections: dict[Connection, asyncio.Task[None]] = {}
        self._current: contextvars.ContextVar[Server] = _CURRENT
        api_keys = [
            {"api_key": API_VERSIONS.key, "min_version": API_VERSIONS.valid.lo, "max_version": API_VERSIONS.valid.hi}
        ]
        api_keys += [
            {"api_key": key, "min_version": r.min_version, "max_version": r.max_version}
            for key, r in self.routes.items()
        ]
        if security is not None and security.security.uses_sasl:
            # Answered by the connection itself (mover/server/auth.py), on SASL listeners only.
            api_keys += [
                {"api_key": api.key, "min_version": api.valid.lo, "max_version": api.valid.hi}
                for api in (SASL_HANDSHAKE, SASL_AUTHENTICATE)
            ]
        self.api_keys = sorted(api_keys, key=lambda k: k["api_key"])

    # ------------------------------------------------------------------------------------------------- lifecycle

    async def start(self) -> None:
        """Bind and listen, then accept in the background. `port` is valid when this returns."""
        if self._sock is not None:
            raise RuntimeError("server already started")
        infos = await asyncio.get_running_loop().getaddrinfo(
            self.host, self._requested_port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
        family, type_, proto, _, addr = infos[0]
        sock = socket.socket(family, type_, proto)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(addr)
            sock.listen(LISTEN_BACKLOG)
            sock.setblocking(False)
        except BaseException:
            sock.close()
            raise
        self._sock = sock
        self._accept_task = asyncio.create_task(self._accept_loop(), name="mover-accept")
        log.info("listening on %s:%d", self.host, self.port)

    @property
    def port(self) -> int:
        if self._sock is None:
            raise RuntimeError("server not started")
        return int(self._sock.getsockname()[1])

    async def close(self) -> None:
        """Stop accepting, close every connection (in-flight handlers are cancelled), release the thread pool."""
        if self._accept_task is not None:
            self._accept_task.cancel()
            await asyncio.wait([self._accept_task])
            self._accept_task = None
        if self._sock is not None:
            self._sock.close()
        conns = list(self._connections.items())
        for conn, _task in conns:
            conn.abort()
        for _conn, task in conns:
            task.cancel()
        if conns:
            await asyncio.wait([t for _, t in conns])
        self._connections.clear()
        if self._own_executor:
            self.executor.shutdown(wait=False, cancel_futures=True)

    async def __aenter__(self) -> Server:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _accept_loop(self) -> None:
        assert self._sock is not None
        loop = asyncio.get_running_loop()
        limits = self.security.limits if self.security is not None else None
        failures = 0
        while True:
            if limits is not None:
                await limits.wait_for_slot()
            try:
                sock, peer = await loop.sock_accept(self._sock)
            except asyncio.CancelledError:
                raise
            except OSError as e:
                # EMFILE and friends: keep serving the connections we have; accept again once one closes. One log
                # line per streak (not one a second), and the owner may give back idle descriptors (file cache).
                if failures == 0:
                    log.error("accept failed: %s (%d connections open); retrying every %.1fs until it succeeds",
                              e, len(self._connections), ACCEPT_RETRY_DELAY_S)
                failures += 1
                if self.on_accept_failure is not None:
                    self.on_accept_failure(e)
                await asyncio.sleep(ACCEPT_RETRY_DELAY_S)
                continue
            if failures:
                log.info("accepting connections again after %d failed accepts", failures)
                failures = 0
            host = peer[0] if isinstance(peer, tuple) else str(peer)
            if limits is not None:
                refused = limits.admit(host)
                if refused is not None:
                    log.warning("refusing connection from %s on listener %s: %s", peer, self.listener_name, refused)
                    sock.close()
                    continue
            sock.setblocking(False)
            # Kafka sets TCP_NODELAY on broker sockets: responses are small and latency matters more than packets.
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn = Connection(self, sock, peer)
            task = asyncio.create_task(conn.run(), name=f"mover-conn-{peer}")
            self._connections[conn] = task
            task.add_done_callback(functools.partial(self._forget, conn, host))

    def _forget(self, conn: Connection, host: str, _task: asyncio.Task[None]) -> None:
        if self._connections.pop(conn, None) is not None and self.security is not None and self.security.limits:
            self.security.limits.release(host)

    # ---------------------------------------------------------------------------------------------- blocking work

    async def run_blocking(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run `fn(*args, **kwargs)` in the server's thread pool, keeping the event loop free."""
        loop = asyncio.get_running_loop()
        call = functools.partial(fn, *args, **kwargs) if kwargs else functools.partial(fn, *args)
        # The caller's context goes along: the request's session (mover.security.session) is read in the thread.
        return await loop.run_in_executor(self.executor, contextvars.copy_context().run, call)

    # ----------------------------------------------------------------------------------------------- ApiVersions

    def api_versions_response(self, version: int, correlation_id: int, request: dict[str, Any]) -> list[Chunk]:
        error = ErrorCode.NONE
        if version >= 3 and not (
            _SOFTWARE_NAME.fullmatch(request["client_software_name"])
            and _SOFTWARE_NAME.fullmatch(request["client_software_version"])
        ):
            # Kafka refuses client software names outside this pattern (ApiVersionsRequest.isValid, KIP-511) with
            # INVALID_REQUEST, still listing the versions it supports.
            error = ErrorCode.INVALID_REQUEST
        body = {"error_code": int(error), "api_keys": self.api_keys, "throttle_time_ms": 0}
        return encode_response(API_VERSIONS, version, correlation_id, body)

    def api_versions_error_response(self, correlation_id: int) -> list[Chunk]:
        body = {"error_code": int(ErrorCode.UNSUPPORTED_VERSION), "api_keys": self.api_keys}
        return encode_response(API_VERSIONS, 0, correlation_id, body)


# KIP-511's pattern for client_software_name and client_software_version.
_SOFTWARE_NAME = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")

_CURRENT: contextvars.ContextVar[Server] = contextvars.ContextVar("mover_server")


async def run_blocking(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """From inside a handler: run blocking `fn` in the serving Server's thread pool (else the loop's default pool)."""
    server = _CURRENT.get(None)
    if server is not None:
        return await server.run_blocking(fn, *args, **kwargs)
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(None, functools.partial(fn, *args, **kwargs))
