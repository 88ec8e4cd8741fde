"""The request store the tools use (mover-reassign, mover-log-dirs' reassignment verbs, mover-audit execute): the
cluster's status log (status_store.py) seen as one run's requests, with a heartbeat thread while a request runs, and
the throttle owners ReplicationThrottle asks (mover/admin/reassign/replication_throttle.py).

    with ClusterRequestStore.open(client, tool="mover-reassign") as store:
        rid, resumed = store.claim(partitions)   # the heartbeat runs until finish() or the end of the with
        ...
        store.finish(rid, "completed")

Leaving the `with` with the request still running (Ctrl-C, an error) marks it "stopped": the same --execute
resumes it at once, where a killed tool's request is "dead" only once its heartbeat is 3 periods late.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from mover.admin.client import Client, ClientError
from mover.admin.common import AdminError
from mover.admin.reassign.status_log import TOPIC
from mover.admin.reassign.status_store import (
    CANCELLED,
    COMPLETED,
    DEAD,
    FINAL,
    HEARTBEAT_S,
    RUNNING,
    STOPPED,
    Request,
    Say,
    StatusStore,
)


def heartbeat_period() -> float:
    """$MOVER_REASSIGN_HEARTBEAT_S, else 10 s: a run is dead 3 periods after its last heartbeat."""
    text = os.environ.get(HEARTBEAT_ENV, "")
    try:
        value = float(text) if text else HEARTBEAT_S
    except ValueError:
        raise AdminError(f"{HEARTBEAT_ENV}={text!r}: expected seconds") from None
    if not 0 < value <= 3600:
        raise AdminError(f"{HEARTBEAT_ENV}={text!r}: expected seconds between 0 and 3600")
    return value


def own_client(client: Client) -> Client:
    """A connection of the store's own to the cluster `client` talks to (the heartbeat thread needs one)."""
    bootstrap = ",".join(f"{h}:{p}" for _, (h, p) in sorted(client.brokers.items()))
    return Client(bootstrap, timeout=client.timeout, security=client.security)


HEARTBEAT_ENV = "MOVER_REASSIGN_HEARTBEAT_S"
TAKEN_OVER = "taken over"
# How often a run records its per-replica progress in the cluster (each record holds every running replica).
PROGRESS_EVERY_S = 30.0


