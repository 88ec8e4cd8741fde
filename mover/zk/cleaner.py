"""The elected broker's duties (kazoo's Lock recipe on CLEANER_ELECTION; one holder in the cluster at a time):

* give every new entry of `/admin/reassign_partitions` a request id (a descriptor in the status tree), so all
  brokers report that entry under the same id;
* remove finished entries from `/admin/reassign_partitions` (finished: every broker the entry names reported its
  replica done), and delete the znode when it is empty, as Kafka's controller does; entries that finished
  completed also set the partition's replicas in `/brokers/topics/<topic>` to the entry's, which is what
  kafka-reassign-partitions.sh --verify compares;
* record unreadable reassignments and entries in the status tree and take them out of the znode (they can never
  be carried out, and Kafka's tool cannot write a new reassignment while the znode exists);
* set `end_ms` on finished requests and delete status older than reassign.partitions.status.min.retention.ms;
* purge `/config/changes` notifications older than 15 minutes (Kafka's ZkNodeChangeNotificationListener does).

Leadership is checked before every round: a cleaner whose session was suspended or lost stops at once, and the lock
is taken again on the next session. Another broker takes over within the session timeout when the holder dies.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from kazoo.exceptions import BadVersionError, LockTimeout, NoNodeError, NotEmptyError
from kazoo.recipe.lock import Lock

from mover.zk import znodes
from mover.zk.client import ZK_ERRORS, ZkSession
from mover.zk.status import DONE_STATES, ORIGIN_WIRE, ORIGIN_ZNODE, StatusTree, now_ms

log = logging.getLogger(__name__)

CONFIG_CHANGE_EXPIRATION_MS = 15 * 60 * 1000


class ReassignmentCleaner:
    def __init__(self, session: ZkSession, broker_id: int, retention_ms: int, *, interval_s: float = 1.0) -> None:
        self.session = session
        self.broker_id = broker_id
        self.retention_ms = retention_ms
        self.interval_s = interval_s
        self.is_leader = False
        # The coordinator's fence: stand for election and act only while this broker holds its registration in the
        # current session (a broker whose id another broker took must not clean up for the cluster).
        self.may_act: Callable[[], bool] = lambda: True
        self._stop = threading.Event()
        # Set by watches on the znodes a round read (the reassignment, the brokers' status): the next round runs at
        # once instead of at the next interval.
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._run, name="zk-cleaner", daemon=True)
        self._last_bad_mzxid = -1
        self._unreleased: Lock | None = None
        self._next_purge_ms = 0

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._term()
            except Exception:  # noqa: BLE001 - the thread must outlive anything one term throws
                log.exception("reassignment cleaner: election failed; trying again")
                self.is_leader = False
                self._stop.wait(0.5)

    def _term(self) -> None:
        """Wait to be elected, then act until the session is replaced or the daemon stops. A suspended connection
        only pauses the term: the session (and with it the lock node) may come back; releasing then would fail and
        leave this session's node in front of every other broker's."""
        if not self.session.connected or not self.may_act():
            self._stop.wait(0.1)
            return
        client = self.session.client
        session_id = self.session.session_id
        if self._unreleased is not None:
            try:
                self._unreleased.release()
                self._unreleased = None
            except ZK_ERRORS:
                self._stop.wait(0.2)
                return
        lock = Lock(client, znodes.CLEANER_ELECTION, str(self.broker_id))
        try:
            if not lock.acquire(timeout=1.0):
                return
        except LockTimeout:
            return
        except ZK_ERRORS as e:
            log.debug("cleaner election: %s", e)
            self._stop.wait(0.2)
            return
        log.info("broker %d elected to clean up reassignments", self.broker_id)
        self.is_leader = True
        tree = StatusTree(client)
        try:
            while not self._stop.is_set():
                current = self.session.session_id
                if self.session.state == "expired" or (current is not None and current != session_id):
                    return  # the session and its lock node are gone: stand again
                if current is not None and not self.may_act():
                    log.info("broker %d no longer cleans up reassignments (fenced)", self.broker_id)
                    return  # fenced: step down (the lock is released below), stand again once it may act
                if current is None:
                    self._stop.wait(0.1)  # suspended: wait for the same session to come back
                    continue
                try:
                    self.round(tree)
                except ZK_ERRORS as e:
                    log.warning("reassignment cleanup: %s", e or type(e).__name__)
                except Exception:  # noqa: BLE001 - the cleaner must not die on a bug in one round
                    log.exception("reassignment cleanup crashed")
                self._wake.wait(self.interval_s)
                self._wake.clear()
        finally:
            self.is_leader = False
            if self.session.session_id == session_id:
                try:
                    lock.release()
                except ZK_ERRORS:
                    self._unreleased = lock  # released at the next term, before standing again

    # ------------------------------------------------------------------ one round

    def round(self, tree: StatusTree) -> None:
        client = self.session.client
        tree.refresh()
        try:
            data, stat = client.get(znodes.REASSIGN_PARTITIONS, watch=self._woken)
        except NoNodeError:
            data, stat = None, None
            client.exists(znodes.REASSIGN_PARTITIONS, watch=self._woken)
        entries: list[znodes.ReassignmentEntry] = []
        unreadable: list[tuple[object, str]] = []
        if stat is not None:
            try:
                parsed = znodes.decode_reassignment(data)
                entries, unreadable = parsed.entries, parsed.errors
            except znodes.ZnodeFormatError as e:
                if stat.mzxid != self._last_bad_mzxid:
                    self._last_bad_mzxid = stat.mzxid
                    raw = (data or b"").decode("utf-8", errors="replace")[:1000]
                    rid = tree.allocate({"origin": ORIGIN_ZNODE, "partitions": [],
                                         "errors": [{"entry": raw, "error": str(e)}], "end_ms": now_ms()})
                    log.warning("%s is unreadable (%s): recorded as request %d and removed",
                                znodes.REASSIGN_PARTITIONS, e, rid)
                    try:
                        client.delete(znodes.REASSIGN_PARTITIONS, version=stat.version)
                    except (NoNodeError, BadVersionError):
                        pass
                return
        live = set(_ids(client))
        uncovered = [e for e in entries if tree.find(e.to_json()) is None]
        if uncovered or unreadable:
            rid = tree.allocate({"origin": ORIGIN_ZNODE, "partitions": [e.to_json() for e in uncovered],
                                 "errors": [{"entry": raw, "error": why} for raw, why in unreadable]})
            log.info("reassignment request %d: %d partitions%s", rid, len(uncovered),
                     f", {len(unreadable)} unreadable entries" if unreadable else "")
        finished: list[znodes.ReassignmentEntry] = []
        for entry in entries:
            rid = tree.find(entry.to_json())
            if rid is None:
                continue
            states = [self._state(client, rid, b, entry) for b in entry.replicas]
            if all(s in DONE_STATES for s in states) and all(b in live for b in entry.replicas):
                finished.append(entry)
                if all(s == "completed" for s in states):
                    self._set_assignment(client, entry)
        if stat is not None and (finished or unreadable):
            remaining = [e for e in entries if e not in finished]
            try:
                if remaining:
                    client.set(znodes.REASSIGN_PARTITIONS, znodes.encode_reassignment(remaining), version=stat.version)
                else:
                    client.delete(znodes.REASSIGN_PARTITIONS, version=stat.version)
                entries = remaining
                log.info("reassignment: %d entries finished, %d left", len(finished), len(remaining))
            except (BadVersionError, NoNodeError):
                return  # rewritten meanwhile: the next round sees the new content
        self._end_and_trim(client, tree, [e.to_json() for e in entries])
        if now_ms() >= self._next_purge_ms:
            self._purge_config_changes(client)
            self._next_purge_ms = now_ms() + 60_000

    def _state(self, client: Any, rid: int, broker: int, entry: znodes.ReassignmentEntry) -> str | None:
        try:
            data, _ = client.get(znodes.broker_status_path(rid, broker), watch=self._woken)
            body = znodes.decode_json_object(data, "broker status")
        except NoNodeError:
            # Not reported yet: wake when the broker creates it.
            client.exists(znodes.broker_status_path(rid, broker), watch=self._woken)
            return None
        except znodes.ZnodeFormatError:
            return None
        for r in body.get("replicas", []):
            if r.get("topic") == entry.tp.topic and r.get("partition") == entry.tp.partition:
                return r.get("state")
        return None

    def _woken(self, _event: object) -> None:
        # On kazoo's thread: only wake the cleaner's own thread.
        self._wake.set()

    def _set_assignment(self, client: Any, entry: znodes.ReassignmentEntry) -> None:
        path = znodes.topic_path(entry.tp.topic)
        for _ in range(5):
            try:
                data, stat = client.get(path)
                assignment = znodes.decode_topic(entry.tp.topic, data)
            except (NoNodeError, znodes.ZnodeFormatError):
                return
            if assignment.get(entry.tp.partition) == list(entry.replicas):
                return
            assignment[entry.tp.partition] = list(entry.replicas)
            try:
                client.set(path, znodes.encode_topic(assignment), version=stat.version)
                return
            except BadVersionError:
                continue

    def _end_and_trim(self, client: Any, tree: StatusTree, open_entries: list[dict[str, Any]]) -> None:
        now = now_ms()
        for d in list(tree.descriptors.values()):
            if d.ended:
                if int(d.data["end_ms"]) < now - self.retention_ms:
                    try:
                        client.delete(znodes.status_path(d.request_id), recursive=True)
                    except (NoNodeError, NotEmptyError):
                        pass
                    tree.descriptors.pop(d.request_id, None)
                continue
            if d.data.get("origin") == ORIGIN_WIRE:
                try:
                    data, _ = client.get(znodes.broker_status_path(d.request_id, int(d.data.get("broker", -1))))
                    done = bool(znodes.decode_json_object(data, "broker status").get("done"))
                except (NoNodeError, znodes.ZnodeFormatError):
                    done = False
            else:
                done = not any(p in open_entries for p in d.data.get("partitions", []))
            if done:
                d.data["end_ms"] = now
                try:
                    client.set(znodes.status_path(d.request_id), znodes.encode_json(d.data))
                except NoNodeError:
                    tree.descriptors.pop(d.request_id, None)

    def _purge_config_changes(self, client: Any) -> None:
        try:
            children = client.get_children(znodes.CONFIG_CHANGES)
        except NoNodeError:
            return
        cutoff = now_ms() - CONFIG_CHANGE_EXPIRATION_MS
        for name in children:
            if not name.startswith(znodes.CONFIG_CHANGE_PREFIX):
                continue
            stat = client.exists(f"{znodes.CONFIG_CHANGES}/{name}")
            if stat is not None and stat.ctime < cutoff:
                try:
                    client.delete(f"{znodes.CONFIG_CHANGES}/{name}")
                except NoNodeError:
                    pass


def _ids(client: Any) -> list[int]:
    try:
        return [int(c) for c in client.get_children(znodes.BROKER_IDS) if c.isdigit()]
    except NoNodeError:
        return []
