"""This broker's side of `/admin/reassign_partitions` (KIP-113 + KIP-179).

* Watches the znode; an entry naming this broker with a log dir starts that move here through the same manager
  entry point as AlterReplicaLogDirs, so the checks and error codes are the same. "any" (or an entry without
  `log_dirs`, as Kafka's own tool writes it) asks nothing of this broker: the replica stays, and a move started for
  it over the wire is reported as its progress.
* Records AlterReplicaLogDirs requests received over the wire in the status tree, so the request id the client
  gets is cluster-wide (mover/zk/status.py). It does not write them into `/admin/reassign_partitions`: Kafka's
  kafka-reassign-partitions.sh sends AlterReplicaLogDirs before it creates that znode, and fails if it exists.
* Publishes this broker's per-replica progress under `/admin/reassign_partitions_status/<request_id>/<broker_id>`
  whenever it changes (polled on the worker's tick, and at once when a move ends).

All state here is touched only on the ZooKeeper worker thread.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kazoo.exceptions import NodeExistsError, NoNodeError
from kazoo.protocol.states import WatchedEvent

from mover.storage.names import TopicPartition
from mover.zk import znodes
from mover.zk.client import ZkSession
from mover.zk.status import DONE_STATES, ORIGIN_WIRE, StatusTree, now_ms, replica_status
from mover.zk.znodes import ANY_LOG_DIR

if TYPE_CHECKING:
    from mover.log.log_manager import LogManager

log = logging.getLogger(__name__)

# Published progress is rewritten at most this often per request while bytes move (the final state at once).
PROGRESS_INTERVAL_MS = 1000


@dataclass
class Tracked:
    tp: TopicPartition
    log_dir: str
    origin: str
    entry: dict[str, Any] | None  # the znode entry, to find its request id; None for a wire request
    request_id: int | None = None
    error: tuple[int, str] | None = None
    in_znode: bool = True
    last: dict[str, Any] | None = None  # the status last published


class ReassignmentExecutor:
    def __init__(self, session: ZkSession, manager: LogManager, broker_id: int) -> None:
        self.session = session
        self.manager = manager
        self.broker_id = broker_id
        self.tracked: dict[TopicPartition, Tracked] = {}
        self.tree: StatusTree | None = None
        self._published: dict[int, tuple[dict[str, Any], int]] = {}  # request id -> (body, written at ms)
        # Wire requests answered while ZooKeeper was away: (local request id, moves), recorded at the next connection.
        self.unrecorded: list[tuple[int, list[tuple[TopicPartition, str]]]] = []

    @property
    def client(self):  # noqa: ANN201 - KazooClient
        return self.session.client

    # ------------------------------------------------------------------ reading the znode

    def on_connected(self) -> None:
        self.tree = StatusTree(self.client)
        self.tree.refresh()
        self._published.clear()
        self._adopt_wire_requests()
        while self.unrecorded:
            local_id, moves = self.unrecorded[0]
            rid = self.record_wire_request(moves, local_id=local_id)
            self.unrecorded.pop(0)
            log.info("request %d, answered while ZooKeeper was away, recorded as request %d", local_id, rid)
        self.reread()

    def _watch(self, _event: WatchedEvent) -> None:
        self.session.post("reassignment", self.reread)

    def reread(self) -> None:
        stat = self.client.exists(znodes.REASSIGN_PARTITIONS, watch=self._watch)
        entries: list[znodes.ReassignmentEntry] = []
        if stat is not None:
            try:
                data, _ = self.client.get(znodes.REASSIGN_PARTITIONS, watch=self._watch)
            except NoNodeError:
                data = None
            if data is not None:
                try:
                    entries = znodes.decode_reassignment(data).entries
                except znodes.ZnodeFormatError as e:
                    # The elected cleaner records it in the status tree, removes it and logs it once for the
                    # cluster; nothing here can be carried out.
                    log.debug("ignoring %s: %s", znodes.REASSIGN_PARTITIONS, e)
        present: set[TopicPartition] = set()
        for entry in entries:
            log_dir = entry.log_dir_for(self.broker_id)
            if log_dir is None:
                continue
            present.add(entry.tp)
            known = self.tracked.get(entry.tp)
            if known is not None and known.log_dir == log_dir and known.entry == entry.to_json():
                known.in_znode = True
                continue
            self._start(entry, log_dir)
        for t in self.tracked.values():
            if t.entry is not None and t.tp not in present:
                t.in_znode = False
        self.publish()

    def _start(self, entry: znodes.ReassignmentEntry, log_dir: str) -> None:
        t = Tracked(entry.tp, log_dir, znodes.REASSIGN_PARTITIONS, entry.to_json())
        self.tracked[entry.tp] = t
        if log_dir == ANY_LOG_DIR:
            return
        messages: dict[TopicPartition, str] = {}
        codes, _ = self.manager.alter_replica_log_dirs([(entry.tp, log_dir)], record=False, messages=messages)
        code = codes.get(entry.tp, 0)
        if code:
            t.error = (code, messages.get(entry.tp, "rejected"))
            log.info("reassignment of %s to %s here: error %d (%s)", entry.tp, log_dir, code, t.error[1])
        else:
            log.info("reassignment: moving %s to %s", entry.tp, log_dir)

    # ------------------------------------------------------------------ requests over the wire

    def record_wire_request(self, moves: list[tuple[TopicPartition, str]], *, local_id: int | None = None) -> int:
        """On the worker: a request id from the status tree for moves started by AlterReplicaLogDirs. `local_id`:
        the broker-local id the client got because ZooKeeper was away when it asked."""
        assert self.tree is not None
        extra: dict[str, Any] = {} if local_id is None else {"local_request_id": local_id}
        rid = self.tree.allocate({
            "origin": ORIGIN_WIRE,
            "broker": self.broker_id,
            **extra,
            "partitions": [{"topic": tp.topic, "partition": tp.partition, "replicas": [self.broker_id],
                            "log_dirs": [d]} for tp, d in moves],
        })
        for tp, d in moves:
            self.tracked[tp] = Tracked(tp, d, ORIGIN_WIRE, None, rid, in_znode=False)
        self.publish()
        return rid

    def _adopt_wire_requests(self) -> None:
        """After a restart: this broker's open wire requests are reported on (the resumed moves, or how they
        ended), so their status reaches an end and the cleaner can retire them."""
        assert self.tree is not None
        for d in self.tree.descriptors.values():
            if d.ended or d.data.get("origin") != ORIGIN_WIRE or d.data.get("broker") != self.broker_id:
                continue
            for p in d.data.get("partitions", []):
                try:
                    tp = TopicPartition(p["topic"], p["partition"])
                    log_dir = p["log_dirs"][0]
                except (KeyError, IndexError, TypeError):
                    continue
                if tp not in self.tracked:
                    self.tracked[tp] = Tracked(tp, log_dir, ORIGIN_WIRE, None, d.request_id, in_znode=False)

    # ------------------------------------------------------------------ publishing progress

    def publish(self, *, force: bool = False) -> None:
        if not self.tracked or self.tree is None:
            return
        if any(t.request_id is None for t in self.tracked.values()):
            # Waiting for the elected broker's descriptor: publish again as soon as one appears.
            self.tree.refresh(reread_open=False, watch=self._descriptor_added)
            for t in self.tracked.values():
                if t.request_id is None and t.entry is not None:
                    t.request_id = self.tree.find(t.entry)
        by_request: dict[int, list[Tracked]] = {}
        for t in self.tracked.values():
            if t.request_id is not None:
                by_request.setdefault(t.request_id, []).append(t)
        now = now_ms()
        for rid, group in by_request.items():
            replicas = [replica_status(self.manager, t.tp, t.log_dir, t.error) for t in group]
            for t, r in zip(group, replicas, strict=True):
                t.last = r
            done = all(r["state"] in DONE_STATES for r in replicas)
            body = {"version": 1, "broker": self.broker_id, "request_id": rid, "done": done, "replicas": replicas}
            last = self._published.get(rid)
            if last is not None and last[0] == body:
                continue
            if last is not None and not done and not force and now - last[1] < PROGRESS_INTERVAL_MS \
                    and _states(last[0]) == _states(body):
                continue  # only bytes moved: rate-limit the rewrite
            self._write(rid, {**body, "updated_ms": now})
            self._published[rid] = (body, now)
        # A request's replicas are forgotten together, once it is published done and out of the znode: a later
        # rewrite of its status must still list every replica.
        for rid, group in by_request.items():
            if self._published.get(rid, ({},))[0].get("done") and not any(t.in_znode for t in group):
                for t in group:
                    del self.tracked[t.tp]
        for rid in [r for r in self._published if r not in {t.request_id for t in self.tracked.values()}]:
            del self._published[rid]

    def _descriptor_added(self, _event: WatchedEvent) -> None:
        self.session.post("publish", self.publish)

    def _write(self, rid: int, body: dict[str, Any]) -> None:
        path = znodes.broker_status_path(rid, self.broker_id)
        data = znodes.encode_json(body)
        try:
            self.client.set(path, data)
        except NoNodeError:
            try:
                self.client.create(path, data)
            except NoNodeError:
                log.info("request %d has no status znode any more (trimmed); not reporting on it", rid)
            except NodeExistsError:
                self.client.set(path, data)


def _states(body: dict[str, Any]) -> list[str]:
    return [r["state"] for r in body["replicas"]]
