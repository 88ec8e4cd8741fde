"""Requests answered in the loop turn that found them (Connection._on_data, PlainStream.on_data) and answers pushed
without waiting (ResponseQueue.send_now, stream.py's push): a client sending one request at a time is served from the
socket's readiness callback, without the reader task; a fetch answer's records go out with sendfile from there too,
the rest (a full socket buffer) by the writer; the bytes before a file region carry MSG_MORE; the idle timeout still
counts from the last request."""

from __future__ import annotations

import asyncio
import os
import socket
import time
from typing import Any

import pytest

import mover.server.stream as stream_module
from mover.server import Route
from mover.server.stream import push
from mover.testing.server import serve
from mover.testing.wait import wait_for
from mover.wire import FileRegion, RequestHeader, decode_response, encode_response, join_chunks
from mover.wire.messages import FETCH, PRODUCE

Body = dict[str, Any]


def test_one_request_at_a_time_is_answered_from_the_readiness_callback() -> None:
    tasks: list[asyncio.Task[Any] | None] = []

    async def slow(header: RequestHeader, request: Body) -> Body:
        raise AssertionError("the fast path answers every request here")

    def fast(header: RequestHeader, request: Body) -> Body:
        tasks.append(asyncio.current_task())
        return {"responses": [], "throttle_time_ms": request["timeout_ms"]}

    with serve({PRODUCE.key: Route(slow, fast=fast)}) as srv, srv.client() as c:

        async def reader_waits() -> bool:
            conns = srv.server._connections  # empty until the server has accepted the client
            return bool(conns) and all(conn.stream._waiter is not None for conn in conns)

        for i in range(20):
            # The reader waiting when the next one comes (else the reader task reads it itself).
            wait_for(lambda: srv.call(reader_waits()), message="the reader waiting for bytes")
            corr, body = c.call(PRODUCE, 7, {"acks": 1, "timeout_ms": i})
            assert body["throttle_time_ms"] == i and corr == i + 1
        # Pipelined requests still take the reader (a burst is not one whole frame) and are answered in order.
        c.send(b"".join(c.request_bytes(PRODUCE, 7, {"acks": 1, "timeout_ms": 100 + i}) for i in range(10)))
        for i in range(10):
            frame = c.recv_frame()
            assert frame is not None
            assert decode_response(PRODUCE, 7, frame)[1]["throttle_time_ms"] == 100 + i
        corr, body = c.call(PRODUCE, 7, {"acks": 1, "timeout_ms": 7})
        assert body["throttle_time_ms"] == 7

        async def free_slots() -> list[int]:
            return [conn._slots.free for conn in srv.server._connections]

        assert srv.call(free_slots()) == [srv.server.max_in_flight]
    # Each sent while the reader waited: answered in the readiness callback, where no task runs (without it: none).
    assert all(t is None for t in tasks[:20]), tasks


