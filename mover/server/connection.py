"""One client connection: read frames, dispatch them, write the answers back in request order.

Three kinds of task per connection: the reader (socket -> frames -> one handler task per request), the handler
tasks (they may finish in any order), and the writer (awaits the answers in arrival order and writes each). Fast
routes answer without a task, and a lone request that arrives while the reader waits is admitted from the socket's
readiness callback (`_on_data`), its answer pushed from there (`_push`) when nothing is queued before it. Every
handler, whichever way it runs (`_run`, `_run_task`, `_run_many`), runs in the connection's context (server and
session) and is answered through `_failed` and `_finish`. What a client may send, and whether a run of requests may
be admitted together, the gate decides (gate.py); what an API does with its requests, its route (routes.py: its
`fast`, `fast_many`, `encode`, and `repeats` for requests decoded once and recognised again). Any fault that loses
the framing or that Kafka answers by hanging up (unknown API, unsupported version) ends this connection only.
"""

from __future__ import annotations

import asyncio
import collections
import contextvars
import errno
import logging
import os
import socket
import ssl
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

from mover.security import session as sessions
from mover.security.session import Session
from mover.security.tls import principal_name
from mover.server import auth
from mover.server.gate import EXPIRED_REASON, ConnectionGate, Verdict
from mover.server.routes import NOT_NOW, Body, CloseConnection, Recogniser, ResolvedRoute
from mover.server.stream import PlainStream, TlsStream, send_file_slice
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

# Requests read from one connection but not yet answered. Kafka's broker stops reading a connection while one
# request is in flight (SocketServer mutes the channel); clients pipeline up to 5 by default
# (max.in.flight.requests.per.connection). We allow more overlap for read-only tools that pipeline deeply, and stop
# reading at this many so one client cannot queue unbounded work (each may be up to socket.request.max.bytes).
MAX_IN_FLIGHT = 64

# Answers already finished are sent together up to this many bytes: one syscall for a burst of small pipelined
# responses, without holding a large answer back behind a small one for long. 1 MiB is Kafka's default
# fetch.max.bytes-sized chunk of a response.
WRITE_COALESCE_BYTES = 1 << 20

# Requests larger than this take the handler's task even when their route has a fast path, and never make the reader
# wait for their predecessors: for a big request (a producer's large batch) reading the next one ahead while this
# one is written matters more than the task it would save, and fast paths are for small requests anyway.
FAST_PATH_MAX_FRAME = 128 * 1024

# Send answers to a connection nobody reads? Kafka closes connections idle for connections.max.idle.ms, 10 minutes.
DEFAULT_IDLE_TIMEOUT_S = 600.0


class _Close:
    """Writer instruction: send nothing more, close the connection."""


CLOSE: Any = _Close()


# What `_send_now` did with an answer.
_ALL_SENT, _QUEUED, _NOT_SENT = object(), object(), object()


class _Slots:
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


class _RunAnswers(NamedTuple):
    """The answers of a run of requests (Route.fast_many), queued as one: `count` requests' slots are released when
    the writer takes it."""

    chunks: list[Chunk]
    count: int


class _Later(NamedTuple):
    """A request to start once `deps` are done."""

    route: ResolvedRoute
    header: RequestHeader
    body: Body
    deps: list[asyncio.Future[Any]]
    admitted: float


