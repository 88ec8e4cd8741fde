"""One client connection: its socket's life, and the reader that admits each request and starts it in order.

Three kinds of task per connection: the reader (socket -> frames -> admission -> one handler task per request,
here), the handler tasks (they may finish in any order; how a handler runs is request_handler.py's), and the writer
(awaits the answers in arrival order and writes each; response_queue.py). Fast routes answer without a task, and a
lone request that arrives while the reader waits is admitted from the socket's readiness callback (`_on_data`), its
answer pushed from there (`ResponseQueue.send_now`) when nothing is queued before it. What a client may send, and
whether a run of requests may be admitted together, the gate decides (gate.py); what an API does with its requests,
its route (routes.py: its `fast`, `fast_many`, `encode`, and `repeats` for requests decoded once and recognised
again). Which earlier requests a new one waits for is decided here, as it is admitted: the order requests start in is
the reader's, the order answers leave in the writer's. Any fault that loses the framing or that Kafka answers by
hanging up (unknown API, unsupported version) ends this connection only.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
import time
from typing import TYPE_CHECKING, Any, NamedTuple

from mover.security.session import Session
from mover.security.tls import principal_name
from mover.server import auth
from mover.server.gate import EXPIRED_REASON, ConnectionGate, Verdict
from mover.server.request_handler import RequestHandler
from mover.server.response_queue import ALL_SENT, CLOSE, NOT_SENT, InFlightSlots, ResponseQueue, RunAnswers
from mover.server.routes import NOT_NOW, Body, Recogniser, ResolvedRoute
from mover.server.stream import PlainStream, TlsStream
from mover.wire import (
    API_BY_KEY,
    Chunk,
    DecodeError,
    FrameDecoder,
    FrameTooLarge,
    RequestHeader,
    UnsupportedRequest,
    decode_request_header,
    decode_struct,
)
from mover.wire.messages import API_VERSIONS

if TYPE_CHECKING:
    from mover.server.server import Server

log = logging.getLogger("mover.server")

# Requests larger than this take the handler's task even when their route has a fast path, and never make the reader
# wait for their predecessors: for a big request (a producer's large batch) reading the next one ahead while this
# one is written matters more than the task it would save, and fast paths are for small requests anyway.
FAST_PATH_MAX_FRAME = 128 * 1024

# Send answers to a connection nobody reads? Kafka closes connections idle for connections.max.idle.ms, 10 minutes.
DEFAULT_IDLE_TIMEOUT_S = 600.0


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
        self._slots = InFlightSlots(server.max_in_flight)
        # Ordering: a serial request waits for everything before it; a concurrent one waits for the last serial one.
        self._last_serial: asyncio.Future[Any] | None = None
        self._last_of_burst = False  # the request being admitted is the last of the frames read together
        self._since_serial: list[asyncio.Future[Any]] = []
        self._tasks: set[asyncio.Task[Any]] = set()
        self._closed = False
        self.listener = server.security
        self.stream: PlainStream | TlsStream = PlainStream(sock)
        self.stream.on_data = self._on_data
        # Handlers finish in any order, answers leave in request order: each is queued here as it is admitted.
        self._responses = ResponseQueue(sock, self.stream, self._slots, self._loop)
        host, port = (peer[0], peer[1]) if isinstance(peer, tuple) and len(peer) >= 2 else (str(peer), 0)
        self.session = Session(listener=server.listener_name, client_host=host, client_port=port)
        # However a request runs (on the loop, as a task, in a run), its handler is run, answered and reported alike.
        self._handler = RequestHandler(server, self.session, peer)
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
            await self._responses.write_loop()
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
        self.stream = self._responses.stream = stream
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
                            answers = (self._handler.run_many(route, items[k:])
                                       if len(items) - k >= 2 and not self._running() else [])
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
        (`ResponseQueue.send_now`): a client that sends one request and waits for its answer costs no wake-up of the
        reader task (a task step and a second loop turn with its own epoll_wait) per request. Anything else: False,
        and the reader takes the bytes the usual way. True also when the connection must close (queued here)."""
        if self._closed:
            return True  # closing: nothing read after the close is served (the reader would stop here too)
        if self._responses.pending or self._reserved or self._running():
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

    def _queue_run_answers(self, route: ResolvedRoute, items: list[tuple[RequestHeader, Body, float, int]],
                           answers: list[Any]) -> bool:
        """Encode what `fast_many` answered (`RequestHandler.finish`) and queue it as one finished answer (the writer
        sends the chunks in order, as it would have sent them one by one); False when the connection must close after
        them."""
        chunks: list[Chunk] = []
        open_ = True
        finish = self._handler.finish
        for (header, body, admitted, _size), answer in zip(items, answers, strict=True):
            result = finish(route, header, body, answer, admitted)
            if result is CLOSE:
                open_ = False
                break
            if result is not None:
                chunks.extend(result)
        fut = self._loop.create_future()
        fut.set_result(RunAnswers(chunks, len(answers)))
        self._follow(route, fut)
        return open_

    async def _recv_unless_idle(self, idle: float) -> bytes:
        """The next bytes; TimeoutError once nothing arrived for `idle` seconds while no answer was pending (a
        connection silent after its last answer idles out too, measured from when it went quiet)."""
        while True:
            try:
                return await self.stream.recv(idle)
            except TimeoutError:
                if not self._responses.pending:
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
                self._responses.queue_done(server.api_versions_error_response(h.correlation_id))
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
            self._responses.queue_done(server.api_versions_response(version, header.correlation_id, body))
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
            self._responses.queue_later(reply.delay_s, reply.chunks)
        elif reply.chunks is not None:
            self._responses.queue_done(reply.chunks)
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
            result = self._handler.run(route, header, body, admitted, route.fast)
            if result is CLOSE:
                return False
            if result is not NOT_NOW:
                # Straight to the socket only for the last request of what was read: answers to a burst of pipelined
                # requests still go out together through the writer.
                sent = (self._responses.send_now(result)
                        if result is not None and self._last_of_burst and not self._closed else NOT_SENT)
                if sent is ALL_SENT:
                    self._slots.release()
                if sent is not NOT_SENT:
                    return True
                task = self._loop.create_future()
                task.set_result(result)
                self._follow(route, task)
                return True
        handler = self._handler
        task = asyncio.create_task(handler.run_task(route, header, body, deps, admitted),
                                   context=handler.context.copy())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        self._follow(route, task)
        return True

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
        self._responses.queue(task)

    def _running(self) -> list[asyncio.Future[Any]]:
        """The requests admitted since the last serial one (itself included) that are still running: what a serial
        request must wait for. Empty: nothing earlier on the connection is running."""
        return [t for t in self._since_serial if not t.done()]

    def _enqueue_close(self) -> None:
        if not self._closed:
            self._closed = True
            self._responses.queue_done(CLOSE)

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
