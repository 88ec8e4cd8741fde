"""A TCP proxy in front of a broker that resets chosen connections at a chosen request: a broker that goes down in
the middle of a client's handshake, placed exactly instead of by racing a restart against the client.

    with ResettingProxy(("127.0.0.1", broker_port), reset={2: 1}) as proxy:   # 2nd connection, at its 1st request
        proxy.port                  # listens on 127.0.0.1, a free port: advertise it as the broker's
        proxy.reset_api_keys        # [18]: the api key of each request it reset a connection on (18 = ApiVersions)

Connections are numbered in the order accepted (1 = the first). A doomed connection's earlier requests and their
answers pass through; the chosen request is read whole, not forwarded, and the client's socket is closed with
SO_LINGER 0, so the client sees "Connection reset by peer" after sending it, as from a broker killed mid-request.
Every other byte is forwarded unchanged, both ways. One thread per direction per connection.
"""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Callable, Mapping
from types import TracebackType

from mover.testing.raw import SOCKET_TIMEOUT_S

_RECV_CHUNK = 65536
# Kafka's request header starts with the api key (int16), right after the frame's int32 size.
_SIZE = struct.Struct(">i")
_API_KEY = struct.Struct(">h")


class ResettingProxy:
    def __init__(self, target: tuple[str, int], reset: Mapping[int, int] | None = None) -> None:
        self.target = target
        self.reset = dict(reset or {})  # connection number -> the request number (1 = first) it is reset on
        self.accepted = 0
        self.reset_api_keys: list[int] = []
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._threads: list[threading.Thread] = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._closed = False

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def __enter__(self) -> ResettingProxy:
        self._spawn(self._accept_loop)
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            socks = [self._listener, *self._open]
        for s in socks:
            # close() alone leaves a thread blocked in accept() or recv() on the socket; shutdown wakes it.
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()
        for t in self._threads:
            t.join(SOCKET_TIMEOUT_S)

    # ------------------------------------------------------------------ internals

    def _spawn(self, target: Callable[..., None], *args: object) -> None:
        t = threading.Thread(target=target, args=args, daemon=True, name="resetting-proxy")
        self._threads.append(t)
        t.start()

    def _track(self, sock: socket.socket) -> bool:
        with self._lock:
            if self._closed:
                sock.close()
                return False
            self._open.add(sock)
            return True

    def _accept_loop(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            if not self._track(client):
                return
            with self._lock:
                self.accepted += 1
                number = self.accepted
            self._spawn(self._serve, client, self.reset.get(number))

    def _serve(self, client: socket.socket, reset_at: int | None) -> None:
        try:
            upstream = socket.create_connection(self.target, timeout=SOCKET_TIMEOUT_S)
        except OSError:
            self._drop(client, reset=True)
            return
        if not self._track(upstream):
            self._drop(client, reset=True)
            return
        # No timeouts: a polling client may be quiet for long; close() wakes every blocked thread.
        client.settimeout(None)
        upstream.settimeout(None)
        self._spawn(self._pump, upstream, client)
        if reset_at is None:
            self._pump(client, upstream)
            return
        buffered = b""
        for request in range(1, reset_at + 1):
            frame, buffered = _read_frame(client, buffered)
            if frame is None:
                break  # the client left first
            if request < reset_at:
                upstream.sendall(frame)
                continue
            with self._lock:
                self.reset_api_keys.append(_API_KEY.unpack_from(frame, _SIZE.size)[0])
        self._drop(client, reset=True)
        self._drop(upstream, reset=False)

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while chunk := src.recv(_RECV_CHUNK):
                dst.sendall(chunk)
        except OSError:
            pass  # either side went away: the other is closed below
        self._drop(dst, reset=False)
        self._drop(src, reset=False)

    def _drop(self, sock: socket.socket, *, reset: bool) -> None:
        with self._lock:
            self._open.discard(sock)
        try:
            if reset:
                # Linger 0: close() sends RST, not FIN, so the peer's recv fails with ECONNRESET. No shutdown first:
                # it would send a FIN the peer could read as a clean EOF before the reset arrives.
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            else:
                # Wakes the thread pumping the other way, which may be blocked in recv() on this socket.
                sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass  # already closed by the other direction's thread
        sock.close()


def _read_frame(sock: socket.socket, buffered: bytes) -> tuple[bytes | None, bytes]:
    """One size-prefixed frame (size included) and the bytes read past it; None at EOF."""
    data = buffered
    while True:
        if len(data) >= _SIZE.size:
            end = _SIZE.size + _SIZE.unpack_from(data)[0]
            if len(data) >= end:
                return data[:end], data[end:]
        try:
            chunk = sock.recv(_RECV_CHUNK)
        except OSError:
            return None, b""
        if not chunk:
            return None, b""
        data += chunk
