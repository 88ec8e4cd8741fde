"""The two JSON files that say where replicas should live, parsed and checked before any broker is asked.

- kafka-reassign-partitions.sh's reassignment file (KIP-113 Scripts 2):
  `{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1],"log_dirs":["/d2"]}]}`; `log_dirs` is
  optional, one entry per replica, each "any" or an absolute path.
- kafka-log-dirs.sh --move's file for one broker: `{"version":1,"partitions":[{"topic","partition","log_dir"}]}`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mover.admin.common import AdminError, TopicPartitionReplica
from mover.wire.messages.log_dirs import ANY_LOG_DIR
from mover.zk import bounded_json


@dataclass(frozen=True)
class PartitionTarget:
    topic: str
    partition: int
    replicas: tuple[int, ...]
    log_dirs: tuple[str, ...]  # one per replica; "any" = wherever it is

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    def replica_dirs(self) -> dict[TopicPartitionReplica, str]:
        """Replicas with an explicit destination dir."""
        return {TopicPartitionReplica(self.topic, self.partition, b): d
                for b, d in zip(self.replicas, self.log_dirs, strict=True) if d != ANY_LOG_DIR}


def _load(path: str) -> Any:
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise AdminError(f"cannot read {path}: {e.strerror or e}") from None
    try:
        return bounded_json.loads(data)
    except ValueError as e:
        raise AdminError(f"{path} is not valid JSON: {bounded_json.reason(e)}") from None


def _partitions(data: Any, path: str) -> list[dict[str, Any]]:
    if not isinstance(data, dict) or not isinstance(data.get("partitions"), list):
        raise AdminError(f'{path}: expected a JSON object with a "partitions" array')
    version = data.get("version", 1)
    if version != 1:
        raise AdminError(f"{path}: unsupported version {version!r} (expected 1)")
    for i, p in enumerate(data["partitions"]):
        if not isinstance(p, dict):
            raise AdminError(f"{path}: partitions[{i}] is not a JSON object")
        if not isinstance(p.get("topic"), str) or not p["topic"]:
            raise AdminError(f'{path}: partitions[{i}] needs a "topic" string')
        if not _is_int(p.get("partition")) or p["partition"] < 0:
            raise AdminError(f'{path}: partitions[{i}] needs a non-negative integer "partition"')
    return data["partitions"]


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_dir(log_dir: Any, where: str) -> str:
    if not isinstance(log_dir, str) or not (log_dir == ANY_LOG_DIR or log_dir.startswith("/")):
        raise AdminError(f'{where}: log dir {log_dir!r} must be "any" or an absolute path')
    return log_dir


def load_reassignment(path: str) -> list[PartitionTarget]:
    targets: list[PartitionTarget] = []
    seen: set[tuple[str, int]] = set()
    for p in _partitions(_load(path), path):
        name = f"{p['topic']}-{p['partition']}"
        replicas = p.get("replicas")
        if not isinstance(replicas, list) or not replicas or not all(_is_int(r) and r >= 0 for r in replicas):
            raise AdminError(f'{path}: partition {name} needs a non-empty "replicas" array of broker ids')
        if len(set(replicas)) != len(replicas):
            raise AdminError(f"Partition replica lists may not contain duplicate entries: {name}")
        log_dirs = p.get("log_dirs", [ANY_LOG_DIR] * len(replicas))
        if not isinstance(log_dirs, list):
            raise AdminError(f'{path}: partition {name}: "log_dirs" must be an array')
        if len(log_dirs) != len(replicas):
            raise AdminError(f"Size of replicas list {replicas} is different from size of log dirs list "
                           f"{log_dirs} for partition {name}")
        key = (p["topic"], p["partition"])
        if key in seen:
            raise AdminError(f"Partition reassignment contains duplicate topic partitions: {name}")
        seen.add(key)
        dirs = tuple(_check_dir(d, f"{path}: partition {name}") for d in log_dirs)
        targets.append(PartitionTarget(p["topic"], p["partition"], tuple(replicas), dirs))
    if not targets:
        raise AdminError(f"{path}: the reassignment names no partitions")
    return targets


def load_move(path: str, broker: int) -> dict[TopicPartitionReplica, str]:
    """kafka-log-dirs.sh --move's assignment: every entry names the destination dir on `broker`."""
    moves: dict[TopicPartitionReplica, str] = {}
    for p in _partitions(_load(path), path):
        name = f"{p['topic']}-{p['partition']}"
        replica = TopicPartitionReplica(p["topic"], p["partition"], broker)
        if replica in moves:
            raise AdminError(f"Partition reassignment contains duplicate topic partitions: {name}")
        log_dir = _check_dir(p.get("log_dir"), f"{path}: partition {name}")
        if log_dir == ANY_LOG_DIR:
            raise AdminError(f'{path}: partition {name}: --move needs a log dir, not "any"')
        moves[replica] = log_dir
    if not moves:
        raise AdminError(f"{path}: the assignment names no partitions")
    return moves


def reassignment_json(targets: list[PartitionTarget]) -> str:
    """Kafka's compact formatting: no spaces, fields in Kafka's order."""
    return json.dumps({"version": 1, "partitions": [
        {"topic": t.topic, "partition": t.partition, "replicas": list(t.replicas), "log_dirs": list(t.log_dirs)}
        for t in targets]}, separators=(",", ":"))


def move_json(dirs: dict[TopicPartitionReplica, str]) -> str:
    return json.dumps({"version": 1, "partitions": [
        {"topic": r.topic, "partition": r.partition, "log_dir": d} for r, d in dirs.items()]},
        separators=(",", ":"))
