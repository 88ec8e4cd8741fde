"""In-process fake Apache Kafka brokers that answer as a given Kafka version does, for tests and benchmarks.

Apache Kafka cannot run here, so `collect`, `execute` and `mover-log-dirs` are tested against brokers that behave
exactly as each release behaves on the wire (docs/kafka-compat.md):

- ApiVersions at a version the broker does not know: a v0 answer with UNSUPPORTED_VERSION (35) whose api_keys is
  EMPTY before Kafka 2.4 and holds only ApiVersions' own range from 2.4 on (KIP-511);
- any other API at a version the broker does not offer: the connection is closed, no answer;
- DescribeLogDirs v0-1 before 2.6 and v0-4 (total/usable bytes) from 3.3; 4.0 removed DescribeLogDirs v0 and
  AlterReplicaLogDirs v0 (KIP-896); 4.3 adds DescribeLogDirs v5 (IsCordoned) and `cordoned.log.dirs` (KIP-1066): a
  move into a cordoned dir, even the replica's current one, answers INVALID_REPLICA_ASSIGNMENT (39).

    cluster = FakeCluster(KAFKA_2_3, brokers=3, dirs=["/d1", "/d2"])
    cluster.add_replica(broker=0, log_dir="/d1", topic="t", partition=0, size=1000)   # and Metadata's assignment
    with cluster:                                  # every broker listens on 127.0.0.1, free port
        cluster.bootstrap                          # "127.0.0.1:PORT,..."

From 2.4 the brokers serve KIP-455 (List/AlterPartitionReassignments) and ElectLeaders, with topic configs and the
replication throttle's broker keys: a reassignment completes after `cluster.reassign_polls` answers of
ListPartitionReassignments (its new replicas join the ISR then), a leader stays until ElectLeaders or until it leaves
the ISR. The 2.x fakes run in ZooKeeper mode: only `cluster.controller` carries those requests out and Metadata names
it; any other broker answers NOT_CONTROLLER. The 3.9 and 4.x fakes are KRaft: any broker answers, and Metadata's
controller_id is a random live broker, as a KRaft broker's is.

Moves asked for with AlterReplicaLogDirs grow a future replica by `move_step` bytes per DescribeLogDirs answered by
that broker (so a test drives time by polling), then swap. `cluster.peak_moves` records the most moves that ran at
once per broker, per dir and per cluster: what a test of execute's limits observes. One thread per connection.

`growing_copy_broker()` is the other kind of fake: a mover.server Server (moverd's own transport) answering
Metadata and DescribeLogDirs as Kafka does for one copy in progress, to which a test adds handlers of its own
(mover-log-dirs' progress and reassign tests hook AlterReplicaLogDirs or IncrementalAlterConfigs into it).
"""

from __future__ import annotations

import random
import socket
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

from mover.admin.reassign.replication_throttle import FOLLOWER_RATE, LEADER_RATE
from mover.api import with_api_defaults
from mover.config.broker import CORDON_ALL, CORDONED_KEY, THROTTLE_KAFKA_KEY
from mover.testing.fake_topic_log import APIS_2, APIS_3, FakeTopicLogs
from mover.testing.server import Running, serve
from mover.wire import API_BY_KEY, DecodeError, FrameDecoder, UnsupportedRequest, encode_response, join_chunks
from mover.wire.codec import decode_struct
from mover.wire.errors import ErrorCode
from mover.wire.header import decode_request_header
from mover.wire.messages import (
    ALTER_PARTITION_REASSIGNMENTS,
    ALTER_REPLICA_LOG_DIRS,
    API_VERSIONS,
    DESCRIBE_CONFIGS,
    DESCRIBE_LOG_DIRS,
    ELECT_LEADERS,
    INCREMENTAL_ALTER_CONFIGS,
    LIST_PARTITION_REASSIGNMENTS,
    METADATA,
)

# Kafka's ConfigResource.Type.BROKER, IncrementalAlterConfigs' SET / DELETE, DescribeConfigs' config sources.
_BROKER_RESOURCE = 4
_TOPIC_RESOURCE = 2
_DYNAMIC_TOPIC_CONFIG = 1
# Topic keys and their defaults as DescribeConfigs lists them when a topic does not set them.
_TOPIC_DEFAULTS = {"min.insync.replicas": "1", "leader.replication.throttled.replicas": "",
                   "follower.replication.throttled.replicas": ""}
# Broker keys every version knows besides its move throttle: KIP-73's replication throttle (unset: Long.MAX_VALUE).
_REPLICATION_RATES = (LEADER_RATE, FOLLOWER_RATE)
_OP_SET = 0
_OP_DELETE = 1
_OP_APPEND = 2
_OP_SUBTRACT = 3
_DYNAMIC_BROKER_CONFIG = 2
_STATIC_BROKER_CONFIG = 4
_DEFAULT_CONFIG = 5
_NOT_CONTROLLER = "This is not the correct controller for this cluster."
# Kafka's default move throttle: Long.MAX_VALUE, i.e. unlimited.
_THROTTLE_DEFAULT = str((1 << 63) - 1)


