"""MetricsExporter: the Prometheus text endpoint on `metrics.listener`, on a thread of its own (never on the asyncio
loop that serves Kafka clients).

The listener is open to whoever can reach the port, so what one client can hold is bounded (docs/operations.md):
* one asyncio loop reads every connection's request head: a slow or silent client (`GET /metr` and nothing more)
  costs a socket, not a thread, and is closed after REQUEST_TIMEOUT_S;
* at most MAX_CONNECTIONS are open; one more closes the oldest connection still sending its request, so a flood of
  idle sockets cannot keep a real scrape (whose request arrives whole at once) out;
* the page is rendered on RENDER_THREADS threads (the collectors read the broker's in-memory state), a listen
  backlog of BACKLOG absorbs bursts of connects;
* one request per connection (`Connection: close`), a request head of at most MAX_HEAD_BYTES.
"""

from __future__ import annotations

import asyncio
import gzip
import logging
import socket
import threading
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import parse_qs, urlsplit

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

log = logging.getLogger(__name__)

MAX_CONNECTIONS = 128
REQUEST_TIMEOUT_S = 5.0
# Writing the answer to a client that does not read it: given up after this long.
WRITE_TIMEOUT_S = 10.0
RENDER_THREADS = 2
BACKLOG = 1024
MAX_HEAD_BYTES = 8192

_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
            431: "Request Header Fields Too Large"}


class MetricsExporter:
    def __init__(self, registry: CollectorRegistry, host: str, port: int, *,
                 max_connections: int = MAX_CONNECTIONS, request_timeout_s: float = REQUEST_TIMEOUT_S) -> None:
        self.registry = registry
        self.host = host
        self.port = port
        self.max_connections = max_connections
        self.request_timeout_s = request_timeout_s
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._server: asyncio.Server | None = None
        # Open connections in the order they were accepted; the value says whether the request is still arriving.
        self._conns: dict[asyncio.StreamWriter, bool] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def connections(self) -> int:
        """Connections open now (read from any thread; for tests and the curious)."""
        return len(self._conns)

    def start(self) -> None:
        """Bind and serve. Raises OSError when the address cannot be bound."""
        sock = _bind(self.host, self.port)
        self.port = int(sock.getsockname()[1])
        self._pool = ThreadPoolExecutor(RENDER_THREADS, thread_name_prefix="metrics-render")
        loop = self._loop = asyncio.new_event_loop()
        try:
            self._server = loop.run_until_complete(
                asyncio.start_server(self._serve, sock=sock, limit=MAX_HEAD_BYTES, backlog=BACKLOG))
        except BaseException:
            sock.close()
            loop.close()
            raise
        self._thread = threading.Thread(target=loop.run_forever, name="metrics-http", daemon=True)
        self._thread.start()
        log.info("metrics on http://%s:%d/metrics", self.host, self.port)

    def stop(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        asyncio.run_coroutine_threadsafe(self._close(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
        self._loop = self._thread = self._pool = self._server = None

    async def _close(self) -> None:
        if self._server is not None:
            self._server.close()
        for writer in list(self._conns):
            writer.close()
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=WRITE_TIMEOUT_S)

    # ------------------------------------------------------------------ one connection

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        self._conns[writer] = True
        if len(self._conns) > self.max_connections:
            self._evict(writer)
        try:
            try:
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), self.request_timeout_s)
            except asyncio.LimitOverrunError:
                await self._answer(writer, 431, b"request head too large\n")
                return
            except (TimeoutError, asyncio.IncompleteReadError, ConnectionError):
                return  # too slow, or gone: nothing to answer
            self._conns[writer] = False
            status, body, content_type, extra = await self._respond(head)
            await self._answer(writer, status, body, content_type, extra)
        except (TimeoutError, ConnectionError):
            pass
        finally:
            self._conns.pop(writer, None)
            writer.close()

    def _evict(self, newest: asyncio.StreamWriter) -> None:
        oldest = next((w for w, reading in self._conns.items() if reading and w is not newest), None)
        (oldest or newest).close()  # its read ends and its task cleans up
        self._conns.pop(oldest or newest, None)

    async def _respond(self, head: bytes) -> tuple[int, bytes, str, str]:
        """As prometheus-client's own handler answers: any path but /favicon.ico, `name[]` filters, the format
        the Accept header asks for, gzip when accepted."""
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/"):
            return 400, b"bad request line\n", "text/plain", ""
        method, target = parts[0], parts[1]
        if method not in ("GET", "HEAD"):
            return 405, b"only GET\n", "text/plain", ""
        url = urlsplit(target)
        if url.path == "/favicon.ico":
            return 404, b"", "text/plain", ""
        headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
        names = parse_qs(url.query).get("name[]", [])
        compress = "gzip" in headers.get("accept-encoding", "")
        assert self._loop is not None and self._pool is not None
        body, content_type = await self._loop.run_in_executor(
            self._pool, self._render, headers.get("accept", ""), names, compress)
        return 200, (body if method == "GET" else b""), content_type, "Content-Encoding: gzip\r\n" if compress else ""

    def _render(self, accept: str, names: list[str], compress: bool) -> tuple[bytes, str]:
        encoder, content_type = choose_encoder(accept)
        registry = self.registry.restricted_registry(names) if names else self.registry
        body = encoder(registry)
        return (gzip.compress(body) if compress else body), content_type

    async def _answer(self, writer: asyncio.StreamWriter, status: int, body: bytes,
                      content_type: str = "text/plain", extra: str = "") -> None:
        writer.write(f"HTTP/1.1 {status} {_REASONS[status]}\r\nContent-Type: {content_type}\r\n{extra}"
                     f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body)
        await asyncio.wait_for(writer.drain(), WRITE_TIMEOUT_S)


def _bind(host: str, port: int) -> socket.socket:
    """A listening socket on the first address `host` resolves to (an IPv6 literal or name too)."""
    family, kind, proto, _, address = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM,
                                                         flags=socket.AI_PASSIVE)[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(BACKLOG)
    except OSError:
        sock.close()
        raise
    sock.setblocking(False)
    return sock
