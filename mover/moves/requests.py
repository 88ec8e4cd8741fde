"""MoveRequests: KIP-179's request ids and progress for replica moves.

Every AlterReplicaLogDirs that starts or redirects at least one move gets a request id: monotonic, and persisted so
it survives restarts. For each request the daemon reports, per replica, a Progress (seed 001: a numerator, a
nullable denominator, an error). A finished request's status is kept for
`reassign.partitions.status.min.retention.ms` after it completed, then forgotten.

Persistence: the table (ids, replicas, states, timestamps; not the byte counts, which change too fast to be worth
an fsync) is written to `move-requests.json` in every online log dir, atomically (tmp, fsync, rename, fsync of the
dir). At start-up the copy with the highest `next_id` wins, so losing a disk loses no id. Ids only grow: the next id
is always above every id in any copy read.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from mover.moves.replica_move import MoveState, ReplicaMove
from mover.storage.broker_files import BrokerFiles, as_broker_files
from mover.storage.names import TopicPartition

log = logging.getLogger(__name__)

FILE_NAME = "move-requests.json"


@dataclass
class ReplicaStatus:
    topic: str
    partition: int
    source_dir: str
    destination_dir: str
    state: str = MoveState.QUEUED.value
    bytes_copied: int = 0
    bytes_total: int = -1  # unknown
    error_code: int = 0
    error_message: str | None = None

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)

    @property
    def done(self) -> bool:
        return MoveState(self.state).done


@dataclass
class MoveRequest:
    request_id: int
    start_ms: int
    end_ms: int = -1
    replicas: list[ReplicaStatus] = field(default_factory=list)

    @property
    def done(self) -> bool:
        return all(r.done for r in self.replicas)


class MoveRequests:
    def __init__(self, retention_ms: int) -> None:
        self.retention_ms = retention_ms
        self._lock = threading.Lock()
        self._next_id = 1
        self._requests: dict[int, MoveRequest] = {}
        self._live: dict[int, tuple[int, int]] = {}  # id(ReplicaMove) -> (request id, index in replicas)
        self._moves: dict[int, ReplicaMove] = {}
        self._files = BrokerFiles(())  # set by load()

    # ---------------------------------------------------------------- persistence

    def load(self, files: BrokerFiles | Iterable[Path]) -> None:
        """The requests of the last run from `files` (moverd: every online log dir), where they are kept from now on."""
        self._files = as_broker_files(files)
        best = self._files.read_newest_json(FILE_NAME, lambda d: int(d.get("next_id", 0)), "move requests")
        if best is None:
            return
        self._next_id = int(best["next_id"])
        for raw in best.get("requests", []):
            replicas = [ReplicaStatus(**r) for r in raw.pop("replicas")]
            req = MoveRequest(replicas=replicas, **raw)
            # A move that was running when the daemon stopped is either resumed (re-attached by `adopt`) or gone.
            self._requests[req.request_id] = req
            self._next_id = max(self._next_id, req.request_id + 1)

    def _persist(self) -> None:
        # Every online dir, atomically and durably, so an id handed out is never handed out again.
        self._files.write_json(FILE_NAME, {
            "version": 1,
            "next_id": self._next_id,
            "requests": [asdict(r) for r in self._requests.values()],
        }, "move requests")

    # ---------------------------------------------------------------- recording

    def begin(self, moves: list[ReplicaMove]) -> int | None:
        """A request that started or redirected these moves; returns its id (None when it started none)."""
        if not moves:
            return None
        with self._lock:
            rid = self._next_id
            self._next_id += 1
            req = MoveRequest(rid, _now_ms())
            for move in moves:
                self._attach(req, move)
            self._requests[rid] = req
            self._expire()
            self._persist()
        return rid

    def rekey(self, old_id: int, new_id: int) -> None:
        """The request got a cluster-wide id (ZooKeeper, mover/zk): it is known by that id from now on, and ids
        handed out later stay above it."""
        with self._lock:
            req = self._requests.pop(old_id, None)
            if req is None:
                return
            req.request_id = new_id
            self._requests[new_id] = req
            for key, (rid, i) in list(self._live.items()):
                if rid == old_id:
                    self._live[key] = (new_id, i)
            self._next_id = max(self._next_id, new_id + 1)
            self._persist()

    def adopt(self, move: ReplicaMove) -> None:
        """A move resumed at start-up goes back under the request that started it, if it is still known."""
        with self._lock:
            for req in sorted(self._requests.values(), key=lambda r: -r.request_id):
                for i, status in enumerate(req.replicas):
                    if (status.tp == move.tp and status.destination_dir == str(move.destination_dir)
                            and status.state not in ("completed", "cancelled", "failed")):
                        self._live[id(move)] = (req.request_id, i)
                        self._moves[id(move)] = move
                        return

    def _attach(self, req: MoveRequest, move: ReplicaMove) -> None:
        status = ReplicaStatus(move.tp.topic, move.tp.partition, str(move.source_dir), str(move.destination_dir))
        req.replicas.append(status)
        self._live[id(move)] = (req.request_id, len(req.replicas) - 1)
        self._moves[id(move)] = move

    def move_ended(self, move: ReplicaMove, state: MoveState) -> None:
        """The move ended in `state` (its outcome's; the move takes it as its own only afterwards)."""
        with self._lock:
            key = self._live.pop(id(move), None)
            self._moves.pop(id(move), None)
            if key is None or state is MoveState.STOPPED:
                return
            req = self._requests.get(key[0])
            if req is None:
                return
            _fill(req.replicas[key[1]], move, state)
            if req.done:
                req.end_ms = _now_ms()
            self._persist()

    # ---------------------------------------------------------------- reading

    def latest_id(self) -> int | None:
        with self._lock:
            return max(self._requests) if self._requests else None

    def describe(self, request_id: int | None = None) -> list[MoveRequest]:
        """The request with that id (or the latest when None), with live progress; [] when unknown."""
        with self._lock:
            self._expire()
            if request_id is None or request_id < 0:
                if not self._requests:
                    return []
                request_id = max(self._requests)
            req = self._requests.get(request_id)
            if req is None:
                return []
            live = {k: m for k, m in self._moves.items() if self._live.get(k, (None,))[0] == request_id}
            snapshot = MoveRequest(req.request_id, req.start_ms, req.end_ms,
                                   [ReplicaStatus(**asdict(r)) for r in req.replicas])
            for k, move in live.items():
                _fill(snapshot.replicas[self._live[k][1]], move)
            return [snapshot]

    def _expire(self) -> None:
        cutoff = _now_ms() - self.retention_ms
        for rid in [r.request_id for r in self._requests.values() if r.end_ms != -1 and r.end_ms < cutoff]:
            del self._requests[rid]


def _fill(status: ReplicaStatus, move: ReplicaMove, state: MoveState | None = None) -> None:
    state = state or move.state
    status.state = state.value
    status.bytes_copied = move.bytes_copied
    # KIP-179's denominator: -1 when unknown, never 0 (an empty partition's move has no total to count against).
    status.bytes_total = move.bytes_total if move.bytes_total > 0 else -1
    status.error_code = move.error_code
    status.error_message = move.error


def _now_ms() -> int:
    return int(time.time() * 1000)