@dataclass(frozen=True)
class KafkaVersion:
    """What one Apache Kafka release offers: {api key: (min, max)} and how it answers an unknown ApiVersions."""

    name: str
    apis: dict[int, tuple[int, int]]
    empty_api_keys_on_unknown_version: bool  # before 2.4 (KIP-511)
    # 3.x (measured on 3.7.0, KRaft): IncrementalAlterConfigs stores a broker key it does not know, DescribeConfigs
    # lists it sensitive with a null value, and Kafka's unset move throttle is left out of DescribeConfigs. 2.x
    # brokers were not measured on this: their fakes refuse an unknown key, as the tools once assumed.
    config_quirks_3x: bool = False
    # ZooKeeper mode: only the controller carries out KIP-455's requests and ElectLeaders; any other broker answers
    # NOT_CONTROLLER, and Metadata names the controller. KRaft (the 3.9 and 4.x fakes): every broker forwards them,
    # and Metadata names a random live broker (docs/kafka-compat.md).
    zookeeper: bool = False

    @property
    def has_cordons(self) -> bool:
        return self.apis.get(DESCRIBE_LOG_DIRS.key, (0, 0))[1] >= 5

    def offers(self, api_key: int, version: int) -> bool:
        lo_hi = self.apis.get(api_key)
        return lo_hi is not None and lo_hi[0] <= version <= lo_hi[1]


_ADMIN_2_3 = {DESCRIBE_CONFIGS.key: (0, 2), INCREMENTAL_ALTER_CONFIGS.key: (0, 0), ALTER_REPLICA_LOG_DIRS.key: (0, 1)}
_ADMIN_3 = {DESCRIBE_CONFIGS.key: (0, 4), INCREMENTAL_ALTER_CONFIGS.key: (0, 1), ALTER_REPLICA_LOG_DIRS.key: (0, 2)}
# KIP-455 (2.4+) and ElectLeaders (KIP-460).
_KIP_455 = {ALTER_PARTITION_REASSIGNMENTS.key: (0, 0), LIST_PARTITION_REASSIGNMENTS.key: (0, 0),
            ELECT_LEADERS.key: (0, 2)}
KAFKA_2_3 = KafkaVersion("2.3", {API_VERSIONS.key: (0, 2), METADATA.key: (0, 7), DESCRIBE_LOG_DIRS.key: (0, 1),
                                 **_ADMIN_2_3, **APIS_2}, True, zookeeper=True)
KAFKA_2_4 = KafkaVersion("2.4", {API_VERSIONS.key: (0, 3), METADATA.key: (0, 9), DESCRIBE_LOG_DIRS.key: (0, 1),
                                 **_ADMIN_2_3, INCREMENTAL_ALTER_CONFIGS.key: (0, 1), **_KIP_455, **APIS_2}, False,
                         zookeeper=True)
KAFKA_3_9 = KafkaVersion("3.9", {API_VERSIONS.key: (0, 4), METADATA.key: (0, 12), DESCRIBE_LOG_DIRS.key: (0, 4),
                                 **_ADMIN_3, **_KIP_455, **APIS_3}, False, config_quirks_3x=True)
# 4.0 removed DescribeLogDirs v0 and AlterReplicaLogDirs v0 (KIP-896) and added Metadata v13; clients that speak
# less pick their own maximum.
_ADMIN_4 = {**_ADMIN_3, ALTER_REPLICA_LOG_DIRS.key: (1, 2), **_KIP_455, **APIS_3}
KAFKA_4_1 = KafkaVersion("4.1", {API_VERSIONS.key: (0, 4), METADATA.key: (0, 13), DESCRIBE_LOG_DIRS.key: (1, 4),
                                 **_ADMIN_4}, False, config_quirks_3x=True)
# 4.3 (KIP-1066): DescribeLogDirs v5 reports IsCordoned; cordoned.log.dirs is a per-broker dynamic key.
KAFKA_4_3 = KafkaVersion("4.3", {API_VERSIONS.key: (0, 4), METADATA.key: (0, 13), DESCRIBE_LOG_DIRS.key: (1, 5),
                                 **_ADMIN_4}, False, config_quirks_3x=True)
VERSIONS = {v.name: v for v in (KAFKA_2_3, KAFKA_2_4, KAFKA_3_9, KAFKA_4_1, KAFKA_4_3)}

# How a broker misbehaves: answers, never answers DescribeLogDirs, or hangs up on it.
OK = "ok"
SLOW = "slow"
REFUSE = "refuse"


@dataclass
class Move:
    topic: str
    partition: int
    source: str
    destination: str
    size: int
    copied: int = 0