def test_fetch_records_from_the_callback_and_the_rest_by_the_writer(tmp_path: Any,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """A fast Fetch answer is pushed from the callback: header, then sendfile of its records until the socket
    buffer is full; the writer sends the rest from where it stopped. The client gets the exact bytes, twice."""
    where: list[bool] = []
    real_sendfile = os.sendfile

    def sendfile(out_fd: int, in_fd: int, offset: int, count: int) -> int:
        where.append(asyncio.current_task() is None)
        return real_sendfile(out_fd, in_fd, offset, count)

    monkeypatch.setattr(stream_module.os, "sendfile", sendfile)
    path = tmp_path / "00000000000000000000.log"
    data = os.urandom(1 << 20) * 8  # more than the socket buffers take at once
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    regions: list[FileRegion] = []

    async def slow(header: RequestHeader, request: Body) -> Body:
        raise AssertionError("the fast path answers every fetch here")

    def fast(header: RequestHeader, request: Body) -> Body:
        region = FileRegion(os.dup(fd), 100, len(data) - 200, owned=True)
        regions.append(region)
        parts = [{"partition_index": 0, "high_watermark": 1, "records": region},
                 {"partition_index": 1, "records": b"inline"}]
        return {"responses": [{"topic": "t", "partitions": parts}]}

    try:
        with serve({FETCH.key: Route(slow, concurrent=True, fast=fast)}) as srv, srv.client() as c:
            for version in (11, 12, 11):
                sent = len(where)
                c.send(c.request_bytes(FETCH, version, {"topics": []}))
                # Not reading until the answer's first sendfile ran: the socket buffers fill and it stops there.
                wait_for(lambda: len(where) > sent, message="the answer's first sendfile")  # noqa: B023
                frame = c.recv_frame()
                assert frame is not None
                got = decode_response(FETCH, version, frame)[1]
                parts = got["responses"][0]["partitions"]
                assert parts[0]["records"] == data[100:-100]
                assert parts[1]["records"] == b"inline"
    finally:
        os.close(fd)
    # Answers begun in the callback (no task) and finished by the writer (a task) once the buffer had filled. Not
    # every one: the first request may be read by the reader task itself, and one that comes before the writer is
    # back from its last send is queued for it (on a busy machine).
    assert True in where and False in where, where
    # Each answer's own fd was closed once sent (owned regions hand their fd to what is left to send).
    assert all(not r._owned for r in regions)


class _RecordingSocket:
    """A socket whose send flags are recorded (socket.socket's methods cannot be patched on an instance)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.flags: list[int] = []

    def fileno(self) -> int:
        return self.sock.fileno()

    def send(self, data: bytes, flags: int = 0) -> int:
        self.flags.append(flags)
        return self.sock.send(data, flags)


def test_push_sends_header_with_msg_more_and_stops_at_a_full_buffer(tmp_path: Any) -> None:
    path = tmp_path / "f"
    data = os.urandom(1 << 20) * 4
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    a, b = socket.socketpair()
    try:
        a.setblocking(False)
        sock: Any = _RecordingSocket(a)
        # Everything fits: the bytes before the region go with MSG_MORE, the bytes after it without.
        small = FileRegion(fd, 10, 1000)
        chunks: list[Any] = [b"head", b"er", small, b"tail"]
        assert push(sock, chunks) is True and chunks == []
        assert sock.flags == [socket.MSG_MORE, 0]
        assert _recv(b, 4 + 2 + 1000 + 4) == b"header" + data[10:1010] + b"tail"
        # A full socket buffer: what is left stays in `chunks`, a region cut where sendfile stopped; the caller's
        # region is untouched and its fd ownership moved to the rest.
        big = FileRegion(os.dup(fd), 0, len(data), owned=True)
        chunks = [b"h", big]
        assert push(sock, chunks) is False
        rest = chunks[0]
        assert isinstance(rest, FileRegion) and len(chunks) == 1
        assert 0 < rest.position and rest.position + rest.length == len(data)
        assert (big.position, big.length) == (0, len(data)) and not big._owned and rest._owned
        got = bytearray()
        deadline = time.monotonic() + 10
        while chunks and time.monotonic() < deadline:
            try:
                got += b.recv(1 << 20, socket.MSG_DONTWAIT)
            except BlockingIOError:
                pass
            push(sock, chunks)
        got += _recv(b, 1 + len(data) - len(got))
        assert bytes(got) == b"h" + data
        assert not rest._owned  # closed once sent
    finally:
        a.close()
        b.close()
        os.close(fd)


def _recv(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    sock.settimeout(10)
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            break
        buf += chunk
    return bytes(buf)


def test_idle_timeout_counts_from_the_last_request_answered_in_the_callback() -> None:
    def fast(header: RequestHeader, request: Body) -> Body:
        return {"responses": [], "throttle_time_ms": 0}

    async def slow(header: RequestHeader, request: Body) -> Body:
        return {"responses": [], "throttle_time_ms": 0}

    with serve({PRODUCE.key: Route(slow, fast=fast)}, idle_timeout=0.6) as srv, srv.client() as c:
        # Busy for three idle periods, a request every 0.15 s: never closed.
        start = time.monotonic()
        while time.monotonic() - start < 1.8:
            assert c.call(PRODUCE, 7, {"acks": 1, "timeout_ms": 1})[1]["throttle_time_ms"] == 0
            time.sleep(0.15)
        # Then silent: closed within about the idle timeout.
        quiet = time.monotonic()
        assert c.is_closed_by_peer()
        assert time.monotonic() - quiet < 3


def test_join_chunks_of_a_pushed_answer_is_unchanged(tmp_path: Any) -> None:
    """push never touches the caller's region (the encoded answer may be joined afterwards, as tests do)."""
    path = tmp_path / "f"
    path.write_bytes(b"0123456789")
    fd = os.open(path, os.O_RDONLY)
    try:
        region = FileRegion(fd, 2, 5)
        assert join_chunks([b"a", region]) == b"a23456"
        region.rest(2)
        assert join_chunks([b"a", region]) == b"a23456"
        assert region.rest(5).length == 0
        with pytest.raises(ValueError):
            region.rest(6)
    finally:
        os.close(fd)


def test_route_encode_is_tried_first_and_none_leaves_it_to_the_generic_encoder() -> None:
    seen: list[int] = []

    def encode(version: int, correlation_id: int, response: Body) -> Any:
        seen.append(correlation_id)
        if response["throttle_time_ms"] == 1:  # its own bytes (here: visibly different ones) for this answer
            return encode_response(PRODUCE, version, correlation_id, {"responses": [], "throttle_time_ms": 99})
        return None

    def fast(header: RequestHeader, request: Body) -> Body:
        return {"responses": [], "throttle_time_ms": request["timeout_ms"]}

    async def slow(header: RequestHeader, request: Body) -> Body:
        return {"responses": [], "throttle_time_ms": request["timeout_ms"]}

    with serve({PRODUCE.key: Route(slow, fast=fast, encode=encode)}) as srv, srv.client() as c:
        assert c.call(PRODUCE, 9, {"acks": 1, "timeout_ms": 1})[1]["throttle_time_ms"] == 99
        assert c.call(PRODUCE, 9, {"acks": 1, "timeout_ms": 2})[1]["throttle_time_ms"] == 2
    assert seen == [1, 2]