class Connection:
    def __init__(self, server: Server, sock: socket.socket, peer: Any) -> None:
        self.server = server
        self.sock = sock
        self.peer = peer
        self._loop = asyncio.get_running_loop()
        self._frames = FrameDecoder(server.max_request_size)
        # The recognisers of repeated requests (Route.repeats) of the routes this connection has sent, made lazily.
        self._repeats: list[tuple[ResolvedRoute, Recogniser]] = []
        self._pending: collections.deque[asyncio.Future[Any]] = collections.deque()
        self._queued = asyncio.Event()
        self._slots = _Slots(server.max_in_flight)
        # Ordering: a serial request waits for everything before it; a concurrent one waits for the last serial one.
        self._last_serial: asyncio.Future[Any] | None = None
        self._writer_idle = False  # the writer waits for an answer to be queued: no write is in progress
        self._last_of_burst = False  # the request being admitted is the last of the frames read together
        self._since_serial: list[asyncio.Future[Any]] = []
        self._tasks: set[asyncio.Task[Any]] = set()
        self._closed = False
        self.listener = server.security
        self.stream: PlainStream | TlsStream = PlainStream(sock)
        self.stream.on_data = self._on_data
        host, port = (peer[0], peer[1]) if isinstance(peer, tuple) and len(peer) >= 2 else (str(peer), 0)
        self.session = Session(listener=server.listener_name, client_host=host, client_port=port)
        # What every handler of this connection runs in: the server (run_blocking's pool) and the session, set once.
        # A sync handler runs in it (`_run`), a task in a copy of it (`_run_task`).
        self._context = contextvars.copy_context()
        self._context.run(server._current.set, server)
        self._context.run(sessions.set_current, self.session)
        # Which requests may come now, and what SASL does to this connection: every rule is in the gate.
        self.gate = ConnectionGate(server.sasl_rules)
        self._who = f"{peer} on listener {server.listener_name}"
        self._reserved = 0  # bytes of queued.max.request.bytes held for the frame being read
        self._follow_gate_frame_limit()

    # ---------------------------------------------------------------------------------------------------- reading

    async def run(self) -> None:
        """Serve until the peer goes away, a fault closes the connection, or the server aborts it."""
        if self.listener is not None and self.listener.ssl_context is not None:
            if not await self._tls_handshake(self.listener.ssl_context):
                await self._shutdown()
                return
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

    async def _tls_handshake(self, context: ssl.SSLContext) -> bool:
        stream = TlsStream(self.sock, context)
        try:
            async with asyncio.timeout(self.server.idle_timeout):
                await stream.handshake()
        except TimeoutError:
            log.info("connection %s: no TLS handshake within %.0f s; closing it", self.peer, self.server.idle_timeout)
            return False
        except ssl.SSLError as e:
            # Plaintext to a TLS port, an untrusted or expired certificate: Kafka logs and closes (SslAuthentication).
            log.warning("connection %s: TLS handshake failed on listener %s: %s", self.peer,
                        self.server.listener_name, e.reason or e)
            return False
        except (ConnectionError, OSError) as e:
            log.info("connection %s: closed during the TLS handshake: %s", self.peer, e)
            return False
        self.stream = stream
        subject = principal_name(stream.peer_certificate())
        if subject is not None:
            # Kafka's default principal builder: the certificate's distinguished name, unless SASL names a user.
            self.session.principal = f"User:{subject}"
            log.info("connection %s: TLS client certificate, principal %s", self.peer, self.session.principal)
        return True

    async def _read_guarded(self) -> None:
        try:
            await self._read_loop()
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("connection %s: reader failed; closing it", self.peer)
            self._enqueue_close()

    async def _read_loop(self) -> None:
        idle = self.server.idle_timeout
        budget = self.listener.budget if self.listener is not None else None
        while not self._closed:
            if budget is not None and not await self._reserve(budget):
                self._enqueue_close()
                return
            try:
                data = await self._recv_unless_idle(idle)
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
            if frames and self._reserved and budget is not None:
                # The frame the reservation was for is complete (the first of these); later ones in the same recv
                # were at most one recv's worth of bytes.
                budget.release(self._reserved)
                self._reserved = 0
            last = len(frames) - 1
            i = 0
            while i <= last:
                if i < last and self.gate.admits_runs:
                    run = self._decode_run(frames, i)
                    if run is not None:
                        route, items = run
                        k = 0
                        while k < len(items):
                            # fast_many from here if two or more are left (and nothing earlier is running); the
                            # first request it does not take goes the usual way, then a run is tried after it.
                            answers = self._run_many(route, items[k:]) if len(items) - k >= 2 else []
                            if answers:
                                # Queued as one finished answer, holding a slot per request as one by one would
                                # (the writer gives them back together): the reader still stops at max_in_flight
                                # unanswered requests and lets the writer and other connections run.
                                for _ in answers:
                                    await self._slots.acquire()
                                open_ = self._queue_run_answers(route, items[k:k + len(answers)], answers)
                                k += len(answers)
                                if not open_:
                                    self._enqueue_close()
                                    return
                            if k < len(items):
                                if not await self._admit_one(i + k == last, None, (route, *items[k])):
                                    self._enqueue_close()
                                    return
                                k += 1
                        i += len(items)
                        continue
                if not await self._admit_one(i == last, frames[i], None):
                    self._enqueue_close()
                    return
                i += 1

    async def _admit_one(self, last_of_burst: bool, frame: bytes | None,
                         decoded: tuple[ResolvedRoute, RequestHeader, Body, float, int] | None) -> bool:
        """Admit one request (`frame`, or one `_decode_run` decoded); False when the connection must close."""
        await self._slots.acquire()
        self._last_of_burst = last_of_burst
        admitted = self._admit(frame) if decoded is None else self._start(*decoded)
        if isinstance(admitted, _Later):
            # Like Kafka's muted channel: read on once the requests before it are answered, then take the
            # fast path. Chaining a task behind a running one instead would make every later request of a
            # pipelining producer a task too, for as long as the pipeline stays full.
            await asyncio.wait(admitted.deps)
            admitted = self._start(admitted.route, admitted.header, admitted.body, admitted.admitted, 0)
        return bool(admitted)

    def _on_data(self, data: bytes) -> bool:
        """Bytes the stream read in its readiness callback while the reader waits for more (PlainStream.on_data).
        When they are exactly one request and nothing earlier on the connection is unanswered, the request is
        admitted here, in the loop turn that found the socket readable, and a fast answer goes out from here too
        (`_send_now`): a client that sends one request and waits for its answer costs no wake-up of the reader
        task (a task step and a second loop turn with its own epoll_wait) per request. Anything else: False, and
        the reader takes the bytes the usual way. True also when the connection must close (queued here)."""
        if self._closed:
            return True  # closing: nothing read after the close is served (the reader would stop here too)
        if self._pending or self._reserved or self._running():
            return False
        frame = self._frames.whole(data)
        if frame is None or not self._slots.take_now():
            return False
        self._last_of_burst = True
        try:
            # With nothing unanswered nothing is running, so this never has to wait (never a _Later).
            admitted = self._admit(frame)
        except Exception:
            log.exception("connection %s: reader failed; closing it", self.peer)
            admitted = False
        if not admitted:
            self._enqueue_close()
        return True

    def _decode_run(self, frames: list[bytes], start: int
                    ) -> tuple[ResolvedRoute, list[tuple[RequestHeader, Body, float, int]]] | None:
        """The requests from `frames[start]` on that may go to their route's `fast_many` together: consecutive, of
        one route that has it, small, well-formed and admitted. None when fewer than two qualify or something
        earlier on the connection is still running (the usual way then handles the frame, errors included)."""
        if self._closed or self._running():
            return None
        server = self.server
        gate = self.gate
        route: ResolvedRoute | None = None
        items: list[tuple[RequestHeader, Body, float, int]] = []
        for frame in frames[start:start + server.max_in_flight]:
            admitted = time.perf_counter()
            if len(frame) > FAST_PATH_MAX_FRAME:
                break
            try:
                header, _, offset = decode_request_header(frame, API_BY_KEY)
            except (UnsupportedRequest, DecodeError):
                break
            r = server.routes.get(header.api_key)
            version = header.api_version
            if (r is None or r.fast_many is None or r.concurrent or (route is not None and r is not route)
                    or not r.min_version <= version <= r.max_version
                    or gate.admit(header.api_key).verdict is not Verdict.SERVE):
                break
            api = r.api
            try:
                body = decode_struct(api.request, version, api.is_flexible(version), frame, offset)
            except DecodeError:
                break
            route = r
            items.append((header, body, admitted, len(frame)))
        if route is None or len(items) < 2:
            return None
        return route, items

    def _run_many(self, route: ResolvedRoute, items: list[tuple[RequestHeader, Body, float, int]]) -> list[Any]:
        """The route's `fast_many` on `items` if nothing earlier on the connection is running, in the connection's
        context: the answers of the prefix it took ([] when none). If it raises, each item gets `_failed`'s answer
        (logged once)."""
        if self._running():
            return []
        assert route.fast_many is not None
        try:
            return self._context.run(route.fast_many, [(h, b) for h, b, _a, _s in items])[:len(items)]
        except Exception as e:
            first = self._failed(route, items[0][0], items[0][1], e)
            return [first, *(self._error_answer(route, h, b) for h, b, _a, _s in items[1:])]

    def _queue_run_answers(self, route: ResolvedRoute, items: list[tuple[RequestHeader, Body, float, int]],
                           answers: list[Any]) -> bool:
        """Encode what `fast_many` answered (`_finish`) and queue it as one finished answer (the writer sends the
        chunks in order, as it would have sent them one by one); False when the connection must close after them."""
        chunks: list[Chunk] = []
        open_ = True
        for (header, body, admitted, _size), answer in zip(items, answers, strict=True):
            result = self._finish(route, header, body, answer, admitted)
            if result is CLOSE:
                open_ = False
                break
            if result is not None:
                chunks.extend(result)
        fut = self._loop.create_future()
        fut.set_result(_RunAnswers(chunks, len(answers)))
        self._follow(route, fut)
        return open_

    async def _recv_unless_idle(self, idle: float) -> bytes:
        """The next bytes; TimeoutError once nothing arrived for `idle` seconds while no answer was pending (a
        connection silent after its last answer idles out too, measured from when it went quiet)."""
        while True:
            try:
                return await self.stream.recv(idle)
            except TimeoutError:
                if not self._pending:
                    raise
                # Still answering (a long poll, a slow disk): not idle; wait again.

    async def _reserve(self, budget: Any) -> bool:
        """Hold the budget for the body of the frame being read before reading more of it (queued.max.request.bytes)."""
        need = self._frames.pending_size
        if need is None or self._reserved or need <= self._frames.buffered:
            return True
        try:
            await budget.acquire(need)
        except ValueError as e:
            log.warning("connection %s: %s; closing it", self.peer, e)
            return False
        self._reserved = need
        return True

    def _admit(self, frame: bytes) -> bool | _Later:
        """Decode one request and queue its answer; False means the connection must close; a _Later (a request
        with a fast path behind running ones it must follow) is started by the reader once those are done."""
        admitted = time.perf_counter()
        server = self.server
        gate = self.gate
        if gate.raw_tokens:
            # After a v0 SaslHandshake the tokens arrive as bare frames, without a request header.
            return self._apply(auth.answer_raw_token(gate, frame, self._who))
        for route, recogniser in self._repeats:
            hit = recogniser.match(frame)
            if hit is not None:
                if gate.admit(route.api.key).verdict is Verdict.SERVE:
                    return self._start(route, hit[0], hit[1], admitted, len(frame))
                break
        try:
            header, _, offset = decode_request_header(frame, API_BY_KEY)
        except UnsupportedRequest as e:
            h = e.header
            if h.api_key == API_VERSIONS.key and gate.admit(h.api_key).verdict is Verdict.SERVE:
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
        admission = gate.admit(header.api_key)
        if admission.verdict is not Verdict.SERVE:
            if admission.verdict is Verdict.CLOSE:
                # A session running out is routine (a client without KIP-368 support); anything else broke the rules.
                level = logging.INFO if admission.reason == EXPIRED_REASON else logging.WARNING
                log.log(level, "connection %s: api_key %d refused: %s; closing it", self._who, header.api_key,
                        admission.reason)
                return False
            return self._apply(auth.answer_sasl(gate, admission, header, frame, offset, self._who))
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
        if route.repeats is not None:
            self._recogniser(route).saw(frame, header, body)
        return self._start(route, header, body, admitted, len(frame))

    def _recogniser(self, route: ResolvedRoute) -> Recogniser:
        """The connection's recogniser of `route`'s repeats, made the first time it is needed."""
        for r, recogniser in self._repeats:
            if r is route:
                return recogniser
        assert route.repeats is not None
        recogniser = route.repeats()
        self._repeats.append((route, recogniser))
        return recogniser

    def _apply(self, reply: auth.SaslReply) -> bool:
        """Carry out what a SASL step decided; False when the connection must close after its answer."""
        if reply.principal is not None:
            self.session.principal = reply.principal
        self._follow_gate_frame_limit()
        if reply.delay_s > 0:
            self._queue_later(reply.delay_s, reply.chunks)
        elif reply.chunks is not None:
            self._queue_done(reply.chunks)
        return not reply.close

    def _follow_gate_frame_limit(self) -> None:
        # sasl.server.max.receive.size while (re-)authenticating, socket.request.max.bytes otherwise: a client
        # that has not proven who it is cannot make us allocate a large frame.
        limit = self.gate.frame_limit
        full = self.server.max_request_size
        self._frames.max_size = full if limit is None else min(limit, full)

    def _start(self, route: ResolvedRoute, header: RequestHeader, body: Body, admitted: float,
               size: int = 0) -> bool | _Later:
        deps: list[asyncio.Future[Any]]
        if route.concurrent:
            deps = [self._last_serial] if self._last_serial is not None and not self._last_serial.done() else []
        else:
            deps = self._running()
        task: asyncio.Future[Any]
        fast = route.fast is not None and size <= FAST_PATH_MAX_FRAME
        if fast and deps and not route.concurrent:
            return _Later(route, header, body, deps, admitted)
        if fast and not deps:
            result = self._run(route, header, body, admitted, route.fast)
            if result is CLOSE:
                return False
            if result is not NOT_NOW:
                sent = self._send_now(result) if result is not None else _NOT_SENT
                if sent is _ALL_SENT:
                    self._slots.release()
                if sent is not _NOT_SENT:
                    return True
                task = self._loop.create_future()
                task.set_result(result)
                self._follow(route, task)
                return True
        task = asyncio.create_task(self._run_task(route, header, body, deps, admitted), context=self._context.copy())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        self._follow(route, task)
        return True

    def _send_now(self, chunks: list[Chunk]) -> object:
        """Write a finished answer straight to the socket when it is the last request of what was read, nothing is
        queued before it and the writer is idle (so no write is in progress): saves the writer's wake-up, a loop
        turn per request. Answers to a burst of pipelined requests still go out together through the writer.
        _ALL_SENT; _QUEUED (part went out, or a socket error the writer then meets: the rest is queued first in
        line and takes the request's slot); or _NOT_SENT (nothing tried: TLS, a write in progress)."""
        if (not self._last_of_burst or self._pending or not self._writer_idle or not self.stream.sends_files
                or self._closed):
            return _NOT_SENT
        try:
            if self._push(chunks):
                return _ALL_SENT
        except OSError:
            pass  # a dead socket: the writer meets the error with what is left
        self._queue_done(chunks)
        return _QUEUED

    def _push(self, chunks: list[Chunk]) -> bool:
        """Send what the socket takes now, without waiting: True when all of `chunks` went out, else False with
        `chunks` cut down (in place) to what is left. File regions go out with sendfile (the bytes never enter
        Python) and are closed once sent; the bytes before a region are sent with MSG_MORE, so the header and the
        records leave as full segments and the client is woken once for them, not for the header alone.

        Raises:
            OSError: the socket failed, or a record file is shorter than its slice (framing would be lost).
        """
        sock = self.sock
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

    def _follow(self, route: ResolvedRoute, task: asyncio.Future[Any]) -> None:
        """Queue the answer of an admitted request and note it for the ordering of later ones."""
        if route.concurrent:
            # Drop finished ones: a connection that only ever sends concurrent requests (a consumer's fetches) would
            # otherwise keep every answer it was ever sent alive here, and a Fetch answer holds an open fd.
            self._since_serial = self._running()
            self._since_serial.append(task)
        else:
            self._last_serial = task
            self._since_serial = [task]
        self._queue(task)

    def _running(self) -> list[asyncio.Future[Any]]:
        """The requests admitted since the last serial one (itself included) that are still running: what a serial
        request must wait for. Empty: nothing earlier on the connection is running."""
        return [t for t in self._since_serial if not t.done()]

    def _queue(self, fut: asyncio.Future[Any]) -> None:
        self._pending.append(fut)
        self._queued.set()

    def _queue_done(self, result: Any) -> None:
        fut = self._loop.create_future()
        fut.set_result(result)
        self._queue(fut)

    def _queue_later(self, delay: float, result: Any) -> None:
        """Queue an answer that is sent `delay` seconds from now, without holding up the loop."""
        fut = self._loop.create_future()
        self._loop.call_later(delay, lambda: fut.done() or fut.set_result(result))
        self._queue(fut)

    def _enqueue_close(self) -> None:
        if not self._closed:
            self._closed = True
            self._queue_done(CLOSE)

    # ------------------------------------------------------------------------------------------------ dispatching

    # Every handler runs through `_run` (on the loop: `fast`), `_run_task` (a task: `handler`) or `_run_many` (on
    # the loop: `fast_many`), in the connection's `_context`; a raise becomes `_failed`'s answer, and every answer is
    # encoded and reported to the request observer by `_finish`.

    def _run(self, route: ResolvedRoute, header: RequestHeader, body: Body, admitted: float,
             call: Callable[[RequestHeader, Body], Any]) -> Any:
        """`call` (the route's `fast`) on the loop: encoded chunks, None (no answer), CLOSE, or NOT_NOW (it could not
        answer without waiting; nothing was done, nothing is reported). Never raises."""
        try:
            response = self._context.run(call, header, body)
        except Exception as e:
            response = self._failed(route, header, body, e)
        if response is NOT_NOW:
            return NOT_NOW
        return self._finish(route, header, body, response, admitted)

    async def _run_task(
        self, route: ResolvedRoute, header: RequestHeader, body: Body, deps: list[Any], admitted: float
    ) -> Any:
        """The route's handler, once `deps` are done: as `_run`, without NOT_NOW; CLOSE if cancelled."""
        if deps:
            await asyncio.wait(deps)
        try:
            if route.is_async:
                response = await route.handler(header, body)  # type: ignore[misc]
            else:
                response = await self.server.run_blocking(route.handler, header, body)
        except asyncio.CancelledError:
            response = CLOSE
        except Exception as e:
            response = self._failed(route, header, body, e)
        return self._finish(route, header, body, response, admitted)

    def _failed(self, route: ResolvedRoute, header: RequestHeader, body: Body, e: Exception) -> Any:
        """What a handler that raised `e` answers: CLOSE for CloseConnection, else the route's error answer (CLOSE
        where it has none). Called while `e` is handled (its traceback is logged)."""
        if isinstance(e, CloseConnection):
            log.info("connection %s: closing it after %s v%d: %s", self.peer, route.api.name, header.api_version, e)
            return CLOSE
        log.exception("connection %s: %s v%d handler failed", self.peer, route.api.name, header.api_version)
        return self._error_answer(route, header, body)

    def _finish(self, route: ResolvedRoute, header: RequestHeader, body: Body, response: Any, admitted: float) -> Any:
        """The handler's `response` encoded (None and CLOSE as they are; CLOSE if it cannot be answered), the request
        reported to the server's request observer."""
        try:
            result = response if response is None or response is CLOSE else self._encode(route, header, body, response)
        except Exception:
            log.exception("connection %s: failed to answer %s v%d", self.peer, route.api.name, header.api_version)
            result = CLOSE
        observer = self.server.request_observer
        if observer is not None:
            try:
                observer(route.api.name, time.perf_counter() - admitted)
            except Exception:
                log.exception("request observer failed")
        return result

    def _encode(self, route: ResolvedRoute, header: RequestHeader, body: Body, response: Body) -> Any:
        """The answer's chunks; the error answer if the handler's cannot be encoded; CLOSE if neither can."""
        api = route.api
        version = header.api_version
        try:
            if route.encode is not None:
                chunks = route.encode(version, header.correlation_id, response)
                if chunks is not None:
                    return chunks
            return encode_response(api, version, header.correlation_id, response)
        except EncodeError:
            log.exception(
                "connection %s: %s v%d handler returned an unencodable response", self.peer, api.name, version
            )
            fallback = self._error_answer(route, header, body)
            if fallback is CLOSE:
                return CLOSE
            return encode_response(api, version, header.correlation_id, fallback)

    @staticmethod
    def _error_answer(route: ResolvedRoute, header: RequestHeader, body: Body) -> Any:
        """The route's error answer to the request (UNKNOWN_SERVER_ERROR); CLOSE where it has none."""
        response = None if route.error_response is None else route.error_response(
            header.api_version, body, int(ErrorCode.UNKNOWN_SERVER_ERROR))
        return CLOSE if response is None else response

    # ---------------------------------------------------------------------------------------------------- writing

    async def _write_loop(self) -> None:
        pending = self._pending
        while True:
            if not pending:
                self._queued.clear()
                self._writer_idle = True
                try:
                    await self._queued.wait()
                finally:
                    self._writer_idle = False
                continue
            result = await pending[0]
            pending.popleft()
            self._slots.release()
            if result is CLOSE:
                return
            if result is None:
                continue
            if type(result) is _RunAnswers:
                result = self._release_run(result)
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
                    if type(nxt) is _RunAnswers:
                        nxt = self._release_run(nxt)
                    batch.extend(nxt)
                    size += _size(nxt)
            await self._send(batch)

    def _release_run(self, run: _RunAnswers) -> list[Chunk]:
        for _ in range(run.count - 1):  # the first was released with the entry, as for any answer
            self._slots.release()
        return run.chunks

    async def _send(self, chunks: list[Chunk]) -> None:
        if not self.stream.sends_files:
            await self._send_through_stream(chunks)
            return
        while not self._push(chunks):
            await self._writable()

    async def _send_through_stream(self, chunks: list[Chunk]) -> None:
        """TLS encrypts in user space: bytes go through the stream, file data a chunk at a time."""
        run: list[bytes] = []
        for c in chunks:
            if isinstance(c, FileRegion):
                if run:
                    await self.stream.sendall(b"".join(run))
                    run = []
                await send_file_slice(self.stream, c.fd, c.position, c.length)
            else:
                run.append(c)
        if run:
            await self.stream.sendall(b"".join(run))

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
        if self._reserved and self.listener is not None and self.listener.budget is not None:
            self.listener.budget.release(self._reserved)
            self._reserved = 0
        for t in list(self._tasks):
            t.cancel()
        if self._tasks:
            await asyncio.wait(list(self._tasks))
        self.stream.detach()
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
