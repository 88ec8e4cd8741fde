"""One client connection: read frames, dispatch them, write the answers back in request order.

Three kinds of task per connection: the reader (socket -> frames -> one dispatch task per request), the dispatch
tasks (the handlers; they may finish in any order), and the writer (awaits the dispatch tasks in arrival order and
writes each answer). Any fault that loses the framing or that Kafka answers by hanging up (unknown API, unsupported
version) ends this connection only.
"""

from __future__ import annotations

import asyncio
import collections
import errno
import logging
import os
import socket
import time
from typing import TYPE_CHECKING, Any

from mover.server.routes import Body, CloseConnection, ResolvedRoute
from mover.wire import (
    API_BY_KEY,
    Chunk,
    DecodeError,
    EncodeError,
    ErrorCode,
    FileRegion,
    FrameDecoder,
    FrameTooLarge,
    RequestHeader,
    UnsupportedRequest,
    decode_request_header,
    decode_struct,
    encode_response,
    frame_length,
)
from mover.wire.messages import API_VERSIONS

if TYPE_CHECKING:
    from mover.server.server import Server

log = logging.getLogger("mover.server")

# Bytes asked of each recv. 64 KiB is the usual socket buffer and what asyncio's own streams read at a time
# (asyncio.streams._DEFAULT_LIMIT); large produce requests simply take several reads.
RECV_SIZE = 64 * 1024

# Requests read from one connection but not yet answered. Kafka's broker stops reading a connection while one
# request is in flight (SocketServer mutes the channel); clients pipeline up to 5 by default
# (max.in.flight.requests.per.connection). We allow more overlap for read-only tools that pipeline deeply, and stop
# reading at this many so one client cannot queue unbounded work (each may be up to socket.request.max.bytes).
MAX_IN_FLIGHT = 64

# Answers already finished are sent together up to this many bytes: one syscall for a burst of small pipelined
# responses, without holding a large answer back behind a small one for long. 1 MiB is Kafka's default
# fetch.max.bytes-sized chunk of a response.
WRITE_COALESCE_BYTES = 1 << 20

# Send answers to a connection nobody reads? Kafka closes connections idle for connections.max.idle.ms, 10 minutes.
DEFAULT_IDLE_TIMEOUT_S = 600.0


class _Close:
    """Writer instruction: send nothing more, close the connection."""


CLOSE: Any = _Close()


