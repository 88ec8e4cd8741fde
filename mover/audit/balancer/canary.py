"""The balancer's canary: one single-record Produce with acks=all to a one-partition topic of its own, every
`interval_s`, its latency kept with the time it was taken; `p99_ms()` is the 99th percentile of those taken in the
last `window_s` seconds. A produce that fails or times out counts as `timeout_ms` (the cluster did not take the
record: at least as bad as a slow one), so a cluster that stops taking writes pauses the balancer too.

It runs on a thread of its own with its own connections (never the executor's client, which the loop's thread uses).
The topic is created once (CreateTopics, replication factor min(3, brokers), min.insync.replicas left to the
cluster) and left in place when the balancer stops: its few bytes are not worth a DeleteTopics that a restart would
undo (docs/operations.md says so).
"""

from __future__ import annotations

import math
import struct
import threading
import time
from collections import deque
from collections.abc import Callable

import crc32c

from mover.admin.client import Client, ClientError
from mover.admin.common import error_name
from mover.audit.fleet import ClusterSource
from mover.wire.errors import ErrorCode
from mover.wire.messages import CREATE_TOPICS, PRODUCE

DEFAULT_TOPIC = "__mover_balance_canary"
DEFAULT_INTERVAL_S = 1.0
DEFAULT_WINDOW_S = 60.0
PRODUCE_TIMEOUT_MS = 5000
# Fewer samples than this in the window: no percentile (a p99 of three samples is their maximum, noise).
MIN_SAMPLES = 5


def _varint(value: int) -> bytes:
    """Kafka's zigzag varint (record fields)."""
    z = (value << 1) ^ (value >> 63)
    out = bytearray()
    while True:
        byte = z & 0x7F
        z >>= 7
        if z:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def record_batch(value: bytes, timestamp_ms: int) -> bytes:
    """One v2 record batch holding one record (no key, no headers, no producer id): what a plain producer sends."""
    body = b"\x00" + _varint(0) + _varint(0) + _varint(-1) + _varint(len(value)) + value + _varint(0)
    record = _varint(len(body)) + body
    # From attributes to the end: what the CRC covers.
    tail = struct.pack(">hiqqqhii", 0, 0, timestamp_ms, timestamp_ms, -1, -1, -1, 1) + record
    head = struct.pack(">qiibI", 0, 4 + 1 + 4 + len(tail), -1, 2, crc32c.crc32c(tail))
    return head + tail


def p99(latencies_ms: list[float]) -> float | None:
    """The nearest-rank 99th percentile; None below MIN_SAMPLES."""
    if len(latencies_ms) < MIN_SAMPLES:
        return None
    ordered = sorted(latencies_ms)
    return ordered[max(0, math.ceil(0.99 * len(ordered)) - 1)]


class Canary:
    def __init__(self, source: ClusterSource, bootstrap: str, *, topic: str = DEFAULT_TOPIC,
                 interval_s: float = DEFAULT_INTERVAL_S, window_s: float = DEFAULT_WINDOW_S,
                 timeout_s: float = 10.0, say: Callable[[str], None] = lambda _: None) -> None:
        self.source = source
        self.bootstrap = bootstrap
        self.topic = topic
        self.interval_s = interval_s
        self.window_s = window_s
        self.timeout_s = timeout_s
        self.say = say
        self.created = False
        self.sent = 0
        self._samples: deque[tuple[float, float]] = deque()  # (monotonic time, latency ms)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._client: Client | None = None
        self._last_error: str | None = None

    # ------------------------------------------------------------------------ what the gate reads

    def p99_ms(self, now: float | None = None) -> float | None:
        now = time.monotonic() if now is None else now
        with self._lock:
            while self._samples and self._samples[0][0] < now - self.window_s:
                self._samples.popleft()
            return p99([ms for _, ms in self._samples])

    def record(self, latency_ms: float, at: float | None = None) -> None:
        with self._lock:
            self._samples.append((time.monotonic() if at is None else at, latency_ms))

    # ------------------------------------------------------------------------ the thread

    def start(self) -> Canary:
        self._thread = threading.Thread(target=self._run, name=f"canary-{self.source.name}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.timeout_s + PRODUCE_TIMEOUT_MS / 1000)
        if self._client is not None:
            self._client.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                self.produce_one()
                self._last_error = None
            except ClientError as e:
                self.record(float(PRODUCE_TIMEOUT_MS), started)
                text = f"canary of {self.source.name}: {e}"
                if text != self._last_error:  # one line per new trouble, not one per second
                    self.say(text)
                    self._last_error = text
                if self._client is not None:
                    self._client.close()
                    self._client = None
            self._stop.wait(max(0.0, self.interval_s - (time.monotonic() - started)))

    def _connect(self) -> Client:
        if self._client is None:
            self._client = Client(self.bootstrap, timeout=self.timeout_s, security=self.source.security)
        return self._client

    def ensure_topic(self) -> None:
        client = self._connect()
        rf = min(3, len(client.brokers))
        reply = client.any_connection().call(CREATE_TOPICS, {"topics": [{
            "name": self.topic, "num_partitions": 1, "replication_factor": rf, "assignments": [], "configs": []}],
            "timeout_ms": 30000, "validate_only": False})
        code = reply["topics"][0]["error_code"]
        if code not in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS):
            raise ClientError(f"cannot create topic {self.topic}: {error_name(code)}")
        if code == ErrorCode.NONE:
            self.say(f"canary of {self.source.name}: created topic {self.topic} (1 partition, replication factor "
                     f"{rf}); it stays when the balancer stops")
        self.created = True

    def _leader(self, client: Client) -> int:
        reply = client.metadata([self.topic])
        for t in reply["topics"]:
            if t["name"] == self.topic and t["error_code"] == ErrorCode.NONE:
                for p in t["partitions"]:
                    if p["partition_index"] == 0 and p["leader_id"] >= 0:
                        return int(p["leader_id"])
        raise ClientError(f"topic {self.topic} has no leader yet")

    def produce_one(self) -> float:
        """One acks=all produce; its latency in ms, recorded. A ClientError when it was not acknowledged."""
        client = self._connect()
        if not self.created:
            self.ensure_topic()
        leader = self._leader(client)
        now_ms = int(time.time() * 1000)
        started = time.monotonic()
        reply = client.connection(leader).call(PRODUCE, {
            "transactional_id": None, "acks": -1, "timeout_ms": PRODUCE_TIMEOUT_MS, "topic_data": [{
                "name": self.topic, "partition_data": [{"index": 0, "records": record_batch(
                    b"mover-balance canary %d" % now_ms, now_ms)}]}]})
        ms = (time.monotonic() - started) * 1000
        code = reply["responses"][0]["partition_responses"][0]["error_code"]
        if code != ErrorCode.NONE:
            raise ClientError(f"produce to {self.topic} answered {error_name(code)}")
        self.sent += 1
        self.record(ms, started)
        return ms
