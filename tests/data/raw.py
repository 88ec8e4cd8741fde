"""Raw data-path requests against a real moverd, with record batches built by kafka-python (an independent writer)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kafka.record import MemoryRecords
from kafka.record.default_records import DefaultRecordBatchBuilder

from mover.wire.messages import ALTER_REPLICA_LOG_DIRS, FETCH, INIT_PRODUCER_ID, LIST_OFFSETS, PRODUCE
from tests.server.harness import RawClient

# Polling bound for conditions that become true within milliseconds on a healthy daemon; only bounds a hang.
WAIT_S = 30.0


def batch(values: list[bytes], *, producer_id: int = -1, epoch: int = -1, seq: int = -1,
          timestamps: list[int] | None = None, magic: int = 2) -> bytes:
    b = DefaultRecordBatchBuilder(magic, 0, False, producer_id, epoch, seq, 1 << 30)
    now = int(time.time() * 1000)
    for i, v in enumerate(values):
        b.append(i, timestamps[i] if timestamps else now, None, v, [])
    return bytes(b.build())


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


def alter_dir(c: RawClient, topic: str, partition: int, path: Path) -> int:
    _, resp = c.call(ALTER_REPLICA_LOG_DIRS, 2, {"dirs": [
        {"path": str(path), "topics": [{"name": topic, "partitions": [partition]}]}]})
    return resp["results"][0]["partitions"][0]["error_code"]


def wait_for(cond: Callable[[], bool], what: str, timeout: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def dir_of(dirs: list[Path], topic: str, partition: int) -> Path:
    """The log dir holding the live copy (no .move in flight)."""
    found = [d for d in dirs if (d / f"{topic}-{partition}").is_dir()]
    assert len(found) == 1, found
    return found[0]


def move(c: RawClient, dirs: list[Path], topic: str, partition: int, dest: Path) -> None:
    """Move a replica with a raw AlterReplicaLogDirs and wait until the swap happened."""
    assert alter_dir(c, topic, partition, dest) == 0
    wait_for(lambda: (dest / f"{topic}-{partition}").is_dir() and not (dest / f"{topic}-{partition}.move").exists()
             and all(not (d / f"{topic}-{partition}").exists() for d in dirs if d != dest),
             f"{topic}-{partition} to move to {dest}")
