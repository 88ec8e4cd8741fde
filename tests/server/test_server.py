"""The server on 127.0.0.1 with a free port: raw sockets and kafka-python's own clients."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import struct
import subprocess
import threading
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.admin import KafkaAdminClient

import mover.server.stream as stream_module
from mover.api import with_api_defaults
from mover.server import NOT_NOW, Recogniser, Route, Server, run_blocking
from mover.testing.raw import RawClient
from mover.testing.server import serve
from mover.wire import ErrorCode, FileRegion, RequestHeader, decode_response
from mover.wire.messages import (
    ALTER_REPLICA_LOG_DIRS,
    API_VERSIONS,
    DESCRIBE_LOG_DIRS,
    DESCRIBE_REPLICA_MOVES,
    FETCH,
    INIT_PRODUCER_ID,
    METADATA,
    PRODUCE,
)

Body = dict[str, Any]

CLIENT = {"client_software_name": "mover-tests", "client_software_version": "1.0"}


async def describe_log_dirs(header: RequestHeader, request: Body) -> Body:
    return {
        "results": [
            {
                "log_dir": "/d1",
                "topics": [
                    {
                        "name": "t",
                        "partitions": [
                            {"partition_index": 0, "partition_size": 123, "offset_lag": 0, "is_future_key": False}
                        ],
                    }
                ],
                "total_bytes": 1000,
                "usable_bytes": 500,
            }
        ]
    }


def metadata_handler(port_box: list[int]) -> Any:
    async def metadata(header: RequestHeader, request: Body) -> Body:
        return {
            "brokers": [{"node_id": 0, "host": "127.0.0.1", "port": port_box[0]}],
            "cluster_id": "c",
            "controller_id": 0,
            "topics": [],
        }

    return metadata


# ------------------------------------------------------------------------------------------------- ApiVersions


def test_api_versions_advertises_exactly_the_registry() -> None:
    handlers = {35: describe_log_dirs, 34: Route(describe_log_dirs, versions=(1, 2))}
    with serve(handlers) as srv, srv.client() as c:
        for version in range(5):
            corr, body = c.call(API_VERSIONS, version, CLIENT)
            assert body["error_code"] == 0
            keys = {k["api_key"]: (k["min_version"], k["max_version"]) for k in body["api_keys"]}
            assert keys == {18: (0, 4), 35: (0, DESCRIBE_LOG_DIRS.valid.hi), 34: (1, 2)}


def test_api_versions_unknown_version_answers_v0_unsupported_version() -> None:
    with serve({35: describe_log_dirs}) as srv, srv.client() as c:
        # a future client: ApiVersions v9 with a flexible (v2) header and a body we cannot know
        c.send(struct.pack(">ihhih", 14 + 3, 18, 9, 4242, 4) + b"test" + b"\x00\x01\x01")
        frame = c.recv_frame()
        assert frame is not None
        header, body = decode_response(API_VERSIONS, 0, frame)
        assert header.correlation_id == 4242
        assert body["error_code"] == ErrorCode.UNSUPPORTED_VERSION
        assert {"api_key": 18, "min_version": 0, "max_version": 4} in body["api_keys"]
        assert len(frame) == 4 + 2 + 4 + 2 * 6  # header v0, v0 body: no throttle, no tagged fields
        # the client retries lower on the same connection
        assert c.call(API_VERSIONS, 3, CLIENT)[1]["error_code"] == 0


def test_api_versions_refuses_invalid_client_software_name() -> None:
    with serve({35: describe_log_dirs}) as srv, srv.client() as c:
        bad = {"client_software_name": "bad name!", "client_software_version": "1.0"}
        _, body = c.call(API_VERSIONS, 3, bad)
        assert body["error_code"] == ErrorCode.INVALID_REQUEST
        assert body["api_keys"]
        good = {"client_software_name": "librdkafka", "client_software_version": "2.0.2"}
        assert c.call(API_VERSIONS, 4, good)[1]["error_code"] == 0


def test_kafka_python_admin_client_describe_log_dirs() -> None:
    port_box: list[int] = []
    handlers = {3: metadata_handler(port_box), 35: describe_log_dirs}
    with serve(handlers) as srv:
        port_box.append(srv.port)
        admin = KafkaAdminClient(bootstrap_servers=f"127.0.0.1:{srv.port}", request_timeout_ms=5000)
        try:
            result = admin.describe_log_dirs()
        finally:
            admin.close()
    text = repr(result)
    assert "/d1" in text and "123" in text


# ------------------------------------------------------------------------------------------------- pipelining


def test_pipelined_requests_answered_in_order_even_when_finished_out_of_order() -> None:
    finished: list[int] = []

    async def moves(header: RequestHeader, request: Body) -> Body:
        rid = request["request_id"]
        # later requests finish first: request i waits (50 - i) loop turns
        for _ in range(50 - rid):
            await asyncio.sleep(0)
        finished.append(rid)
        return {"request_id": rid}

    with serve({DESCRIBE_REPLICA_MOVES.key: Route(moves, concurrent=True)}) as srv, srv.client() as c:
        c.send(
            b"".join(c.request_bytes(DESCRIBE_REPLICA_MOVES, 0, {"request_id": i}, corr=1000 + i) for i in range(50))
        )
        for i in range(50):
            frame = c.recv_frame()
            assert frame is not None
            header, body = decode_response(DESCRIBE_REPLICA_MOVES, 0, frame)
            assert (header.correlation_id, body["request_id"]) == (1000 + i, i)
    assert finished != sorted(finished)  # they really did complete out of order


def test_serial_handlers_run_one_at_a_time_in_order() -> None:
    running = 0
    overlap = False
    order: list[int] = []

    async def produce(header: RequestHeader, request: Body) -> Body:
        nonlocal running, overlap
        running += 1
        overlap |= running > 1
        for _ in range(5):
            await asyncio.sleep(0)
        order.append(request["timeout_ms"])
        running -= 1
        return {"responses": []}

    with serve({PRODUCE.key: produce}) as srv, srv.client() as c:
        c.send(b"".join(c.request_bytes(PRODUCE, 7, {"acks": 1, "timeout_ms": i}) for i in range(20)))
        for _ in range(20):
            assert c.recv_frame() is not None
    assert order == list(range(20))
    assert not overlap


def test_fast_path_answers_on_the_loop_in_order_and_falls_back_to_the_handler() -> None:
    """Route.fast: called on the event loop without a task when nothing earlier runs; NOT_NOW hands the request to
    the handler; a fast-capable request behind a running one waits for it (order of execution and of answers)."""
    order: list[tuple[str, int]] = []
    loop_thread: list[int] = []
    running = 0
    overlap = False

    def fast(header: RequestHeader, request: Body) -> Any:
        loop_thread.append(threading.get_ident())
        if running:
            nonlocal overlap
            overlap = True
        i = request["timeout_ms"]
        if i % 3 == 0:
            return NOT_NOW  # e.g. the append would have to wait: the handler takes it
        order.append(("fast", i))
        return {"responses": [], "throttle_time_ms": i}

    async def slow(header: RequestHeader, request: Body) -> Body:
        nonlocal running
        running += 1
        for _ in range(5):
            await asyncio.sleep(0)  # later requests arrive meanwhile and must not overtake it
        order.append(("handler", request["timeout_ms"]))
        running -= 1
        return {"responses": [], "throttle_time_ms": request["timeout_ms"]}

    with serve({PRODUCE.key: Route(slow, fast=fast)}) as srv, srv.client() as c:
        _pipeline_produce_in_order(c, 30)
    assert [i for _, i in order] == list(range(30)), "executed in the order sent"
    assert {kind for kind, i in order if i % 3} == {"fast"} and {kind for kind, i in order if not i % 3} == {"handler"}
    assert not overlap, "a fast answer never ran while an earlier request of the connection was running"
    assert len(set(loop_thread)) == 1


def test_fast_many_answers_a_prefix_of_a_run_and_the_rest_goes_one_by_one_in_order() -> None:
    """Route.fast_many: a run of requests read together goes to it when nothing earlier runs; it answers a prefix
    (here: up to the first multiple of 7) and the rest of the run takes fast/handler one by one. Every request is
    executed once, in the order sent, and answered in that order; an exception answers its whole run with the
    error response, and the connection goes on."""
    order: list[tuple[str, int]] = []
    runs: list[list[int]] = []

    def many(items: list[tuple[RequestHeader, Body]]) -> list[Any]:
        ids = [b["timeout_ms"] for _, b in items]
        if 500 in ids:
            raise RuntimeError("a bug in a run")
        taken = []
        for i in ids:
            if i % 7 == 0:
                break
            taken.append(i)
        runs.append(taken)
        order.extend(("many", i) for i in taken)
        return [{"responses": [], "throttle_time_ms": i} for i in taken]

    def fast(header: RequestHeader, request: Body) -> Any:
        i = request["timeout_ms"]
        if i % 2 == 0:
            return NOT_NOW
        order.append(("fast", i))
        return {"responses": [], "throttle_time_ms": i}

    async def slow(header: RequestHeader, request: Body) -> Body:
        await asyncio.sleep(0)
        order.append(("handler", request["timeout_ms"]))
        return {"responses": [], "throttle_time_ms": request["timeout_ms"]}

    route = Route(slow, fast=fast, fast_many=many)
    with serve(with_api_defaults({PRODUCE.key: route})) as srv, srv.client() as c:
        _pipeline_produce_in_order(c, 60)
        assert [i for _, i in order] == list(range(60)), "each executed once, in the order sent"
        assert sum(len(r) for r in runs) > 20, runs  # runs did happen

        async def free_slots() -> list[int]:
            return [conn._slots.free for conn in srv.server._connections]

        # Every request's in-flight slot was given back (a run holds one per request, released together).
        assert srv.call(free_slots()) == [srv.server.max_in_flight]
        assert all(kind == "many" or i % 7 == 0 or kind != "many" for kind, i in order)
        # A run whose fast_many raises: its requests get the error answer, later ones are served again.
        c.send(b"".join(c.request_bytes(PRODUCE, 7, {"acks": 1, "timeout_ms": i}) for i in (500, 501)))
        for _ in range(2):
            frame = c.recv_frame()
            assert frame is not None
            body = decode_response(PRODUCE, 7, frame)[1]
            assert body["responses"] == [] or body["responses"][0]["partition_responses"] == []
        corr, body = c.call(PRODUCE, 7, {"acks": 1, "timeout_ms": 1})
        assert body["throttle_time_ms"] == 1


def test_repeats_recogniser_is_made_on_its_routes_first_request_and_asked_first() -> None:
    """Route.repeats: a connection makes the recogniser the first time it decodes a request of that route (never for
    a connection that sends none), tells it each request it decoded, and routes what `match` gives as that request."""
    made: list[Recogniser] = []
    seen: list[int] = []
    handled: list[Body] = []

    class Echo:
        """Matches a frame equal to the last one seen but for the correlation id; marks the body it gives."""

        def __init__(self) -> None:
            self.last: tuple[bytes, RequestHeader, Body] | None = None
            made.append(self)

        def match(self, frame: bytes | bytearray) -> tuple[RequestHeader, Body] | None:
            if self.last is None or frame[:4] + frame[8:] != self.last[0][:4] + self.last[0][8:]:
                return None
            header = self.last[1]._replace(correlation_id=struct.unpack_from(">i", frame, 4)[0])
            return header, {**self.last[2], "timeout_ms": -7}

        def saw(self, frame: bytes | bytearray, header: RequestHeader, body: Body) -> None:
            seen.append(body["timeout_ms"])
            self.last = (bytes(frame), header, body)

    async def produce(header: RequestHeader, request: Body) -> Body:
        handled.append(request)
        return {"responses": [], "throttle_time_ms": request["timeout_ms"]}

    with serve({PRODUCE.key: Route(produce, repeats=Echo), 35: describe_log_dirs}) as srv:
        with srv.client() as c:
            c.call(DESCRIBE_LOG_DIRS, 1, {"topics": None})
        assert made == []
        with srv.client() as c:
            bodies = [c.call(PRODUCE, 7, {"acks": 1, "timeout_ms": t})[1] for t in (5, 5, 6, 6)]
    assert len(made) == 1
    assert seen == [5, 6]  # the repeats were matched, not decoded
    assert [b["throttle_time_ms"] for b in bodies] == [5, -7, 6, -7]
    assert [b["timeout_ms"] for b in handled] == [5, -7, 6, -7]


def test_produce_acks_zero_gets_no_response() -> None:
    seen = threading.Event()

    async def produce(header: RequestHeader, request: Body) -> Body:
        seen.set()
        return {"responses": [{"name": "t", "partition_responses": [{"index": 0, "base_offset": 5}]}]}

    # acks=0 is the API layer's rule (mover.api.produce.acks_zero), applied as moverd applies it.
    with serve(with_api_defaults({PRODUCE.key: produce})) as srv, srv.client() as c:
        data = {
            "acks": 0,
            "timeout_ms": 1,
            "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": b"x"}]}],
        }
        c.send(c.request_bytes(PRODUCE, 9, data, corr=100))
        corr, _ = c.call(API_VERSIONS, 3, CLIENT)
        assert corr != 100  # the first answer on the wire is ApiVersions'
        assert seen.is_set()


# -------------------------------------------------------------------------------------------- bad connections


def _assert_other_connection_works(c2: RawClient) -> None:
    assert c2.call(API_VERSIONS, 3, CLIENT)[1]["error_code"] == 0


@pytest.mark.parametrize(
    "payload",
    [
        pytest.param(struct.pack(">i", 3) + b"\x00\x12\x00", id="short-header"),
        pytest.param(struct.pack(">ihhih", 10, 35, 1, 1, -5), id="negative-client-id"),
        pytest.param(struct.pack(">ihhih", 14, 35, 1, 1, -1) + b"\x7f\xff\xff\xff", id="hostile-array-count"),
        pytest.param(struct.pack(">ihhih", 10, 77, 0, 1, -1), id="unknown-api-key"),
        pytest.param(struct.pack(">ihhih", 10, 35, 9, 1, -1), id="unsupported-version"),
        pytest.param(struct.pack(">ihhih", 14, 34, 0, 1, -1) + b"\x00\x00\x00\x00", id="version-not-registered"),
        pytest.param(struct.pack(">ihhih", 10, 1, 4, 1, -1), id="declared-but-unregistered-api"),
        pytest.param(b"\xff\xff\xff\xf0", id="negative-frame-size"),
    ],
)
def test_malformed_or_unsupported_closes_only_that_connection(payload: bytes) -> None:
    handlers = {35: describe_log_dirs, 34: Route(describe_log_dirs, versions=(1, 2))}
    with serve(handlers) as srv, srv.client() as bad, srv.client() as good:
        _assert_other_connection_works(good)
        bad.send(payload)
        assert bad.is_closed_by_peer()
        _assert_other_connection_works(good)
        with srv.client() as fresh:
            _assert_other_connection_works(fresh)


def test_oversize_frame_refused() -> None:
    with serve({35: describe_log_dirs}, max_request_size=1024) as srv, srv.client() as bad, srv.client() as good:
        bad.send(struct.pack(">i", 1025))  # refused from the size prefix alone
        assert bad.is_closed_by_peer()
        body = {"topics": [{"topic": "x" * 900, "partitions": []}]}
        assert good.call(DESCRIBE_LOG_DIRS, 1, body)[1]["results"][0]["log_dir"] == "/d1"


def test_handler_exception_answers_unknown_server_error_where_the_shape_allows() -> None:
    async def broken(header: RequestHeader, request: Body) -> Body:
        raise RuntimeError("boom")

    # The error answers are the API layer's (mover.api.error_responses), applied as moverd applies them.
    with serve(with_api_defaults({34: broken, 35: broken})) as srv, srv.client() as c:
        body = {"dirs": [{"path": "/d2", "topics": [{"name": "t", "partitions": [0, 1]}]}]}
        _, got = c.call(ALTER_REPLICA_LOG_DIRS, 1, body)
        assert got["results"] == [
            {
                "topic_name": "t",
                "partitions": [
                    {"partition_index": 0, "error_code": -1},
                    {"partition_index": 1, "error_code": -1},
                ],
            }
        ]
        _, got = c.call(DESCRIBE_LOG_DIRS, 3, {"topics": None})
        assert got["error_code"] == ErrorCode.UNKNOWN_SERVER_ERROR
        # DescribeLogDirs v1 has no error field: an empty answer would lie, so the connection closes
        c.send(c.request_bytes(DESCRIBE_LOG_DIRS, 1, {"topics": None}))
        assert c.recv_frame() is None
        with srv.client() as c2:
            _assert_other_connection_works(c2)


def test_unencodable_response_becomes_an_error_response() -> None:
    async def bad_shape(header: RequestHeader, request: Body) -> Body:
        return {"no_such_field": 1}

    with serve(with_api_defaults({INIT_PRODUCER_ID.key: bad_shape})) as srv, srv.client() as c:
        _, got = c.call(INIT_PRODUCER_ID, 4, {"transactional_id": None})
        assert got["error_code"] == ErrorCode.UNKNOWN_SERVER_ERROR


# ----------------------------------------------------------------------------------------------- blocking work


def test_sync_handlers_and_run_blocking_use_the_thread_pool() -> None:
    threads: dict[str, str] = {}

    def sync_handler(header: RequestHeader, request: Body) -> Body:
        threads["sync"] = threading.current_thread().name
        return {"producer_id": 7}

    async def async_handler(header: RequestHeader, request: Body) -> Body:
        threads["loop"] = threading.current_thread().name
        threads["blocking"] = await run_blocking(lambda: threading.current_thread().name)
        return {"request_id": 1}

    with serve({INIT_PRODUCER_ID.key: sync_handler, DESCRIBE_REPLICA_MOVES.key: async_handler}) as srv:
        with srv.client() as c:
            assert c.call(INIT_PRODUCER_ID, 0, {"transactional_id": None})[1]["producer_id"] == 7
            assert c.call(DESCRIBE_REPLICA_MOVES, 0, {})[1]["request_id"] == 1
    assert threads["sync"].startswith("mover-io")
    assert threads["blocking"].startswith("mover-io")
    assert threads["loop"] == "test-server-loop"


# -------------------------------------------------------------------------------------------------- sendfile


def test_fetch_records_sent_with_sendfile(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    real_sendfile = os.sendfile

    def counting_sendfile(out_fd: int, in_fd: int, offset: int, count: int) -> int:
        calls.append(count)
        return real_sendfile(out_fd, in_fd, offset, count)

    monkeypatch.setattr(stream_module.os, "sendfile", counting_sendfile)
    path = tmp_path / "00000000000000000000.log"
    data = os.urandom(1 << 20) * 12  # 12 MiB: more than the socket buffers, so sendfile hits EAGAIN and waits
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    try:
        sl = FileRegion(fd, 1000, len(data) - 2000)

        async def fetch(header: RequestHeader, request: Body) -> Body:
            parts = [
                {"partition_index": 0, "high_watermark": 1, "records": sl},
                {"partition_index": 1, "records": b"inline"},
            ]
            return {"responses": [{"topic": "t", "partitions": parts}]}

        with serve({FETCH.key: Route(fetch, concurrent=True)}) as srv, srv.client() as c:
            for version in (11, 12):
                _, got = c.call(FETCH, version, {"topics": []})
                parts = got["responses"][0]["partitions"]
                assert parts[0]["records"] == data[1000:-1000]
                assert parts[1]["records"] == b"inline"
    finally:
        os.close(fd)
    assert calls and calls[0] == len(data) - 2000
    assert len(calls) > 2  # the socket filled up and sendfile resumed where it stopped


# ------------------------------------------------------------------------------------------- many connections


def test_many_connections_at_once() -> None:
    with serve({35: describe_log_dirs}) as srv:
        clients = [srv.client() for _ in range(100)]
        try:
            for c in clients:
                c.send(c.request_bytes(DESCRIBE_LOG_DIRS, 2, {"topics": []}))
            for c in clients:
                frame = c.recv_frame()
                assert frame is not None
                assert decode_response(DESCRIBE_LOG_DIRS, 2, frame)[1]["results"][0]["log_dir"] == "/d1"
        finally:
            for c in clients:
                c.close()


def test_close_ends_connections_and_listener() -> None:
    with serve({35: describe_log_dirs}) as srv:
        c = srv.client()
        _assert_other_connection_works(c)
        srv.call(srv.server.close())
        assert c.is_closed_by_peer()
        c.close()
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", srv.port), timeout=2).close()


def test_registry_is_checked() -> None:
    with pytest.raises(ValueError, match="ApiVersions"):
        Server({18: describe_log_dirs})
    with pytest.raises(ValueError, match="declaration"):
        Server({77: describe_log_dirs})
    with pytest.raises(ValueError, match="outside"):
        Server({35: Route(describe_log_dirs, versions=(0, DESCRIBE_LOG_DIRS.valid.hi + 1))})


def test_metadata_bootstrap_by_kafka_python_picks_our_max_version() -> None:
    port_box: list[int] = []
    versions: list[int] = []
    meta = metadata_handler(port_box)

    async def metadata(header: RequestHeader, request: Body) -> Body:
        versions.append(header.api_version)
        return await meta(header, request)

    with serve({METADATA.key: metadata, 35: describe_log_dirs}) as srv:
        port_box.append(srv.port)
        admin = KafkaAdminClient(bootstrap_servers=f"127.0.0.1:{srv.port}", request_timeout_ms=5000)
        admin.close()
    assert versions and max(versions) == 12


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat not installed")
def test_kcat_lists_metadata() -> None:
    """librdkafka (kcat -L): ApiVersions v3, then Metadata v4 in its own encoding."""
    port_box: list[int] = []

    async def metadata(header: RequestHeader, request: Body) -> Body:
        partition = {"partition_index": 0, "leader_id": 0, "replica_nodes": [0], "isr_nodes": [0]}
        return {
            "brokers": [{"node_id": 0, "host": "127.0.0.1", "port": port_box[0]}],
            "controller_id": 0,
            "topics": [{"name": "moving", "partitions": [partition]}],
        }

    with serve({METADATA.key: metadata}) as srv:
        port_box.append(srv.port)
        out = subprocess.run(
            ["kcat", "-b", f"127.0.0.1:{srv.port}", "-L", "-m", "5"], capture_output=True, text=True, timeout=30
        )
    assert out.returncode == 0, out.stderr
    assert 'topic "moving" with 1 partitions' in out.stdout
    assert f"broker 0 at 127.0.0.1:{port_box[0]}" in out.stdout


_GARBAGE = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def shared_server() -> Any:
    with serve({35: describe_log_dirs, 34: describe_log_dirs}) as srv:
        yield srv


@_GARBAGE
@given(st.binary(min_size=0, max_size=64))
def test_server_survives_garbage(shared_server: Any, payload: bytes) -> None:
    frame = struct.pack(">i", len(payload)) + payload
    with shared_server.client() as bad:
        bad.send(frame)
        bad.sock.shutdown(socket.SHUT_WR)
        try:
            while bad.recv_frame() is not None:  # an answer (if the bytes happened to be valid) or a close
                pass
        except ConnectionResetError:
            pass  # closed with our bytes unread: the kernel resets instead of a clean FIN
    with shared_server.client() as good:
        _assert_other_connection_works(good)


def _pipeline_produce_in_order(c: Any, n: int) -> None:
    """Sends n Produce v7 requests in one write (request i with timeout_ms i, which the test's handlers echo as
    throttle_time_ms) and checks their answers come back in the order sent."""
    c.send(b"".join(c.request_bytes(PRODUCE, 7, {"acks": 1, "timeout_ms": i}) for i in range(n)))
    for i in range(n):
        frame = c.recv_frame()
        assert frame is not None
        assert decode_response(PRODUCE, 7, frame)[1]["throttle_time_ms"] == i
