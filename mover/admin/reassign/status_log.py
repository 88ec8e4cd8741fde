"""The cluster's reassignment status log: one partition of the topic `__mover_reassignments`, written with Produce
and read with Fetch, so any machine with the credentials sees what every tool wrote (docs/cli.md,
"Where the requests live"). Created on first write (CreateTopics; TOPIC_ALREADY_EXISTS is success): compact,delete with
retention.ms = reassign.partitions.status.min.retention.ms (the broker's where it has the key, moverd; else 1 day),
replication factor min(3, brokers). moverd takes no per-topic configs: there the topic is created without them and
the broker's log.retention.ms and the readers' own expiry bound it.

Not thread-safe by itself: the store (status_store.py) calls it under its lock, on a connection of its own.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from mover.admin.client import Client, ClientError
from mover.admin.common import AdminError, ClusterUnavailable
from mover.admin.reassign.kip455 import call_any, call_controller, refusal
from mover.admin.reassign.status_records import decode_batches, encode_batch
from mover.wire.errors import RETRIABLE, ErrorCode, error_name
from mover.wire.messages import CREATE_TOPICS, DESCRIBE_CONFIGS, FETCH, LIST_OFFSETS, PRODUCE
from mover.zk import bounded_json

TOPIC = "__mover_reassignments"
RETENTION_KEY = "reassign.partitions.status.min.retention.ms"
DEFAULT_RETENTION_MS = 24 * 3600 * 1000
MAX_REPLICATION_FACTOR = 3
BROKER_RESOURCE = 4
FETCH_MAX_BYTES = 16 << 20
EARLIEST = -2
# Leader moves and a topic just created (its leader not elected yet) are waited out this long.
LEADER_WAIT_S = 10.0
_LEADER_CODES = (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.LEADER_NOT_AVAILABLE,
                 ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.REQUEST_TIMED_OUT, ErrorCode.NOT_ENOUGH_REPLICAS,
                 ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND)
_ACL_HINT = {
    ErrorCode.TOPIC_AUTHORIZATION_FAILED: f" (grant Read, Write and Describe on topic {TOPIC}, Create on the "
                                          "cluster or the topic for its first use: docs/cli.md)",
    ErrorCode.CLUSTER_AUTHORIZATION_FAILED: " (grant Create on the CLUSTER resource or on the topic for its first "
                                            "use: docs/cli.md)",
}


@dataclass(frozen=True)
class Entry:
    offset: int
    timestamp_ms: int
    key: str
    value: dict[str, Any]


class StatusLog:
    def __init__(self, client: Client, topic: str = TOPIC) -> None:
        self.client = client
        self.topic = topic
        self._created = False
        self._retention_ms: int | None = None
        self._leader: int | None = None
        self._kept: list[Entry] = []  # what read() has read, and where it goes on from
        self._next = 0

    # ------------------------------------------------------------------------------------------------ topic

    @property
    def retention_ms(self) -> int:
        """reassign.partitions.status.min.retention.ms as the cluster says (moverd has the key; Kafka does not,
        and its tools keep the default, 1 day)."""
        if self._retention_ms is None:
            self._retention_ms = DEFAULT_RETENTION_MS
            body = {"resources": [{"resource_type": BROKER_RESOURCE, "resource_name": str(min(self.client.brokers)),
                                   "configuration_keys": [RETENTION_KEY]}],
                    "include_synonyms": False, "include_documentation": False}
            try:
                reply = call_any(self.client, DESCRIBE_CONFIGS, body)
            except AdminError:
                return self._retention_ms
            for result in reply["results"]:
                for c in result["configs"] if result["error_code"] == ErrorCode.NONE else []:
                    if c["name"] == RETENTION_KEY and c["value"] not in (None, ""):
                        self._retention_ms = int(c["value"])
        return self._retention_ms

    def ensure_topic(self) -> None:
        if self._created:
            return
        # Looked up first: Kafka answers CreateTopics of an existing topic with TOPIC_AUTHORIZATION_FAILED to a
        # principal without Create, who may still hold the Write a run needs (docs/cli.md's grants).
        try:
            self._find_leader(absent_ok=True)
        except _Absent:
            pass
        else:
            self._created = True
            return
        rf = min(MAX_REPLICATION_FACTOR, len(self.client.brokers))
        configs = [{"name": "cleanup.policy", "value": "compact,delete"},
                   {"name": "retention.ms", "value": str(self.retention_ms)},
                   {"name": "compression.type", "value": "uncompressed"}]
        code, message = self._create(rf, configs)
        if code == ErrorCode.INVALID_CONFIG and message and "per-topic configs are not supported" in message:
            code, message = self._create(rf, [])  # moverd: the broker's retention, the readers' expiry
        if code not in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS):
            hint = _ACL_HINT.get(code, "")  # type: ignore[call-overload]
            raise refusal(f"cannot create the reassignment status topic {self.topic}{hint}", code, message)
        self._created = True

    def _create(self, rf: int, configs: list[dict[str, str]]) -> tuple[int, str | None]:
        body = {"topics": [{"name": self.topic, "num_partitions": 1, "replication_factor": rf, "assignments": [],
                            "configs": configs}], "timeout_ms": int(self.client.timeout * 1000),
                "validate_only": False}
        reply = call_controller(self.client, CREATE_TOPICS, body, lambda r: r["topics"][0]["error_code"])
        topic = reply["topics"][0]
        return topic["error_code"], topic.get("error_message")

    # ------------------------------------------------------------------------------------------------ I/O

    def append(self, key: str, value: dict[str, Any]) -> int:
        """The record's offset once the partition's in-sync replicas hold it (acks=all)."""
        self.ensure_topic()
        data = encode_batch([(key.encode(), json.dumps(value, separators=(",", ":"), sort_keys=True).encode())],
                            timestamp_ms=int(time.time() * 1000))
        body = {"transactional_id": None, "acks": -1, "timeout_ms": int(self.client.timeout * 1000),
                "topic_data": [{"name": self.topic, "partition_data": [{"index": 0, "records": data}]}]}
        reply = self._on_leader(PRODUCE, body, lambda r: r["responses"][0]["partition_responses"][0])
        return int(reply["responses"][0]["partition_responses"][0]["base_offset"])

    def read(self) -> list[Entry]:
        """Every record from the log's start to its high watermark, in offset order; [] before the first write.

        The records read are kept: a later read fetches only what was appended since (a run reads the log at every
        claim, hold and release; bench/throttle_holds.py). The log only grows, so what compaction or retention
        removes later is superseded by a record kept after it, or past every reader's expiry (status_store.fold);
        a log that restarts below what was read (the topic deleted and made again) is read again whole."""
        offset = self._next
        while True:
            part = self._fetch(offset)
            if part is None:
                self._kept, self._next = [], 0
                return []
            if part["error_code"] == ErrorCode.OFFSET_OUT_OF_RANGE:
                earliest = self._earliest()
                if earliest <= offset:  # past the log's end: a log made again
                    self._kept = []
                offset = earliest  # else the broker's retention removed the start
                continue
            hw = part["high_watermark"]
            records = part["records"] or b""
            progressed = False
            for record_offset, ts, key, value in decode_batches(bytes(records)):
                if record_offset < offset or record_offset >= hw:
                    continue
                offset = record_offset + 1
                progressed = True
                entry = _entry(record_offset, ts, key, value)
                if entry is not None:
                    self._kept.append(entry)
            if offset >= hw or not records:
                self._next = offset
                return list(self._kept)
            if not progressed:
                # Compaction left a batch that ends below `offset` here; a fetch never returns less than a batch.
                offset = _next_batch(bytes(records), offset)

    def _fetch(self, offset: int) -> dict[str, Any] | None:
        body = {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": FETCH_MAX_BYTES,
                "isolation_level": 0, "session_id": 0, "session_epoch": -1,
                "topics": [{"topic": self.topic, "partitions": [{"partition": 0, "fetch_offset": offset,
                                                                 "log_start_offset": -1,
                                                                 "partition_max_bytes": FETCH_MAX_BYTES}]}],
                "forgotten_topics_data": [], "rack_id": ""}
        try:
            reply = self._on_leader(FETCH, body, lambda r: r["responses"][0]["partitions"][0],
                                    accept=(ErrorCode.OFFSET_OUT_OF_RANGE,), absent_ok=True)
        except _Absent:
            return None
        return reply["responses"][0]["partitions"][0]

    def _earliest(self) -> int:
        body = {"replica_id": -1, "isolation_level": 0,
                "topics": [{"name": self.topic, "partitions": [{"partition_index": 0, "timestamp": EARLIEST}]}]}
        reply = self._on_leader(LIST_OFFSETS, body, lambda r: r["topics"][0]["partitions"][0])
        return int(reply["topics"][0]["partitions"][0]["offset"])

    def _on_leader(self, api: Any, body: dict[str, Any], part: Any, accept: tuple[int, ...] = (),
                   absent_ok: bool = False) -> dict[str, Any]:
        """`api` on the partition's leader; a leader that moved, or a topic whose leader is not elected yet, is
        looked up again for LEADER_WAIT_S."""
        deadline = time.monotonic() + LEADER_WAIT_S
        last = ""
        while True:
            leader = self._find_leader(absent_ok)
            try:
                reply = self.client.connection(leader).call(api, body)
            except ClientError as e:
                last = str(e)
                self._leader = None
                try:
                    self.client.reconnect(leader)
                except ClientError:
                    pass
            else:
                code = part(reply)["error_code"]
                if code == ErrorCode.NONE or code in accept:
                    return reply
                if code not in _LEADER_CODES:
                    hint = _ACL_HINT.get(code, "")
                    raise refusal(f"{api.name} of the reassignment status topic {self.topic}{hint}", code,
                                  part(reply).get("error_message"))
                last = f"{api.name}: {error_name(code)}"
                self._leader = None
            if time.monotonic() >= deadline:
                raise ClusterUnavailable(f"the reassignment status topic {self.topic} has no leader that answers "
                                         f"({last})")
            time.sleep(0.2)

    def _find_leader(self, absent_ok: bool) -> int:
        if self._leader is not None:
            return self._leader
        reply = self.client.metadata([self.topic])
        topic = next((t for t in reply["topics"] if t["name"] == self.topic),
                     {"error_code": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "partitions": []})
        code = topic["error_code"]
        if code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION and absent_ok and not self._created:
            raise _Absent
        if code == ErrorCode.TOPIC_AUTHORIZATION_FAILED:
            raise AdminError(f"not authorized to read the reassignment status topic {self.topic}"
                             + _ACL_HINT[ErrorCode.TOPIC_AUTHORIZATION_FAILED])
        leader = next((p["leader_id"] for p in topic.get("partitions") or [] if p["partition_index"] == 0), -1)
        if code != ErrorCode.NONE or leader < 0 or leader not in self.client.brokers:
            if code not in (ErrorCode.NONE, *RETRIABLE, *_LEADER_CODES):
                raise refusal(f"Metadata of the reassignment status topic {self.topic}", code, None)
            if leader >= 0 and leader not in self.client.brokers:
                self.client.brokers.update(_brokers(self.client))
            return min(self.client.brokers) if leader < 0 else leader
        self._leader = leader
        return leader


class _Absent(Exception):
    """The status topic does not exist yet: nothing was ever written."""


def _brokers(client: Client) -> dict[int, tuple[str, int]]:
    reply = client.metadata([])
    return {b["node_id"]: (b["host"], b["port"]) for b in reply["brokers"]}


def _entry(offset: int, ts: int, key: bytes | None, value: bytes | None) -> Entry | None:
    """A record of ours, or None (a tombstone, or bytes no version of the tools wrote)."""
    if key is None or value is None:
        return None
    try:
        doc = bounded_json.loads(value)  # anyone with Write on the topic could nest past the recursion limit
        text = key.decode()
    except (UnicodeDecodeError, ValueError):
        return None
    return Entry(offset, ts, text, doc) if isinstance(doc, dict) else None


def _next_batch(data: bytes, offset: int) -> int:
    import struct

    base, length = struct.unpack_from(">qi", data, 0)
    last_delta = struct.unpack_from(">i", data, 23)[0]
    return max(offset, base + last_delta + 1)