class ClusterRequestStore:
    where = f"the cluster's topic {TOPIC}"

    def __init__(self, store: StatusStore, *, owned_client: Client | None = None, label: str | None = None) -> None:
        self.store = store
        self.label = label
        self._client = owned_client
        self._running: int | None = None  # the request this tool runs
        self._stop = threading.Event()
        self._beat: threading.Thread | None = None
        self._orphans: dict[str, list[int]] = {}  # resource -> requests not alive whose holds this tool restores
        self._next_progress = 0.0
        self._recorded_any = False  # the last progress recorded had replicas in it
        self.lost = False  # another tool resumed this run's request (its heartbeat was late): the run stops

    @classmethod
    def open(cls, client: Client, *, tool: str, say: Say | None = None, heartbeat_s: float | None = None,
             label: str | None = None) -> ClusterRequestStore:
        if heartbeat_s is None:
            heartbeat_s = heartbeat_period()
        mine = own_client(client)
        store = StatusStore(mine, tool=tool, say=say, heartbeat_s=heartbeat_s)
        if label is not None:
            store.me["label"] = label
        return cls(store, owned_client=mine, label=label)

    def __enter__(self) -> ClusterRequestStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """The heartbeat stops; a request left running is marked stopped (resumable at once)."""
        self._stop_heartbeat()
        rid, self._running = self._running, None
        if rid is not None:
            try:
                now = self.store.current(rid)
                if now.state == RUNNING and now.owner.get("run") == self.store.me["run"]:
                    self.store.finish(rid, CANCELLED if now.cancel_asked is not None else STOPPED)
            except (AdminError, ClientError):
                pass  # the heartbeat stops anyway: the request reads as dead in 3 periods
        if self._client is not None:
            self._client.close()

    # ------------------------------------------------------------------------------------------------ requests

    def claim(self, partitions: list[dict[str, Any]]) -> tuple[int, bool]:
        rid, resumed = self.store.claim(partitions)
        self._running = rid
        self._start_heartbeat(rid)
        return rid, resumed

    def lease(self, name: str, shared: bool = False) -> Request | None:
        """Hold the lease `name` (StatusStore.claim_lease), alone or `shared`, with this store's heartbeat: None when
        held now, else the live run in the way."""
        rid, holder = self.store.claim_lease(name, shared)
        if rid is not None:
            self._running = rid
            self._start_heartbeat(rid)
        return holder

    def latest(self) -> int | None:
        """The newest request that moves partitions (mover-audit execute's hold throttles only)."""
        listed = [r for r in self.store.list() if r.partitions]
        return listed[-1].id if listed else None

    def request(self, request_id: int) -> dict[str, Any]:
        req = self.store.get(request_id)
        return describe(req)

    def requests(self) -> list[Request]:
        return self.store.list()

    def running_for(self, partitions: set[tuple[str, int]]) -> int | None:
        """The latest request of exactly `partitions` that is not over (running, dead or stopped)."""
        for req in reversed(self.store.list()):
            if req.state not in FINAL and req.tps == partitions:
                return req.id
        return None

    def reloaded_state(self, request_id: int) -> str:
        if self.lost and request_id == self._running:
            return TAKEN_OVER
        try:
            req = self.store.current(request_id)
        except (AdminError, ClientError):
            return RUNNING  # the cluster away for a moment: the step engine's own checks decide
        if req.cancel_asked is not None:
            return CANCELLED
        return req.state

    def finish(self, request_id: int, state: str) -> None:
        self.store.finish(request_id, state)
        if request_id == self._running and state != RUNNING:
            self._stop_heartbeat()
            self._running = None

    def progress_tick(self, request_id: int, runs: Iterable[Any]) -> None:
        """The step engine's look at its running steps (PartitionRun: tp, ReplicaStatus by broker), recorded for
        anyone who asks at most every PROGRESS_EVERY_S: per new replica, its dir, KIP-179's Progress (the error as a
        Kafka code and its message) and when it was seen."""
        now = time.monotonic()
        if request_id != self._running:
            return
        seen_ms = int(time.time() * 1000)
        snapshot = [{"topic": run.tp[0], "partition": run.tp[1], "broker": broker, "log_dir": s.log_dir,
                     "numerator": s.progress.numerator, "denominator": s.progress.denominator,
                     "error_code": s.progress.error_code,
                     "error": None if s.progress.error is None else str(s.progress.error),
                     "complete": s.progress.complete, "stalled": broker in run.stalled,
                     "status_ms": s.status_ms if s.status_ms >= 0 else seen_ms}
                    for run in runs for broker, s in sorted(run.progress.items())]
        # Nothing running is said once, and does not hold back the first snapshot of the next steps.
        if (now < self._next_progress and bool(snapshot) == self._recorded_any) or (not snapshot
                                                                                   and not self._recorded_any):
            return
        self._next_progress = now + PROGRESS_EVERY_S
        self._recorded_any = bool(snapshot)
        try:
            self.store.record_progress(request_id, snapshot)
        except (AdminError, ClientError) as e:
            self.store.say(f"warning: progress of request {request_id} not recorded ({e})")

    def done(self) -> None:
        """The tool's request (mover-audit execute's, holding throttles only) is over once what it held is back."""
        if self._running is not None and not self.store.held(self._running):
            self.finish(self._running, COMPLETED)

    # ------------------------------------------------------------------------------------------------ throttles

    def _owner(self) -> int:
        if self._running is None:
            # mover-audit execute holds throttles without claiming partitions (its plan checks overlaps itself).
            self.claim([])
        assert self._running is not None
        return self._running

    def originals(self) -> dict[str, dict[str, str]]:
        """What this tool is to put back: its run's holds, or with no run (--verify, --cancel, an audit run after
        a killed one) the holds of requests that are no longer alive (of this label's, with a label)."""
        if self.lost:
            return {}  # the run that resumed the request holds them now
        if self._running is not None:
            return self.holding()
        self._orphans.clear()
        out: dict[str, dict[str, str]] = {}
        for req in self.store.list():
            if req.alive() or (self.label is not None and req.origin.get("label") != self.label):
                continue
            for resource, hold in req.throttles.items():
                if hold.ended_at is None:
                    self._orphans.setdefault(resource, []).append(req.id)
                    out.setdefault(resource, hold.original or {})
        return out

    @property
    def me_run(self) -> str:
        """This tool's run id, as its requests' owner names it."""
        return str(self.store.me["run"])

    def holding(self) -> dict[str, dict[str, str]]:
        """The resources this tool's run holds and has not left, with their originals (none before its first hold)."""
        if self._running is None or self.lost:
            return {}
        return {r: o or {} for r, o in self.store.held(self._running).items()}

    def take_over(self, other: Request, resources: Iterable[str]) -> list[str]:
        """The holds of a run of the same label that is over become this run's (StatusStore.take_over_holds)."""
        return self.store.take_over_holds(self._owner(), other, resources)

    def original(self, resource: str) -> dict[str, str] | None:
        if self._running is None or self.lost:
            return None
        return self.store.held(self._running).get(resource)

    def hold(self, resource: str, describe: Callable[[], dict[str, str]]) -> dict[str, str]:
        return self.store.hold_throttle(self._owner(), resource, describe)

    def release(self, resource: str) -> dict[str, str] | None:
        """The value to put back on `resource`, or None when another run still holds it."""
        owners = [self._running] if self._running is not None else self._orphans.get(resource, [])
        restore = None
        for rid in owners:
            if rid is None:
                continue
            self.store.adopt(rid)
            restore = self.store.release_throttle(rid, resource)
        return restore

    def ended(self, resource: str) -> None:
        owners = [self._running] if self._running is not None else self._orphans.pop(resource, [])
        for rid in owners:
            if rid is not None:
                self.store.throttle_ended(rid, resource)

    # ------------------------------------------------------------------------------------------------ heartbeat

    def _start_heartbeat(self, rid: int) -> None:
        self._stop_heartbeat()
        self._stop = threading.Event()
        stop = self._stop

        def beat() -> None:
            while not stop.wait(self.store.heartbeat_s):
                try:
                    if not self.store.heartbeat(rid):
                        self.lost = True
                        return
                except (AdminError, ClientError, OSError) as e:
                    self.store.say(f"warning: heartbeat of request {rid} not written ({e}); retried")

        self._beat = threading.Thread(target=beat, name=f"request-{rid}-heartbeat", daemon=True)
        self._beat.start()

    def _stop_heartbeat(self) -> None:
        self._stop.set()
        if self._beat is not None:
            self._beat.join()
            self._beat = None


def describe(req: Request) -> dict[str, Any]:
    """A request as the tools print it: its record with the state as it stands (dead when the heartbeat stopped)."""
    doc = req.doc()
    doc["state"] = req.status()
    doc["dead"] = doc["state"] == DEAD
    doc["progress"] = req.progress
    doc["progress_ms"] = req.progress_ms
    return doc
