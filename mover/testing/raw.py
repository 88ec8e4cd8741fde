"""A raw blocking-socket Kafka client and the requests tests and benches send with it: our own codec on the client
side, so a test can send any version, any field, or bytes no real client would.

    with RawClient(d.port) as c:
        produce(c, "t", 0, make_batch([b"v"]))
        fetch_partitions(fetch(c, [("t", 0, 0)]))
"""

from __future__ import annotations

import socket
import ssl
import struct
from pathlib import Path
from typing import Any

from kafka.record import MemoryRecords

from mover.testing.wait import wait_for
from mover.wire import Api, decode_response, encode_request, join_chunks
from mover.wire.messages import ALTER_REPLICA_LOG_DIRS, FETCH, INIT_PRODUCER_ID, LIST_OFFSETS, PRODUCE

# Generous: a test that waits this long has failed; it only bounds how long a broken test hangs.
SOCKET_TIMEOUT_S = 10.0


class RawClient:
    """One connection to 127.0.0.1:`port`; with `tls`, the socket is wrapped (server name "localhost", the name the
    tests' certificates carry)."""

    def __init__(self, port: int, *, tls: ssl.SSLContext | None = None) -> None:
        sock = socket.create_connection(("127.0.0.1", port), timeout=SOCKET_TIMEOUT_S)
        self.sock: socket.socket = tls.wrap_socket(sock, server_hostname="localhost") if tls else sock
        self._corr = 0

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def request_bytes(self, api: Api | int, version: int, body: dict[str, Any], corr: int | None = None) -> bytes:
        if corr is None:
            self._corr += 1
            corr = self._corr
        return join_chunks(encode_request(api, version, corr, body, client_id="test"))

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def recv_exact(self, n: int) -> bytes | None:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                return None
            buf += chunk
        return bytes(buf)

    def recv_frame(self) -> bytes | None:
        head = self.recv_exact(4)
        if head is None:
            return None
        (size,) = struct.unpack(">i", head)
        return self.recv_exact(size)

    def call(self, api: Api, version: int, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        self.send(self.request_bytes(api, version, body))
        frame = self.recv_frame()
        assert frame is not None, f"connection closed instead of answering {api.name}"
        header, got = decode_response(api, version, frame)
        return header.correlation_id, got

    def is_closed_by_peer(self) -> bool:
        """True once the server has closed: recv returns EOF (or a reset)."""
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True


def produce(c: RawClient, topic: str, partition: int, records: bytes | None, *, version: int = 9,
            acks: int = -1) -> dict[str, Any]:
    _, resp = c.call(PRODUCE, version, {"acks": acks, "timeout_ms": 5000, "topic_data": [
        {"name": topic, "partition_data": [{"index": partition, "records": records}]}]})
    return resp["responses"][0]["partition_responses"][0]


def produce_many(c: RawClient, parts: list[tuple[str, int, bytes]], *, version: int = 9) -> dict[tuple[str, int], Any]:
    topics: dict[str, list[dict[str, Any]]] = {}
    for t, p, r in parts:
        topics.setdefault(t, []).append({"index": p, "records": r})
    _, resp = c.call(PRODUCE, version, {"acks": -1, "timeout_ms": 5000, "topic_data": [
        {"name": t, "partition_data": ps} for t, ps in topics.items()]})
    return {(t["name"], p["index"]): p for t in resp["responses"] for p in t["partition_responses"]}


def fetch(c: RawClient, parts: list[tuple[str, int, int]], *, version: int = 12, max_wait_ms: int = 0,
          min_bytes: int = 0, max_bytes: int = 0x7FFFFFFF, partition_max_bytes: int = 1 << 20,
          isolation_level: int = 0, session_id: int = 0, session_epoch: int = -1) -> dict[str, Any]:
    topics: dict[str, list[dict[str, Any]]] = {}
    for t, p, off in parts:
        topics.setdefault(t, []).append({"partition": p, "fetch_offset": off, "partition_max_bytes":
                                         partition_max_bytes})
    _, resp = c.call(FETCH, version, {
        "replica_id": -1, "max_wait_ms": max_wait_ms, "min_bytes": min_bytes, "max_bytes": max_bytes,
        "isolation_level": isolation_level, "session_id": session_id, "session_epoch": session_epoch,
        "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()]})
    return resp


def fetch_partitions(resp: dict[str, Any]) -> dict[tuple[str, int], dict[str, Any]]:
    return {(t["topic"], p["partition_index"]): p for t in resp["responses"] for p in t["partitions"]}


def records_of(data: bytes | None) -> list[tuple[int, bytes]]:
    out = []
    if not data:
        return out
    mr = MemoryRecords(bytes(data))
    while True:
        b = mr.next_batch()
        if b is None:
            return out
        out.extend((r.offset, bytes(r.value)) for r in b)


def list_offsets(c: RawClient, topic: str, partition: int, timestamp: int, *, version: int = 7) -> dict[str, Any]:
    _, resp = c.call(LIST_OFFSETS, version, {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": topic, "partitions": [{"partition_index": partition, "timestamp": timestamp}]}]})
    return resp["topics"][0]["partitions"][0]


def init_producer_id(c: RawClient, *, transactional_id: str | None = None, version: int = 4) -> dict[str, Any]:
    _, resp = c.call(INIT_PRODUCER_ID, version, {"transactional_id": transactional_id,
                                                 "transaction_timeout_ms": 60000})
    return resp


def raw_call(port: int, api: Api, version: int, body: dict[str, Any]) -> dict[str, Any]:
    """One request on a connection of its own; the response body."""
    with RawClient(port) as c:
        return c.call(api, version, body)[1]


def alter_dir(c: RawClient, topic: str, partition: int, path: Path, *, version: int = 2) -> int:
    _, resp = c.call(ALTER_REPLICA_LOG_DIRS, version, {"dirs": [
        {"path": str(path), "topics": [{"name": topic, "partitions": [partition]}]}]})
    return resp["results"][0]["partitions"][0]["error_code"]


def move(c: RawClient, dirs: list[Path], topic: str, partition: int, dest: Path) -> None:
    """Move a replica with a raw AlterReplicaLogDirs and wait until the swap happened."""
    assert alter_dir(c, topic, partition, dest) == 0
    wait_for(lambda: (dest / f"{topic}-{partition}").is_dir() and not (dest / f"{topic}-{partition}.move").exists()
             and all(not (d / f"{topic}-{partition}").exists() for d in dirs if d != dest),
             message=f"{topic}-{partition} to move to {dest}")
