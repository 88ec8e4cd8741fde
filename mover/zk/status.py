"""KIP-179's status tree, `/admin/reassign_partitions_status`, and the request ids it hands out.

Layout (docs/zookeeper.md has the JSON):
* `/admin/reassign_partitions_status` itself is the request-id counter: every new request sets its data once, and
  the version that write produced is the request id. KIP-179 takes the version of `/admin/reassign_partitions`,
  but Kafka's controller deletes that znode when it empties (and Kafka's tool requires it absent before it creates
  it), which would restart ids at 0; the status root is never deleted, so its version is cluster-wide, monotonic
  and survives every restart, which is what KIP-179 asks of the id.
* `.../<request_id>`: the request's descriptor (where it came from, its partitions, entries that could not be read,
  when it ended). Written by whoever started the request; `end_ms` set by the elected cleaner.
* `.../<request_id>/<broker_id>`: that broker's per-replica progress, written only by that broker.

Everything here runs on the ZooKeeper worker thread (or the cleaner's), never on a client's request path.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError

from mover.moves import MoveState
from mover.wire import ErrorCode
from mover.wire.errors import error_name
from mover.zk import znodes
from mover.zk.znodes import ANY_LOG_DIR

if TYPE_CHECKING:
    from mover.log.log_manager import LogManager
    from mover.storage.names import TopicPartition

log = logging.getLogger(__name__)

ORIGIN_ZNODE = "reassign_partitions"
ORIGIN_WIRE = "AlterReplicaLogDirs"
DONE_STATES = frozenset({"completed", "cancelled", "failed"})


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class Descriptor:
    request_id: int
    data: dict[str, Any]

    @property
    def ended(self) -> bool:
        return int(self.data.get("end_ms", -1)) != -1

    def names(self, entry_json: dict[str, Any]) -> bool:
        return entry_json in self.data.get("partitions", [])


@dataclass
class StatusTree:
    """A cache of the request descriptors, refreshed from ZooKeeper on demand."""

    client: KazooClient
    descriptors: dict[int, Descriptor] = field(default_factory=dict)

    def refresh(self, *, reread_open: bool = True, watch: Callable[[Any], None] | None = None) -> None:
        try:
            children = self.client.get_children(znodes.REASSIGN_STATUS, watch=watch)
        except NoNodeError:
            children = []
        ids = {int(c) for c in children if c.isdigit()}
        for rid in list(self.descriptors):
            if rid not in ids:
                del self.descriptors[rid]
        for rid in sorted(ids):
            known = self.descriptors.get(rid)
            if known is not None and (known.ended or not reread_open):
                continue
            try:
                data, _ = self.client.get(znodes.status_path(rid))
                self.descriptors[rid] = Descriptor(rid, znodes.decode_json_object(data, f"status {rid}"))
            except NoNodeError:
                self.descriptors.pop(rid, None)
            except znodes.ZnodeFormatError as e:
                log.warning("ignoring %s: %s", znodes.status_path(rid), e)

    def allocate(self, descriptor: dict[str, Any]) -> int:
        """A new request id (the status root's next version) and its descriptor znode."""
        counter = znodes.encode_json({"version": 1})
        while True:
            try:
                stat = self.client.set(znodes.REASSIGN_STATUS, counter)
                break
            except NoNodeError:
                try:
                    self.client.create(znodes.REASSIGN_STATUS, counter, makepath=True)
                except NodeExistsError:
                    pass
        rid = stat.version
        body = {"version": 1, "request_id": rid, "created_ms": now_ms(), "end_ms": -1, **descriptor}
        self.client.create(znodes.status_path(rid), znodes.encode_json(body))
        self.descriptors[rid] = Descriptor(rid, body)
        return rid

    def find(self, entry_json: dict[str, Any]) -> int | None:
        """The newest open request whose partitions include this entry."""
        found = [d.request_id for d in self.descriptors.values()
                 if not d.ended and d.data.get("origin") == ORIGIN_ZNODE and d.names(entry_json)]
        return max(found) if found else None


def replica_status(manager: LogManager, tp: TopicPartition, log_dir: str, error: tuple[int, str] | None) -> dict:
    """One replica's progress toward `log_dir` ("any" = stay), read from the manager (never blocks on I/O)."""
    out: dict[str, Any] = {"topic": tp.topic, "partition": tp.partition, "log_dir": log_dir,
                           "state": "queued", "bytes_copied": 0, "bytes_total": -1, "error_code": 0,
                           "error": None, "error_message": None}

    def failed(code: int, message: str, state: str = "failed") -> dict:
        out.update(state=state, error_code=code, error=error_name(code) if code else None, error_message=message)
        return out

    if error is not None:
        return failed(*error)
    replica = manager.replicas.get(tp)
    if replica is None or replica.log is None:
        return failed(int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), f"{tp} is not on this broker")
    if replica.offline:
        return failed(int(ErrorCode.KAFKA_STORAGE_ERROR), f"{tp} is offline")
    move = replica.move
    if move is not None and not move.state.done:
        if log_dir == ANY_LOG_DIR or str(move.destination_dir) == log_dir:
            out.update(state=move.state.value, bytes_copied=move.bytes_copied,
                       bytes_total=move.bytes_total or -1)
            return out
        return failed(0, f"superseded by a move to {move.destination_dir}", "cancelled")
    if log_dir == ANY_LOG_DIR or str(replica.log_dir) == log_dir:
        size = replica.log.size
        # KIP-179's denominator is -1 when unknown, never 0: an empty partition has no total to count against.
        out.update(state="completed", bytes_copied=size, bytes_total=size if size > 0 else -1)
        return out
    outcome = manager.last_move_outcome(tp, Path(log_dir))
    if outcome is not None:
        ended = outcome.move
        if outcome.state is MoveState.FAILED:
            code = ended.error_code if ended.error_code > 0 else int(ErrorCode.KAFKA_STORAGE_ERROR)
            return failed(code, ended.error or "move failed")
        return failed(0, ended.error or f"cancelled; the replica is in {replica.log_dir}", "cancelled")
    return failed(0, f"the replica is in {replica.log_dir}", "cancelled")
