"""mover.admin.client against brokers that misbehave in the ways real ones do: older ApiVersions, hang-ups, silence."""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from mover.admin.client import BrokerConnection, Client, ClientError, ConnectionClosed, UnsupportedApi
from mover.wire import decode_request, encode_response, join_chunks
from mover.wire.messages import DESCRIBE_LOG_DIRS, DESCRIBE_REPLICA_MOVES, METADATA

Reply = Callable[[Any, dict[str, Any]], "dict[str, Any] | None"]


@contextmanager
def raw_broker(reply: Reply) -> Iterator[int]:
    """A one-connection-at-a-time broker: `reply(header, request)` -> response body, or None to hang up."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    stop = threading.Event()

    def serve() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            with conn:
                conn.settimeout(10)
                while True:
                    head = conn.recv(4, socket.MSG_WAITALL)
                    if len(head) < 4:
                        break
                    frame = conn.recv(struct.unpack(">i", head)[0], socket.MSG_WAITALL)
                    header, request = decode_request(frame)
                    body = reply(header, request)
                    if body is None:
                        break
                    version = body.pop("_version", header.api_version)
                    conn.sendall(join_chunks(encode_response(header.api_key, version, header.correlation_id, body)))

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield port
    finally:
        stop.set()
        thread.join(5)
        listener.close()


def test_api_versions_falls_back_to_what_an_old_broker_knows() -> None:
    seen: list[tuple[int, int]] = []

    def reply(header: Any, request: dict[str, Any]) -> dict[str, Any] | None:
        seen.append((header.api_key, header.api_version))
        if header.api_key == 18 and header.api_version > 2:
            # Kafka's answer to an ApiVersions version it does not know: a v0 body with UNSUPPORTED_VERSION.
            return {"_version": 0, "error_code": 35, "api_keys": [{"api_key": 18, "min_version": 0, "max_version": 2}]}
        if header.api_key == 18:
            return {"error_code": 0, "api_keys": [{"api_key": 18, "min_version": 0, "max_version": 2},
                                                  {"api_key": 3, "min_version": 0, "max_version": 1},
                                                  {"api_key": 35, "min_version": 0, "max_version": 1}]}
        if header.api_key == 3:
            return {"brokers": [{"node_id": 4, "host": "127.0.0.1", "port": port}], "controller_id": 4, "topics": []}
        return None

    with raw_broker(reply) as port:
        with Client(f"127.0.0.1:{port}") as client:
            assert client.brokers == {4: ("127.0.0.1", port)}
            conn = client.connection(4)
            assert conn.version_for(DESCRIBE_LOG_DIRS) == 1  # min(ours 4, theirs 1)
            assert conn.version_for(METADATA) == 1
            assert not conn.supports(DESCRIBE_REPLICA_MOVES)
            with pytest.raises(UnsupportedApi, match="does not support DescribeReplicaMoves"):
                conn.call(DESCRIBE_REPLICA_MOVES, {})
    assert seen[:3] == [(18, 4), (18, 2), (3, 1)]


def test_hang_up_is_connection_closed() -> None:
    def reply(header: Any, request: dict[str, Any]) -> dict[str, Any] | None:
        if header.api_key == 18:
            return {"error_code": 0, "api_keys": [{"api_key": 35, "min_version": 0, "max_version": 4}]}
        return None

    with raw_broker(reply) as port:
        conn = BrokerConnection("127.0.0.1", port)
        with pytest.raises(ConnectionClosed, match="closed the connection instead of answering DescribeLogDirs"):
            conn.call(DESCRIBE_LOG_DIRS, {"topics": None})
        with pytest.raises(ConnectionClosed):
            conn.call(DESCRIBE_LOG_DIRS, {"topics": None})


def test_silent_broker_times_out() -> None:
    with socket.create_server(("127.0.0.1", 0)) as listener:  # accepts (backlog) but never answers
        with pytest.raises(ClientError, match="did not answer ApiVersions within 0.3 s"):
            BrokerConnection("127.0.0.1", listener.getsockname()[1], timeout=0.3)


def test_unreachable() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(ClientError, match="cannot connect to broker 127.0.0.1:.*refused"):
        Client(f"127.0.0.1:{port}")