class Connection:
    def __init__(self, server: Server, sock: socket.socket, peer: Any) -> None:
        self.server = server
        self.sock = sock
        self.peer = peer
        self._loop = asyncio.get_running_loop()
        self._frames = FrameDecoder(server.max_request_size)
        self._pending: collections.deque[asyncio.Future[Any]] = collections.deque()
        self._queued = asyncio.Event()
        self._slots = asyncio.Semaphore(server.max_in_flight)
        # Ordering: a serial request waits for everything before it; a concurrent one waits for the last serial one.
        self._last_serial: asyncio.Future[Any] | None = None
        self._since_serial: list[asyncio.Future[Any]] = []
        self._tasks: set[asyncio.Task[Any]] = set()
        self._closed = False

    # ---------------------------------------------------------------------------------------------------- reading

    async def run(self) -> None:
        """Serve until the peer goes away, a fault closes the connection, or the server aborts it."""
        reader = asyncio.create_task(self._read_guarded(), name=f"mover-reader-{self.peer}")
        try:
            # The writer decides when the connection ends: at a CLOSE, queued behind every earlier answer.
            await self._write_loop()
        except (ConnectionError, OSError) as e:
            log.debug("connection %s: %s", self.peer, e)
        except asyncio.CancelledError:
            pass
        finally:
            reader.cancel()
            await asyncio.wait([reader])
            await self._shutdown()

    async def _read_guarded(self) -> None:
        try:
            await self._read_loop()
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("connection %s: reader failed; closing it", self.peer)
            self._enqueue_close()

    async def _read_loop(self) -> None:
        loop = self._loop
        idle = self.server.idle_timeout
        while not self._closed:
            try:
                async with asyncio.timeout(idle if not self._pending else None):
                    data = await loop.sock_recv(self.sock, RECV_SIZE)
            except TimeoutError:
                log.info("connection %s: idle for %.0f s, closing", self.peer, idle)
                self._enqueue_close()
                return
            except (ConnectionError, OSError) as e:
                log.debug("connection %s: read failed: %s", self.peer, e)
                self._enqueue_close()
                return
            if not data:
                self._enqueue_close()
                return
            try:
                frames = self._frames.feed(data)
            except FrameTooLarge as e:
                log.warning("connection %s: %s; closing it", self.peer, e)
                self._enqueue_close()
                return
            except DecodeError as e:
                log.warning("connection %s: malformed frame (%s); closing it", self.peer, e)
                self._enqueue_close()
                return
            for frame in frames:
                await self._slots.acquire()
                if not self._admit(frame):
                    self._enqueue_close()
                    return

    def _admit(self, frame: bytes) -> bool:
        """Decode one request and queue its answer; False means the connection must close."""
        admitted = time.perf_counter()
        server = self.server
        try:
            header, _, offset = decode_request_header(frame, API_BY_KEY)
        except UnsupportedRequest as e:
            h = e.header
            if h.api_key == API_VERSIONS.key:
                # KIP-511: a client newer than us sends a version we do not know; answer in v0 so it can read the
                # error and the versions we do support, and retry lower.
                self._queue_done(server.api_versions_error_response(h.correlation_id))
                return True
            log.warning(
                "connection %s: unsupported api_key %d version %d; closing it", self.peer, h.api_key, h.api_version
            )
            return False
        except DecodeError as e:
            log.warning("connection %s: malformed request header (%s); closing it", self.peer, e)
            return False
        version = header.api_version
        if header.api_key == API_VERSIONS.key:
            try:
                body = decode_struct(API_VERSIONS.request, version, API_VERSIONS.is_flexible(version), frame, offset)
            except DecodeError as e:
                log.warning("connection %s: malformed ApiVersions request (%s); closing it", self.peer, e)
                return False
            self._queue_done(server.api_versions_response(version, header.correlation_id, body))
            return True
        route = server.routes.get(header.api_key)
        if route is None or not route.min_version <= version <= route.max_version:
            log.warning(
                "connection %s: api_key %d version %d not served; closing it", self.peer, header.api_key, version
            )
            return False
        api = route.api
        try:
            body = decode_struct(api.request, version, api.is_flexible(version), frame, offset)
        except DecodeError as e:
            log.warning("connection %s: malformed %s v%d request (%s); closing it", self.peer, api.name, version, e)
            return False
        deps: list[asyncio.Future[Any]]
        if route.concurrent:
            deps = [self._last_serial] if self._last_serial is not None else []
        else:
            deps = list(self._since_serial)
        task = asyncio.create_task(self._dispatch(route, header, body, deps, admitted))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        if route.concurrent:
            # Drop finished ones: a connection that only ever sends concurrent requests (a consumer's fetches) would
            # otherwise keep every answer it was ever sent alive here, and a Fetch answer holds an open fd.
            self._since_serial = [t for t in self._since_serial if not t.done()]
            self._since_serial.append(task)
        else:
            self._last_serial = task
            self._since_serial = [task]
        self._queue(task)
        return True

    def _queue(self, fut: asyncio.Future[Any]) -> None:
        self._pending.append(fut)
        self._queued.set()

    def _queue_done(self, result: Any) -> None:
        fut = self._loop.create_future()
        fut.set_result(result)
        self._queue(fut)

    def _enqueue_close(self) -> None:
        if not self._closed:
            self._closed = True
            self._queue_done(CLOSE)

    # ------------------------------------------------------------------------------------------------ dispatching

    async def _dispatch(
        self, route: ResolvedRoute, header: RequestHeader, body: Body, deps: list[Any], admitted: float
    ) -> Any:
        """Run the handler and encode its answer: chunks, None (no answer), or CLOSE. Never raises."""
        if deps:
            await asyncio.wait(deps)
        server = self.server
        token = server._current.set(server)
        api = route.api
        version = header.api_version
        try:
            try:
                if route.is_async:
                    response = await route.handler(header, body)  # type: ignore[misc]
                else:
                    response = await server.run_blocking(route.handler, header, body)
            except asyncio.CancelledError:
                raise
            except CloseConnection as e:
                log.info("connection %s: closing it after %s v%d: %s", self.peer, api.name, version, e)
                return CLOSE
            except Exception:
                log.exception("connection %s: %s v%d handler failed", self.peer, api.name, version)
                response = self._error_response(route, header, body)
                if response is None:
                    return CLOSE
            if response is None:
                return None
            try:
                return encode_response(api, version, header.correlation_id, response)
            except EncodeError:
                log.exception(
                    "connection %s: %s v%d handler returned an unencodable response", self.peer, api.name, version
                )
                fallback = self._error_response(route, header, body)
                if fallback is None:
                    return CLOSE
                return encode_response(api, version, header.correlation_id, fallback)
        except asyncio.CancelledError:
            return CLOSE
        except Exception:
            log.exception("connection %s: failed to answer %s v%d", self.peer, api.name, version)
            return CLOSE
        finally:
            server._current.reset(token)
            if server.request_observer is not None:
                try:
                    server.request_observer(api.name, time.perf_counter() - admitted)
                except Exception:
                    log.exception("request observer failed")

    @staticmethod
    def _error_response(route: ResolvedRoute, header: RequestHeader, body: Body) -> Body | None:
        if route.error_response is None:
            return None
        return route.error_response(header.api_version, body, int(ErrorCode.UNKNOWN_SERVER_ERROR))

    # ---------------------------------------------------------------------------------------------------- writing

    async def _write_loop(self) -> None:
        pending = self._pending
        while True:
            if not pending:
                self._queued.clear()
                await self._queued.wait()
                continue
            result = await pending[0]
            pending.popleft()
            self._slots.release()
            if result is CLOSE:
                return
            if result is None:
                continue
            batch: list[Chunk] = list(result)
            size = _size(batch)
            # Answers that are already finished go out with this one: pipelined small responses, one syscall.
            while pending and pending[0].done() and size < WRITE_COALESCE_BYTES:
                nxt = pending[0].result()
                if nxt is CLOSE:
                    break
                pending.popleft()
                self._slots.release()
                if nxt is not None:
                    batch.extend(nxt)
                    size += _size(nxt)
            await self._send(batch)

    async def _send(self, chunks: list[Chunk]) -> None:
        loop = self._loop
        run: list[bytes] = []
        for c in chunks:
            if isinstance(c, FileRegion):
                if run:
                    await loop.sock_sendall(self.sock, b"".join(run))
                    run = []
                await self._send_region(c)
            else:
                run.append(c)
        if run:
            await loop.sock_sendall(self.sock, b"".join(run))

    async def _send_region(self, region: FileRegion) -> None:
        """Send record data from its file with sendfile: the bytes never enter Python."""
        fd, length = region.fd, region.length
        out = self.sock.fileno()
        offset = region.position
        remaining = length
        while remaining:
            try:
                sent = os.sendfile(out, fd, offset, remaining)
            except BlockingIOError:
                await self._writable()
                continue
            except OSError as e:
                if e.errno in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP) and remaining == length:
                    # Not every file system sends from files; fall back to reading the slice.
                    data = os.pread(fd, remaining, offset)
                    if len(data) != remaining:
                        raise ConnectionError("record file shorter than its slice") from None
                    await self._loop.sock_sendall(self.sock, data)
                    return
                raise
            if sent == 0:
                # The file ends before the slice does: the frame length is already on the wire, so framing is lost.
                raise ConnectionError("record file shorter than its slice")
            offset += sent
            remaining -= sent

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

    # --------------------------------------------------------------------------------------------------- shutdown

    async def _shutdown(self) -> None:
        self._closed = True
        for t in list(self._tasks):
            t.cancel()
        if self._tasks:
            await asyncio.wait(list(self._tasks))
        try:
            self.sock.close()
        except OSError:
            pass

    def abort(self) -> None:
        """Close the socket now (server shutdown); `run` then finishes."""
        self._closed = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def _size(chunks: list[Chunk]) -> int:
    return frame_length(chunks)
