"""A fake broker's moves between its log dirs (KIP-113): DescribeLogDirs and AlterReplicaLogDirs. A move advances only
when its broker answers DescribeLogDirs, by `cluster.move_step` bytes each time, so a test drives a move's time by its
own polls rather than by a clock, and a poll sees exactly the step it caused. AlterReplicaLogDirs refuses as Kafka's
ReplicaManager does (unknown, offline or, from 4.3, cordoned dir), and each records the cluster's peak of moves at
once: what a test of execute's limits observes."""

from __future__ import annotations

from typing import Any

from mover.testing.fake_kafka.broker_state import BrokerState, Move
from mover.wire.errors import ErrorCode


class LogDirApis(BrokerState):
    """The log-dir APIs of FakeBroker, over its dirs, replicas and moves."""

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
