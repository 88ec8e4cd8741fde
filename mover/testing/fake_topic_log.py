"""Single-partition topics for the fakes of mover/testing/fake_kafka/: CreateTopics, Produce, Fetch and ListOffsets
as Kafka answers them, enough for the tools' reassignment status topic (mover/admin/reassign/status_log.py). Every
partition 0 is led by the cluster's lowest broker id that is up; batches keep the bytes produced, with the base offset
assigned. No compaction, no retention."""

from __future__ import annotations

import struct
import threading
from typing import Any

from mover.wire.errors import ErrorCode

# The versions of each API the fakes offer, within what Kafka of each release offers and mover.wire speaks.
APIS_2 = {19: (0, 5), 0: (3, 8), 1: (4, 11), 2: (1, 5)}
APIS_3 = {19: (2, 7), 0: (3, 9), 1: (4, 12), 2: (1, 7)}
_EARLIEST = -2


class FakeTopicLogs:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.logs: dict[str, list[tuple[int, bytes]]] = {}  # topic -> [(base offset, batch)]
        self.next: dict[str, int] = {}
        self.configs: dict[str, dict[str, str | None]] = {}

    def metadata_topics(self, leader: int, wanted: set[str] | None) -> list[dict[str, Any]]:
        with self.lock:
            names = [t for t in sorted(self.logs) if wanted is None or t in wanted]
        partition = {"error_code": 0, "partition_index": 0, "leader_id": leader, "replica_nodes": [leader],
                     "isr_nodes": [leader], "offline_replicas": []}
        return [{"error_code": 0, "name": t, "is_internal": False, "partitions": [partition]} for t in names]

    def create_topics(self, version: int, request: dict[str, Any]) -> dict[str, Any]:
        out = []
        with self.lock:
            for t in request["topics"]:
                exists = t["name"] in self.logs
                if not exists:
                    self.logs[t["name"]], self.next[t["name"]] = [], 0
                    self.configs[t["name"]] = {c["name"]: c["value"] for c in t["configs"]}
                code = ErrorCode.TOPIC_ALREADY_EXISTS if exists else ErrorCode.NONE
                out.append({"name": t["name"], "error_code": int(code),
                            "error_message": f"Topic '{t['name']}' already exists." if exists else None,
                            "num_partitions": 1, "replication_factor": 1, "configs": []})
        return {"throttle_time_ms": 0, "topics": out}

    def produce(self, version: int, request: dict[str, Any]) -> dict[str, Any]:
        responses = []
        with self.lock:
            for t in request["topic_data"]:
                parts = []
                for p in t["partition_data"]:
                    if t["name"] not in self.logs or p["index"] != 0:
                        parts.append({"index": p["index"], "error_code": int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
                                      "base_offset": -1})
                        continue
                    base = self.next[t["name"]]
                    data = bytearray(p["records"])
                    pos, offset = 0, base
                    while pos < len(data):
                        length, = struct.unpack_from(">i", data, pos + 8)
                        last_delta, = struct.unpack_from(">i", data, pos + 23)
                        struct.pack_into(">q", data, pos, offset)
                        self.logs[t["name"]].append((offset, bytes(data[pos:pos + 12 + length])))
                        offset += last_delta + 1
                        pos += 12 + length
                    self.next[t["name"]] = offset
                    parts.append({"index": 0, "error_code": 0, "base_offset": base, "log_start_offset": 0})
                responses.append({"name": t["name"], "partition_responses": parts})
        return {"responses": responses, "throttle_time_ms": 0}

    def fetch(self, version: int, request: dict[str, Any]) -> dict[str, Any]:
        responses = []
        with self.lock:
            for t in request["topics"]:
                parts = []
                for p in t["partitions"]:
                    log = self.logs.get(t["topic"])
                    if log is None or p["partition"] != 0:
                        parts.append({"partition_index": p["partition"], "high_watermark": -1, "records": None,
                                      "error_code": int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)})
                        continue
                    end = self.next[t["topic"]]
                    if p["fetch_offset"] > end:
                        parts.append({"partition_index": 0, "high_watermark": end, "records": None,
                                      "error_code": int(ErrorCode.OFFSET_OUT_OF_RANGE), "log_start_offset": 0})
                        continue
                    data = b"".join(b for i, (base, b) in enumerate(log)
                                    if (log[i + 1][0] if i + 1 < len(log) else end) > p["fetch_offset"])
                    parts.append({"partition_index": 0, "error_code": 0, "high_watermark": end,
                                  "last_stable_offset": end, "log_start_offset": 0, "aborted_transactions": [],
                                  "records": data[:p["partition_max_bytes"]]})
                responses.append({"topic": t["topic"], "partitions": parts})
        return {"throttle_time_ms": 0, "error_code": 0, "session_id": 0, "responses": responses}

    def list_offsets(self, version: int, request: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            return {"throttle_time_ms": 0, "topics": [
                {"name": t["name"], "partitions": [
                    {"partition_index": p["partition_index"], "error_code": 0, "timestamp": -1,
                     "offset": 0 if p["timestamp"] == _EARLIEST else self.next.get(t["name"], 0)}
                    for p in t["partitions"]]} for t in request["topics"]]}