@dataclass
class FakeBroker:
    cluster: FakeCluster
    node_id: int
    dirs: list[str]
    # dir -> {(topic, partition): size}
    replicas: dict[str, dict[tuple[str, int], int]] = field(default_factory=dict)
    moves: dict[tuple[str, int], Move] = field(default_factory=dict)
    offline: set[str] = field(default_factory=set)
    total_bytes: int = 10 << 30
    configs: dict[str, str] = field(default_factory=dict)  # set at run time for this broker (DYNAMIC_BROKER_CONFIG)
    static_configs: dict[str, str] = field(default_factory=dict)  # server.properties (STATIC_BROKER_CONFIG)
    config_history: list[tuple[str, str | None]] = field(default_factory=list)
    # 3.x: unknown keys deleted at run time, which DescribeConfigs of every key still lists (DEFAULT_CONFIG, null).
    forgotten: set[str] = field(default_factory=set)
    behaviour: str = OK
    paused: bool = False  # moves make no progress (a stalled copy)
    # Kafka 3.7.0 after KAFKA-16365: a copy once complete is never swapped in, until this is cleared (the broker
    # restarted). It keeps following its partition, so as on a partition being written its lag shows 0 and 1 in turn.
    unswapped: bool = False
    _looks: int = 0
    # Fenced by the controller (a KRaft controller does it ~9 s after a broker stops heartbeating, broker.session.
    # timeout.ms): Metadata then leaves it out of its brokers and lists it among each partition's offline replicas.
    fenced: bool = False
    # Benchmarks: encode each distinct DescribeLogDirs request's answer once and replay it (state must not change).
    canned: bool = False
    latency: float = 0.0  # seconds before each DescribeLogDirs answer (a broker far away, or busy)
    # The next this many AlterReplicaLogDirs are carried out and the connection closed instead of answering: a broker
    # that died right after taking the request (Kafka resumes the copy when it is back).
    unanswered_alters: int = 0
    _canned: dict[tuple[int, bytes], bytes] = field(default_factory=dict)
    port: int = 0
    _sock: socket.socket | None = None

    # ------------------------------------------------------------------ state the APIs read and change

    def cordoned(self) -> set[str]:
        """The dirs cordoned.log.dirs names now (dynamic value over server.properties; `*` = every dir)."""
        if not self.cluster.version.has_cordons:
            return set()
        raw = self.configs.get(CORDONED_KEY, self.static_configs.get(CORDONED_KEY, ""))
        entries = {e.strip() for e in raw.split(",") if e.strip()}
        return set(self.dirs) if CORDON_ALL in entries else entries & set(self.dirs)

    def where(self, topic: str, partition: int) -> str | None:
        for d, held in self.replicas.items():
            if (topic, partition) in held:
                return d
        return None

    def _progress(self) -> None:
        if self.paused:
            return
        for key, move in list(self.moves.items()):
            move.copied = min(move.size, move.copied + self.cluster.move_step)
            if move.copied >= move.size and not self.unswapped:
                size = self.replicas[move.source].pop(key)
                self.replicas[move.destination][key] = size
                del self.moves[key]

    def describe_log_dirs(self, version: int, request: dict[str, Any]) -> dict[str, Any]:
        wanted = None
        if request["topics"] is not None:
            wanted = {(t["topic"], p) for t in request["topics"] for p in t["partitions"]}
        with self.cluster.lock:
            self._progress()
            cordoned = self.cordoned()
            results = []
            for d in self.dirs:
                if d in self.offline:
                    results.append({"error_code": ErrorCode.KAFKA_STORAGE_ERROR, "log_dir": d, "topics": []})
                    continue
                by_topic: dict[str, list[dict[str, Any]]] = {}
                for (t, p), size in sorted(self.replicas[d].items()):
                    if wanted is None or (t, p) in wanted:
                        by_topic.setdefault(t, []).append({"partition_index": p, "partition_size": size,
                                                           "offset_lag": 0, "is_future_key": False})
                for (t, p), move in sorted(self.moves.items()):
                    if move.destination == d and (wanted is None or (t, p) in wanted):
                        lag = max(move.size - move.copied, 0)
                        if self.unswapped and not lag:
                            self._looks += 1
                            lag = self._looks % 2
                        by_topic.setdefault(t, []).append({
                            "partition_index": p, "partition_size": move.copied, "offset_lag": lag,
                            "is_future_key": True})
                used = sum(self.replicas[d].values()) + sum(m.copied for m in self.moves.values()
                                                            if m.destination == d)
                results.append({"error_code": 0, "log_dir": d,
                                "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()],
                                "total_bytes": self.total_bytes, "usable_bytes": self.total_bytes - used,
                                "is_cordoned": d in cordoned})
        return {"results": results}

    def alter_replica_log_dirs(self, version: int, request: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, list[dict[str, Any]]] = {}
        with self.cluster.lock:
            for entry in request["dirs"]:
                for t in entry["topics"]:
                    for p in t["partitions"]:
                        out.setdefault(t["name"], []).append(
                            {"partition_index": p, "error_code": int(self._alter(t["name"], p, entry["path"]))})
            self.cluster.record_peaks()
        return {"results": [{"topic_name": t, "partitions": ps} for t, ps in out.items()]}

    def _alter(self, topic: str, partition: int, path: str) -> ErrorCode:
        if path not in self.dirs:
            return ErrorCode.LOG_DIR_NOT_FOUND
        if path in self.offline:
            return ErrorCode.KAFKA_STORAGE_ERROR
        if path in self.cordoned():
            # Kafka 4.3's ReplicaManager, right after the offline check: even the replica's own dir is refused.
            return ErrorCode.INVALID_REPLICA_ASSIGNMENT
        current = self.where(topic, partition)
        if current is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        running = self.moves.pop((topic, partition), None)
        if current == path:
            return ErrorCode.NONE  # Kafka: destination = current dir cancels a running move
        if running is not None and running.destination == path:
            self.moves[(topic, partition)] = running
            return ErrorCode.NONE
        self.moves[(topic, partition)] = Move(topic, partition, current, path, self.replicas[current][(topic,
                                                                                                         partition)])
        return ErrorCode.NONE

    def incremental_alter_configs(self, version: int, request: dict[str, Any]) -> dict[str, Any]:
        quirks = self.cluster.version.config_quirks_3x
        responses = []
        with self.cluster.lock:
            for r in request["resources"]:
                if r["resource_type"] == _TOPIC_RESOURCE:
                    code, message = self.cluster.alter_topic_config(r["resource_name"], r["configs"])
                    responses.append({"error_code": int(code), "error_message": message,
                                      "resource_type": r["resource_type"], "resource_name": r["resource_name"]})
                    continue
                code, message = self._other_broker(r)
                for c in r["configs"] if code == ErrorCode.NONE else []:
                    if c["name"] == CORDONED_KEY and self.cluster.version.has_cordons:
                        code, message = self._alter_cordon(r["resource_name"], c["config_operation"], c["value"])
                        if code:
                            break
                        continue
                    # The move throttle is the only other broker key this fake knows. 2.x's fakes refuse any other;
                    # a 3.x broker takes and keeps it, where it limits nothing.
                    if c["name"] not in (THROTTLE_KAFKA_KEY, *_REPLICATION_RATES) and not quirks:
                        code, message = ErrorCode.INVALID_CONFIG, f"Unknown broker config {c['name']}"
                        break
                    if c["config_operation"] == _OP_SET:
                        self.configs[c["name"]] = c["value"]
                        self.forgotten.discard(c["name"])
                    elif c["config_operation"] == _OP_DELETE:
                        if self.configs.pop(c["name"], None) is not None and c["name"] != THROTTLE_KAFKA_KEY:
                            self.forgotten.add(c["name"])
                    self.config_history.append((c["name"], self.configs.get(c["name"])))
                responses.append({"error_code": int(code), "error_message": message,
                                  "resource_type": r["resource_type"], "resource_name": r["resource_name"]})
        return {"responses": responses}

    def _alter_cordon(self, resource: str, op: int, value: str | None) -> tuple[ErrorCode, str | None]:
        """cordoned.log.dirs as Kafka 4.3 takes it: per broker only; entries must be log dirs or `*`; APPEND and
        SUBTRACT start from the broker's own dynamic value (else the empty default)."""
        if resource == "":
            return (ErrorCode.INVALID_REQUEST, "Cannot update these configs at default cluster level, broker id "
                    f"must be specified: {CORDONED_KEY}")
        given = [e.strip() for e in (value or "").split(",") if e.strip()]
        bad = [e for e in given if e != CORDON_ALL and e not in self.dirs]
        if bad:
            return ErrorCode.INVALID_CONFIG, f"Invalid value for {CORDONED_KEY}: {', '.join(bad)} not in log.dirs"
        current = [e for e in self.configs.get(CORDONED_KEY, "").split(",") if e]
        if op == _OP_SET:
            new: list[str] | None = given
        elif op == _OP_DELETE:
            new = None
        elif op == _OP_APPEND:
            new = current + [e for e in given if e not in current]
        else:
            new = [e for e in current if e not in given]
        if new is None:
            self.configs.pop(CORDONED_KEY, None)
        else:
            self.configs[CORDONED_KEY] = ",".join(new)
        self.config_history.append((CORDONED_KEY, self.configs.get(CORDONED_KEY)))
        return ErrorCode.NONE, None

    def _other_broker(self, resource: dict[str, Any]) -> tuple[ErrorCode, str | None]:
        """A broker answers for its own configs only, on every version (docs/kafka-compat.md): another's id is
        INVALID_REQUEST in both DescribeConfigs and IncrementalAlterConfigs."""
        name = resource["resource_name"]
        if resource["resource_type"] != _BROKER_RESOURCE or name in ("", str(self.node_id)):
            return ErrorCode.NONE, None
        return ErrorCode.INVALID_REQUEST, f"Unexpected broker id, expected {self.node_id}, but received {name}"

    def describe_configs(self, version: int, request: dict[str, Any]) -> dict[str, Any]:
        """As Kafka answers: every key it knows (here its move throttle, and from 4.3 cordoned.log.dirs) with its
        effective value and where that comes from (per-broker dynamic, server.properties, built-in default). 2.x
        leaves keys it does not know out; 3.x lists an unknown key set at run time as sensitive with a null value,
        and leaves its own move throttle out while nothing sets it (docs/kafka-compat.md)."""
        quirks = self.cluster.version.config_quirks_3x
        results = []
        with self.cluster.lock:
            own = [THROTTLE_KAFKA_KEY, *_REPLICATION_RATES,
                   *([CORDONED_KEY] if self.cluster.version.has_cordons else [])]
            for r in request["resources"]:
                if r["resource_type"] == _TOPIC_RESOURCE:
                    code, message, entries = self.cluster.topic_config(r["resource_name"], r["configuration_keys"])
                    results.append({"error_code": int(code), "error_message": message,
                                    "resource_type": r["resource_type"], "resource_name": r["resource_name"],
                                    "configs": entries})
                    continue
                code, message = self._other_broker(r)
                keys = r["configuration_keys"]
                if code != ErrorCode.NONE:
                    keys = []
                elif keys is None:
                    keys = [*own, *(k for k in self.configs if k not in own), *sorted(self.forgotten)]
                entries = [e for e in (self._config_entry(k, quirks) for k in keys) if e is not None]
                results.append({"error_code": int(code), "error_message": message,
                                "resource_type": r["resource_type"], "resource_name": r["resource_name"],
                                "configs": entries})
        return {"results": results}

    def _config_entry(self, key: str, quirks: bool) -> dict[str, Any] | None:
        read_only = quirks  # 3.7.0 calls even its dynamic move throttle read-only in DescribeConfigs
        sensitive = False
        if key == CORDONED_KEY and self.cluster.version.has_cordons:
            read_only = False  # a per-broker dynamic key in 4.3
            if key in self.configs:
                value, source = self.configs[key], _DYNAMIC_BROKER_CONFIG
            elif key in self.static_configs:
                value, source = self.static_configs[key], _STATIC_BROKER_CONFIG
            else:
                value, source = "", _DEFAULT_CONFIG
        elif key in _REPLICATION_RATES:
            read_only = False
            value, source = (self.configs[key], _DYNAMIC_BROKER_CONFIG) if key in self.configs else (
                _THROTTLE_DEFAULT, _DEFAULT_CONFIG)
        elif key != THROTTLE_KAFKA_KEY:
            if not quirks or (key not in self.configs and key not in self.forgotten):
                return None
            value, source, sensitive = None, _DYNAMIC_BROKER_CONFIG if key in self.configs else _DEFAULT_CONFIG, True
        elif key in self.configs:
            value, source = self.configs[key], _DYNAMIC_BROKER_CONFIG
        elif key in self.static_configs:
            value, source = self.static_configs[key], _STATIC_BROKER_CONFIG
        elif quirks:
            return None
        else:
            value, source = _THROTTLE_DEFAULT, _DEFAULT_CONFIG
        return {"name": key, "value": value, "read_only": read_only, "config_source": source,
                "is_default": source == _DEFAULT_CONFIG, "is_sensitive": sensitive, "synonyms": []}

    def _refused_here(self) -> bool:
        """ZooKeeper mode: a broker that is not the controller carries out none of KIP-455's requests."""
        return self.cluster.version.zookeeper and self.node_id != self.cluster.controller

    def list_partition_reassignments(self, version: int, request: dict[str, Any]) -> dict[str, Any]:
        if self._refused_here():
            return {"error_code": int(ErrorCode.NOT_CONTROLLER), "error_message": _NOT_CONTROLLER, "topics": []}
        return {"error_code": 0, "error_message": None, "topics": self.cluster.list_reassignments(request["topics"])}

    def alter_partition_reassignments(self, version: int, request: dict[str, Any]) -> dict[str, Any]:
        if self._refused_here():
            return {"error_code": int(ErrorCode.NOT_CONTROLLER), "error_message": _NOT_CONTROLLER, "responses": []}
        return {"error_code": 0, "error_message": None,
                "responses": self.cluster.alter_reassignments(request["topics"])}

    def elect_leaders(self, version: int, request: dict[str, Any]) -> dict[str, Any]:
        wanted = request["topic_partitions"]
        if self._refused_here():  # Kafka's ZooKeeper-mode controller code puts it on every partition asked
            results = [{"topic": t["topic"], "partition_result": [
                {"partition_id": p, "error_code": int(ErrorCode.NOT_CONTROLLER), "error_message": _NOT_CONTROLLER}
                for p in t["partitions"]]} for t in wanted or []]
        else:
            results = self.cluster.elect_preferred(wanted)
        return {"error_code": 0, "replica_election_results": results}

    # ------------------------------------------------------------------ the socket side

    def start(self) -> None:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", self.port))
        sock.listen(64)
        self._sock = sock
        self.port = sock.getsockname()[1]
        threading.Thread(target=self._accept, args=(sock,), name=f"fake-kafka-{self.node_id}", daemon=True).start()

    def fence(self) -> None:
        """Down and fenced: what a real cluster shows of a broker that died ~10 s ago."""
        self.stop()
        self.fenced = True

    def stop(self) -> None:
        """Stop listening (the broker is down); connections already open are closed too."""
        if self._sock is not None:
            # close() alone leaves a thread blocked in accept() holding the socket open (and accepting); shutdown
            # wakes it.
            try:
                self._sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self._sock.close()
            self._sock = None
        for conn in self.cluster.take_connections(self):
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            conn.close()

    def _accept(self, sock: socket.socket) -> None:
        while True:
            try:
                conn, _ = sock.accept()
            except OSError:
                return
            self.cluster.keep_connection(self, conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        decoder = FrameDecoder()
        try:
            while True:
                data = conn.recv(65536)
                if not data:
                    return
                for frame in decoder.feed(data):
                    reply = self._answer(frame)
                    if reply is None:
                        return
                    conn.sendall(reply)
        except (OSError, DecodeError):
            return
        finally:
            conn.close()

    def _answer(self, frame: bytes) -> bytes | None:
        """The framed answer, or None to close the connection as the real broker does."""
        version_of = self.cluster.version
        try:
            header, api, offset = decode_request_header(frame, API_BY_KEY)
        except UnsupportedRequest as e:
            header, api, offset = e.header, None, 0
        key, version = header.api_key, header.api_version
        if key == API_VERSIONS.key:
            if api is None or not version_of.offers(key, version):
                own = [] if version_of.empty_api_keys_on_unknown_version else [
                    {"api_key": key, "min_version": version_of.apis[key][0], "max_version": version_of.apis[key][1]}]
                return join_chunks(encode_response(API_VERSIONS, 0, header.correlation_id, {
                    "error_code": int(ErrorCode.UNSUPPORTED_VERSION), "api_keys": own}))
            keys = [{"api_key": k, "min_version": lo, "max_version": hi}
                    for k, (lo, hi) in sorted(version_of.apis.items())]
            return join_chunks(encode_response(API_VERSIONS, version, header.correlation_id,
                                               {"error_code": 0, "api_keys": keys}))
        if api is None or not version_of.offers(key, version):
            return None
        handler: Callable[[int, dict[str, Any]], dict[str, Any]] | None = {
            METADATA.key: self.cluster.metadata,
            DESCRIBE_LOG_DIRS.key: self.describe_log_dirs,
            ALTER_REPLICA_LOG_DIRS.key: self.alter_replica_log_dirs,
            INCREMENTAL_ALTER_CONFIGS.key: self.incremental_alter_configs,
            DESCRIBE_CONFIGS.key: self.describe_configs,
            LIST_PARTITION_REASSIGNMENTS.key: self.list_partition_reassignments,
            ALTER_PARTITION_REASSIGNMENTS.key: self.alter_partition_reassignments,
            ELECT_LEADERS.key: self.elect_leaders,
            19: self.cluster.logs.create_topics, 0: self.cluster.logs.produce, 1: self.cluster.logs.fetch,
            2: self.cluster.logs.list_offsets,
        }.get(key)
        if handler is None:
            return None
        if key == DESCRIBE_LOG_DIRS.key and self.behaviour == SLOW:
            self.cluster.released.wait()
            return None
        if key == DESCRIBE_LOG_DIRS.key and self.behaviour == REFUSE:
            return None
        if key == DESCRIBE_LOG_DIRS.key and self.latency:
            self.cluster.released.wait(self.latency)
        if key == DESCRIBE_LOG_DIRS.key and self.canned:
            cache_key = (version, bytes(frame[offset:]))
            reply = self._canned.get(cache_key)
            if reply is None:
                body = decode_struct(api.request, version, api.is_flexible(version), frame, offset)
                reply = self._canned[cache_key] = join_chunks(encode_response(api, version, 0,
                                                                             handler(version, body)))
            # Frame: int32 size, then the response header's int32 correlation id.
            return reply[:4] + header.correlation_id.to_bytes(4, "big", signed=True) + reply[8:]
        body = decode_struct(api.request, version, api.is_flexible(version), frame, offset)
        answer = handler(version, body)
        if key == ALTER_REPLICA_LOG_DIRS.key and self.unanswered_alters > 0:
            self.unanswered_alters -= 1
            return None
        return join_chunks(encode_response(api, version, header.correlation_id, answer))


class FakeCluster:
    """Brokers of one fake Kafka cluster sharing Metadata (brokers and partition assignment)."""

    def __init__(self, version: KafkaVersion, *, brokers: int | list[int] = 1, dirs: list[str] | None = None,
                 move_step: int = 1 << 20, cluster_id: str = "fake-cluster") -> None:
        self.version = version
        self.lock = threading.RLock()
        self.released = threading.Event()  # SLOW brokers answer nothing until the cluster stops
        self.move_step = move_step
        self.cluster_id = cluster_id
        ids = list(range(brokers)) if isinstance(brokers, int) else brokers
        dirs = dirs or ["/d1", "/d2"]
        self.brokers = {i: FakeBroker(self, i, list(dirs), replicas={d: {} for d in dirs}) for i in ids}
        self.assignment: dict[tuple[str, int], list[int]] = {}
        # KIP-455: ZooKeeper mode's controller; each reassignment (original replicas, target, polls so far) is done
        # after `reassign_polls` answers of ListPartitionReassignments; elected leaders; topic configs.
        self.controller = min(ids)
        self.reassign_polls = 2
        self.reassigning: dict[tuple[str, int], tuple[list[int], list[int], int]] = {}
        self.leaders: dict[tuple[str, int], int] = {}
        self.topic_configs: dict[str, dict[str, str]] = {}
        self.logs = FakeTopicLogs()  # one-partition topics written and read (the tools' reassignment status topic)
        self.peak_moves: dict[str, int] = {}
        self._connections: dict[int, list[socket.socket]] = {}

    def add_replica(self, broker: int, log_dir: str, topic: str, partition: int, size: int) -> None:
        with self.lock:
            self.brokers[broker].replicas[log_dir][(topic, partition)] = size
            replicas = self.assignment.setdefault((topic, partition), [])
            if broker not in replicas:
                replicas.append(broker)
            self.leaders.setdefault((topic, partition), broker)

    def remove_partition(self, topic: str, partition: int) -> None:
        with self.lock:
            self.assignment.pop((topic, partition), None)
            for b in self.brokers.values():
                for held in b.replicas.values():
                    held.pop((topic, partition), None)
                b.moves.pop((topic, partition), None)

    def running_moves(self) -> list[tuple[int, Move]]:
        with self.lock:
            return [(b.node_id, m) for b in self.brokers.values() for m in b.moves.values()]

    def record_peaks(self) -> None:
        """Remember the most moves running at once: per cluster, per broker and per dir (source or destination)."""
        with self.lock:
            counts: dict[str, int] = {"cluster": 0}
            for b in self.brokers.values():
                counts["cluster"] += len(b.moves)
                counts[f"broker {b.node_id}"] = len(b.moves)
                for m in b.moves.values():
                    for d in {m.source, m.destination}:
                        k = f"dir {b.node_id}:{d}"
                        counts[k] = counts.get(k, 0) + 1
            for k, n in counts.items():
                self.peak_moves[k] = max(self.peak_moves.get(k, 0), n)

    def peak(self, kind: str) -> int:
        """The most moves seen at once for `kind` "cluster", "broker" or "dir" (the maximum over all of them)."""
        return max((n for k, n in self.peak_moves.items() if k.split(" ")[0] == kind), default=0)

    def replicas(self, tp: tuple[str, int]) -> list[int]:
        """All replicas of `tp`: during a reassignment the target's, then the original's that leave (Kafka's
        order)."""
        if tp in self.reassigning:
            original, target, _ = self.reassigning[tp]
            return target + [b for b in original if b not in target]
        return list(self.assignment[tp])

    def _isr_and_leader(self, tp: tuple[str, int], fenced: set[int]) -> tuple[list[int], int]:
        # A reassignment's new replicas join the ISR when it completes (the original ones are in sync).
        original = self.reassigning[tp][0] if tp in self.reassigning else self.assignment[tp]
        isr = [b for b in self.replicas(tp) if b in original and b not in fenced]
        # The leader stays while it is in sync (a new preferred one waits for ElectLeaders); else the first in sync.
        leader = self.leaders.get(tp, -1)
        if leader not in isr:
            leader = isr[0] if isr else -1
            if leader != -1:
                self.leaders[tp] = leader
        return isr, leader

    def metadata(self, version: int, request: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            topics: dict[str, list[dict[str, Any]]] = {}
            fenced = {b.node_id for b in self.brokers.values() if b.fenced}
            for tp in sorted(self.assignment):
                replicas = self.replicas(tp)
                isr, leader = self._isr_and_leader(tp, fenced)
                topics.setdefault(tp[0], []).append({"error_code": 0, "partition_index": tp[1], "leader_id": leader,
                                                     "replica_nodes": replicas, "isr_nodes": isr,
                                                     "offline_replicas": [b for b in replicas if b in fenced]})
            wanted = None if request["topics"] is None else {t["name"] for t in request["topics"]}
            live = [b.node_id for b in self.brokers.values() if not b.fenced]
            return {
                "brokers": [{"node_id": b.node_id, "host": "127.0.0.1", "port": b.port}
                            for b in self.brokers.values() if not b.fenced],
                "cluster_id": self.cluster_id,
                "controller_id": self.controller if self.version.zookeeper else random.choice(live or [-1]),
                "topics": [{"error_code": 0, "name": t, "is_internal": False, "partitions": ps}
                           for t, ps in topics.items() if wanted is None or t in wanted]
                + self.logs.metadata_topics(min(live or [-1]), wanted),
            }

    # ------------------------------------------------------------------ KIP-455 and topic configs

    def list_reassignments(self, wanted: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
        """The reassignments in progress (of `wanted`), after one more poll of each: one that had its polls is
        completed first, its replicas moved to the target's brokers."""
        with self.lock:
            for tp, (original, target, polls) in list(self.reassigning.items()):
                if polls + 1 >= self.reassign_polls:
                    del self.reassigning[tp]
                    self._place(tp, original, target)
                else:
                    self.reassigning[tp] = (original, target, polls + 1)
            names = None if wanted is None else {(t["name"], p) for t in wanted for p in t["partition_indexes"]}
            topics: dict[str, list[dict[str, Any]]] = {}
            for tp, (original, target, _) in sorted(self.reassigning.items()):
                if names is None or tp in names:
                    topics.setdefault(tp[0], []).append({
                        "partition_index": tp[1], "replicas": self.replicas(tp),
                        "adding_replicas": [b for b in target if b not in original],
                        "removing_replicas": [b for b in original if b not in target]})
            return [{"name": t, "partitions": ps} for t, ps in topics.items()]

    def _place(self, tp: tuple[str, int], original: list[int], target: list[int]) -> None:
        """A completed reassignment: the target's brokers hold the partition (in their first dir), the others not."""
        size = next((held[tp] for b in self.brokers.values() for held in b.replicas.values() if tp in held), 0)
        for b in self.brokers.values():
            has = any(tp in held for held in b.replicas.values())
            if b.node_id in target and not has:
                b.replicas[b.dirs[0]][tp] = size
            elif b.node_id not in target:
                for held in b.replicas.values():
                    held.pop(tp, None)
        self.assignment[tp] = list(target)

    def alter_reassignments(self, topics: list[dict[str, Any]]) -> list[dict[str, Any]]:
        responses = []
        with self.lock:
            for t in topics:
                results = []
                for p in t["partitions"]:
                    tp, target = (t["name"], p["partition_index"]), p["replicas"]
                    code, message = ErrorCode.NONE, None
                    if tp not in self.assignment:
                        code, message = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None
                    elif target is None:
                        if self.reassigning.pop(tp, None) is None:
                            code, message = ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, None
                    elif unknown := [b for b in target if b not in self.brokers]:
                        code, message = ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"Unknown broker id {unknown[0]}"
                    else:
                        original = self.reassigning[tp][0] if tp in self.reassigning else self.assignment[tp]
                        if list(target) == original:
                            self.reassigning.pop(tp, None)
                        else:
                            self.reassigning[tp] = (list(original), list(target), 0)
                    results.append({"partition_index": tp[1], "error_code": int(code), "error_message": message})
                responses.append({"name": t["name"], "partitions": results})
        return responses

    def elect_preferred(self, wanted: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
        with self.lock:
            asked = [(t["topic"], p) for t in wanted for p in t["partitions"]] if wanted is not None else sorted(
                self.assignment)
            fenced = {b.node_id for b in self.brokers.values() if b.fenced}
            results: dict[str, list[dict[str, Any]]] = {}
            for tp in asked:
                if tp not in self.assignment:
                    code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                else:
                    preferred = self.replicas(tp)[0]
                    isr, leader = self._isr_and_leader(tp, fenced)
                    if leader == preferred:
                        code = ErrorCode.ELECTION_NOT_NEEDED
                    elif preferred in isr:
                        self.leaders[tp], code = preferred, ErrorCode.NONE
                    else:
                        code = ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
                results.setdefault(tp[0], []).append({"partition_id": tp[1], "error_code": int(code),
                                                      "error_message": None})
            return [{"topic": t, "partition_result": ps} for t, ps in results.items()]

    def _has_topic(self, topic: str) -> bool:
        return any(t == topic for t, _ in self.assignment)

    def topic_config(self, topic: str, keys: list[str] | None) -> tuple[ErrorCode, str | None, list[dict[str, Any]]]:
        with self.lock:
            if not self._has_topic(topic):
                return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None, []
            own = self.topic_configs.get(topic, {})
            entries = []
            for key in keys if keys is not None else [*_TOPIC_DEFAULTS, *(k for k in own if k not in _TOPIC_DEFAULTS)]:
                if key in own:
                    value, source = own[key], _DYNAMIC_TOPIC_CONFIG
                elif key in _TOPIC_DEFAULTS:
                    value, source = _TOPIC_DEFAULTS[key], _DEFAULT_CONFIG
                else:
                    continue
                entries.append({"name": key, "value": value, "read_only": False, "config_source": source,
                                "is_default": source == _DEFAULT_CONFIG, "is_sensitive": False, "synonyms": []})
            return ErrorCode.NONE, None, entries

    def alter_topic_config(self, topic: str, configs: list[dict[str, Any]]) -> tuple[ErrorCode, str | None]:
        with self.lock:
            if not self._has_topic(topic):
                return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None
            own = self.topic_configs.setdefault(topic, {})
            for c in configs:
                if c["config_operation"] == _OP_SET:
                    own[c["name"]] = c["value"]
                elif c["config_operation"] == _OP_DELETE:
                    own.pop(c["name"], None)
                else:
                    return ErrorCode.INVALID_REQUEST, f"{c['name']}: only SET and DELETE here"
            return ErrorCode.NONE, None

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{b.port}" for b in self.brokers.values() if b._sock is not None)

    def keep_connection(self, broker: FakeBroker, conn: socket.socket) -> None:
        with self.lock:
            self._connections.setdefault(broker.node_id, []).append(conn)

    def take_connections(self, broker: FakeBroker) -> list[socket.socket]:
        with self.lock:
            return self._connections.pop(broker.node_id, [])

    def start(self) -> FakeCluster:
        self.released.clear()
        for b in self.brokers.values():
            b.start()
        return self

    def stop(self) -> None:
        self.released.set()
        for b in self.brokers.values():
            b.stop()

    def __enter__(self) -> FakeCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# ------------------------------------------------------------------------------------ one copy on mover.server


class GrowingCopyBroker:
    """A broker with Kafka's log-dir APIs only (no api 32100): a copy that grows, then is swapped in."""

    def __init__(self) -> None:
        self.port = 0
        self.calls = 0
        self.lock = threading.Lock()

    def metadata(self, header: object, request: dict[str, Any]) -> dict[str, Any]:
        topics = [{"error_code": 0, "name": "big", "partitions": [
            {"error_code": 0, "partition_index": 0, "leader_id": 0, "replica_nodes": [0], "isr_nodes": [0]}]}]
        return {"brokers": [{"node_id": 0, "host": "127.0.0.1", "port": self.port}], "cluster_id": "c",
                "controller_id": 0, "topics": topics if request["topics"] is None or request["topics"] else []}

    def describe_log_dirs(self, header: object, request: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            self.calls += 1
            step = self.calls
        current_dir, future = ("/d1", min(250 * step, 1000)) if step <= 4 else ("/d2", None)

        def part(size: int, future_key: bool) -> dict[str, Any]:
            return {"name": "big", "partitions": [{"partition_index": 0, "partition_size": size, "offset_lag": 0,
                                                    "is_future_key": future_key}]}

        results = []
        for path in ("/d1", "/d2"):
            topics = []
            if path == current_dir:
                topics.append(part(1000, False))
            if path == "/d2" and future is not None:
                topics.append(part(future, True))
            results.append({"error_code": 0, "log_dir": path, "topics": topics, "total_bytes": 10_000,
                            "usable_bytes": 5_000})
        return {"results": results}


def growing_copy_broker(extra: dict[int, Any] | None = None
                        ) -> tuple[GrowingCopyBroker, AbstractContextManager[Running]]:
    """The fake and its server (not yet started): `with server as running: fake.port = running.port`."""
    fake = GrowingCopyBroker()
    handlers = {METADATA.key: fake.metadata, DESCRIBE_LOG_DIRS.key: fake.describe_log_dirs, **(extra or {})}
    return fake, serve(with_api_defaults(handlers))
